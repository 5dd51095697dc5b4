#include "transport/chunk.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace kvferry::transport {
namespace {

template <typename T>
void Put(uint8_t* out, size_t off, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

template <typename T>
T Get(const uint8_t* in, size_t off) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[off + i]) << (8 * i);
  return v;
}

}  // namespace

void EncodeChunkHeader(const ChunkHeader& h, uint8_t* out) {
  Put<uint32_t>(out, 0, kChunkMagic);
  Put<uint16_t>(out, 4, kChunkVersion);
  Put<uint16_t>(out, 6, h.flags);
  Put<uint64_t>(out, 8, h.transfer_id);
  Put<uint32_t>(out, 16, h.seq);
  Put<uint32_t>(out, 20, h.chunk_count);
  Put<uint64_t>(out, 24, h.offset);
  Put<uint64_t>(out, 32, h.length);
  Put<uint64_t>(out, 40, h.checksum);
}

absl::StatusOr<ChunkHeader> ParseChunkHeader(const uint8_t* msg, size_t size, uint64_t payload_received) {
  if (msg == nullptr || size < kChunkHeaderBytes) {
    return absl::DataLossError(absl::StrFormat("chunk header of %d bytes, expected %d", size, kChunkHeaderBytes));
  }
  const uint32_t magic = Get<uint32_t>(msg, 0);
  if (magic != kChunkMagic) {
    return absl::DataLossError(absl::StrFormat("bad chunk magic 0x%08x", magic));
  }
  const uint16_t version = Get<uint16_t>(msg, 4);
  if (version != kChunkVersion) {
    return absl::DataLossError(absl::StrFormat("unsupported chunk version %d", version));
  }
  const uint16_t flags = Get<uint16_t>(msg, 6);
  if ((flags & ~(kChunkEncoded | kChunkSplit)) != 0 || flags == kChunkSplit) {
    return absl::DataLossError(absl::StrFormat("unknown chunk flags 0x%04x", flags));
  }
  const uint64_t tail = size - kChunkHeaderBytes;
  if ((flags & kChunkSplit) ? tail < 64 : tail != 0) {
    return absl::DataLossError(absl::StrFormat("chunk header message of %d bytes for flags 0x%04x", size, flags));
  }
  ChunkHeader h;
  h.flags = flags;
  h.transfer_id = Get<uint64_t>(msg, 8);
  h.seq = Get<uint32_t>(msg, 16);
  h.chunk_count = Get<uint32_t>(msg, 20);
  h.offset = Get<uint64_t>(msg, 24);
  h.length = Get<uint64_t>(msg, 32);
  h.checksum = Get<uint64_t>(msg, 40);
  if (h.transfer_id == 0 || (h.transfer_id & kPayloadTagBit) != 0) {
    return absl::DataLossError(absl::StrFormat("chunk has invalid transfer id %016x", h.transfer_id));
  }
  if (h.seq >= h.chunk_count) {
    return absl::DataLossError(absl::StrFormat("chunk seq %d out of range (chunk_count %d)", h.seq, h.chunk_count));
  }
  if (payload_received > UINT64_MAX - tail || h.length != payload_received + tail) {
    return absl::DataLossError(
        absl::StrFormat("chunk header says %d payload bytes, got %d", h.length, payload_received + tail));
  }
  return h;
}

}  // namespace kvferry::transport
