// Fuzzes the chunk header parser: never crashes or reads past its input, and
// whatever it accepts re-encodes to the same bytes and satisfies its checks.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "transport/chunk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvferry::transport;  // NOLINT
  if (size < 4) return 0;
  uint32_t payload;
  std::memcpy(&payload, data, 4);
  auto h = ParseChunkHeader(data + 4, size - 4, payload);
  if (!h.ok()) return 0;
  // Only a split chunk's header message is longer: it carries a tail of at
  // least a codec header, counted in the length.
  const uint64_t tail = size - 4 - kChunkHeaderBytes;
  const bool split = (h->flags & kChunkSplit) != 0;
  if ((split ? tail < 64 || !(h->flags & kChunkEncoded) : tail != 0) || h->transfer_id == 0 ||
      (h->transfer_id >> 63) != 0 || h->seq >= h->chunk_count || h->length != payload + tail) {
    std::abort();
  }
  uint8_t again[kChunkHeaderBytes];
  EncodeChunkHeader(*h, again);
  if (std::memcmp(again, data + 4, kChunkHeaderBytes) != 0) std::abort();
  return 0;
}
