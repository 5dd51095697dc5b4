// Wire format of one chunk: two messages on the transfer's endpoint,
//   1. the payload, tag PayloadTag(transfer_id): the chunk's bytes, or, for a
//      SPLIT chunk, only the raw plane of its codec chunk (sent while the
//      sender is still coding the exponents);
//   2. the header, tag HeaderTag(transfer_id): 48 bytes, and for a SPLIT chunk
//      the rest of the codec chunk right after them: its 64-byte header and
//      everything after its raw plane.
// Two messages let a sender put payload bytes on the wire straight from the KV
// pool (no gather copy) when they are contiguous there. Messages with one tag
// from one sender match receives in the order posted, and a sender sends the
// payloads and the headers of a transfer's chunks in the same order, so the
// k-th header pairs with the k-th payload. Transfer ids are 63-bit (top bit
// clear). Header fields, all little-endian:
//
//   off size field
//     0    4 magic        "KVFC" (0x4346564B)
//     4    2 version      2
//     6    2 flags        bit 0 ENCODED: the payload is a kvferry codec chunk
//                         (docs/codec-format.md) that decodes to this chunk's
//                         raw bytes; bit 1 SPLIT (with ENCODED): the codec
//                         chunk travels as described above; other bits 0
//     8    8 transfer_id  non-zero, < 2^63
//    16    4 seq          chunk index, < chunk_count
//    20    4 chunk_count  chunks in the transfer
//    24    8 offset       payload position in the transfer's byte stream
//    32    8 length       bytes of the payload (for ENCODED chunks, the codec
//                         chunk's size; for SPLIT ones, its whole size: the
//                         payload message plus the header message's tail)
//    40    8 checksum     kvsum64 of those `length` bytes (for SPLIT chunks, of
//                         the reassembled codec chunk), checked before anything
//                         is decoded or written
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace kvferry::transport {

constexpr uint32_t kChunkMagic = 0x4346564B;  // "KVFC"
constexpr uint16_t kChunkVersion = 2;
constexpr size_t kChunkHeaderBytes = 48;
constexpr uint16_t kChunkEncoded = 1;
constexpr uint16_t kChunkSplit = 2;

constexpr uint64_t kPayloadTagBit = 1ull << 63;
constexpr uint64_t HeaderTag(uint64_t transfer_id) { return transfer_id; }
constexpr uint64_t PayloadTag(uint64_t transfer_id) { return transfer_id | kPayloadTagBit; }

struct ChunkHeader {
  uint64_t transfer_id = 0;
  uint32_t seq = 0;
  uint32_t chunk_count = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;
  uint16_t flags = 0;
};

// Writes the header into out[0..kChunkHeaderBytes).
void EncodeChunkHeader(const ChunkHeader& h, uint8_t* out);

// Parses and checks a received header message of `size` bytes: its size (48,
// or more only for a SPLIT chunk), magic, version, flags, transfer id in
// (0, 2^63), seq < chunk_count, and that `length` equals the payload bytes
// actually received (plus, for SPLIT, the tail: size - 48, which must hold at
// least the 64-byte codec header). Never reads past `size`.
absl::StatusOr<ChunkHeader> ParseChunkHeader(const uint8_t* msg, size_t size, uint64_t payload_received);

}  // namespace kvferry::transport
