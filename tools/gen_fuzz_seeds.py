#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/ (run from the repo root)."""
import os
import struct

P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
M = (1 << 64) - 1


def header(tid, seq, count, off, length, csum):
    return struct.pack('<IHHQIIQQQ', 0x4346564B, 1, 0, tid, seq, count, off, length, csum)


def write(target, name, data):
    d = os.path.join('tests/fuzz/corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


write('chunk_header', 'valid', struct.pack('<I', 100) + header(7, 0, 1, 0, 100, 0))
write('chunk_header', 'last_of_many', struct.pack('<I', 4096) + header(1 << 40, 9, 10, 9 * 4096, 4096, 12345))
write('chunk_header', 'short', struct.pack('<I', 1) + b'KVFC')

# A complete 4-chunk transfer; checksums are filled in by the target (flag 1).
msgs = b'\x01'
for seq in range(4):
    length = 4096 if seq < 3 else 100
    h = header(1, seq, 4, seq * 4096, length, 0)
    p = bytes((seq * 31 + i) & 0xff for i in range(length))
    msgs += struct.pack('<H', len(h)) + h + struct.pack('<H', len(p)) + p
write('chunk_receive', 'four_chunks', msgs)
write('chunk_receive', 'one_chunk_wrong_sum', b'\x00' + struct.pack('<H', 48) + header(1, 0, 4, 0, 16, 99) +
      struct.pack('<H', 16) + bytes(16))

body = bytes(range(40))
write('ucx_address', 'wrapped', b'KVFU' + struct.pack('<I', len(body)) + struct.pack('<Q', 0) + body)
write('ucx_address', 'empty', b'')
