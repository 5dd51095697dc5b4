// Wire format of one chunk: two messages on the transfer's endpoint, in order,
//   1. the header, exactly 48 bytes, tag HeaderTag(transfer_id);
//   2. the payload, `length` bytes, tag PayloadTag(transfer_id).
// Two messages let a sender put payload bytes on the wire straight from the KV
// pool (no gather copy) when they are contiguous there. Messages with one tag
// from one sender match receives in the order posted, so the k-th header pairs
// with the k-th payload. Transfer ids are 63-bit (top bit clear). Header
// fields, all little-endian:
//
//   off size field
//     0    4 magic        "KVFC" (0x4346564B)
//     4    2 version      1
//     6    2 flags        bit 0 ENCODED: the payload is a kvferry codec chunk
//                         (docs/codec-format.md) that decodes to this chunk's
//                         raw bytes; other bits must be 0
//     8    8 transfer_id  non-zero, < 2^63
//    16    4 seq          chunk index, < chunk_count
//    20    4 chunk_count  chunks in the transfer
//    24    8 offset       payload position in the transfer's byte stream
//    32    8 length       bytes of the payload message (for ENCODED chunks, the
//                         codec chunk's size, smaller than the raw range)
//    40    8 checksum     kvsum64 of the payload message as sent (checked
//                         before anything is decoded or written)
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace kvferry::transport {

constexpr uint32_t kChunkMagic = 0x4346564B;  // "KVFC"
constexpr uint16_t kChunkVersion = 1;
constexpr size_t kChunkHeaderBytes = 48;
constexpr uint16_t kChunkEncoded = 1;

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

// Parses and checks a received header message of `size` bytes: exact size,
// magic, version, flags, transfer id in (0, 2^63), seq < chunk_count, and that
// `length` equals the payload bytes actually received. Never reads past `size`.
absl::StatusOr<ChunkHeader> ParseChunkHeader(const uint8_t* msg, size_t size, uint64_t payload_received);

}  // namespace kvferry::transport
