// Wire format of one data-plane message: a fixed 48-byte header followed by
// `length` payload bytes. All integers little-endian.
//
//   off size field
//     0    4 magic        "KVFC" (0x4346564B)
//     4    2 version      1
//     6    2 flags        0 (no flags defined; non-zero is rejected)
//     8    8 transfer_id  non-zero, equals the message tag
//    16    4 seq          chunk index, < chunk_count
//    20    4 chunk_count  chunks in the transfer
//    24    8 offset       payload position in the transfer's byte stream
//    32    8 length       payload bytes following the header
//    40    8 checksum     kvsum64 of the payload
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace kvferry::transport {

constexpr uint32_t kChunkMagic = 0x4346564B;  // "KVFC"
constexpr uint16_t kChunkVersion = 1;
constexpr size_t kChunkHeaderBytes = 48;

struct ChunkHeader {
  uint64_t transfer_id = 0;
  uint32_t seq = 0;
  uint32_t chunk_count = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;
};

// Writes the header into out[0..kChunkHeaderBytes).
void EncodeChunkHeader(const ChunkHeader& h, uint8_t* out);

// Parses and checks a received message of `size` bytes (header + payload):
// magic, version, flags, non-zero transfer id, seq < chunk_count, and that
// `length` equals the payload actually received. Never reads past `size`.
absl::StatusOr<ChunkHeader> ParseChunkHeader(const uint8_t* msg, size_t size);

}  // namespace kvferry::transport
