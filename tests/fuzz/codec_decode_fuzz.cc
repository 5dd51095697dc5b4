// Fuzzes the codec decoder with untrusted chunks: it must never crash, hang or
// overrun, and whatever it accepts must have passed its checksum.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/checksum.h"
#include "kernels/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvferry::codec;  // NOLINT
  auto info = Inspect(data, size);
  const size_t cap = info.ok() ? info->original_bytes : 4096;
  if (cap > (8u << 20)) return 0;  // keep inputs cheap; sizes are checked by Inspect itself
  std::vector<uint8_t> out(cap);
  auto n = Decode(data, size, out.data(), out.size(), 1);
  if (n.ok() && (!info.ok() || *n != info->original_bytes || kvferry::Kvsum64(out.data(), *n) != info->checksum)) {
    std::abort();
  }
  return 0;
}
