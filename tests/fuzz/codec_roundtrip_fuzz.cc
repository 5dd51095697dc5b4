// Fuzzes the encoder with arbitrary data, dtypes, layout hints and tile sizes
// (automatic, or forced to each size the format allows): every input
// round-trips bit-exactly and never grows past the header.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvferry::codec;  // NOLINT
  if (size < 3) return 0;
  EncodeOptions o;
  o.dtype = static_cast<DType>(1 + data[0] % 6);
  o.layout = {0, static_cast<uint32_t>(1 + data[1] % 8), static_cast<uint32_t>(1 + data[2] % 64)};
  o.threads = 1;
  const uint32_t tile_choice = data[0] / 6 % 4;  // 0: automatic, else 12, 13 or 14
  o.tile_log2 = tile_choice == 0 ? 0 : plan::kMinTileLog2 - 1 + tile_choice;
  const uint32_t es = Info(o.dtype)->bytes;
  const size_t n = (size - 3) / es * es;
  const uint8_t* in = data + 3;
  std::vector<uint8_t> chunk(MaxEncodedBytes(n));
  auto c = Encode(o, in, n, chunk.data(), chunk.size());
  if (!c.ok() || *c > MaxEncodedBytes(n)) std::abort();
  std::vector<uint8_t> back(n);
  auto d = Decode(chunk.data(), *c, back.data(), back.size(), 1);
  if (!d.ok() || *d != n || (n > 0 && std::memcmp(back.data(), in, n) != 0)) std::abort();
  return 0;
}
