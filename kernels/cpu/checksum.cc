#include <cstring>

#include "kernels/checksum.h"
#include "kernels/checksum_core.h"

namespace kvferry {

using namespace checksum;  // NOLINT(google-build-using-namespace)

uint64_t Kvsum64BlockDigest(const uint8_t* p, size_t m, uint64_t block_index) {
  uint64_t acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = Seed(block_index, l);
  const size_t words = m / 8;
  size_t j = 0;
  // Full 64-byte stripes: one word per lane, 8 independent multiply chains.
  for (; j + kLanes <= words; j += kLanes) {
    uint64_t w[kLanes];
    std::memcpy(w, p + 8 * j, sizeof(w));
    for (int l = 0; l < kLanes; ++l) acc[l] = Round(acc[l], w[l]);
  }
  for (; j < words; ++j) {
    uint64_t w;
    std::memcpy(&w, p + 8 * j, 8);
    acc[j % kLanes] = Round(acc[j % kLanes], w);
  }
  if (const size_t rem = m % 8) {
    acc[words % kLanes] = Round(acc[words % kLanes], TailWord(p + 8 * words, rem));
  }
  return MergeLanes(acc, m);
}

void Kvsum64Builder::Update(size_t filled) {
  while (hashed_ + kBlockBytes <= filled) {
    sum_ += Kvsum64BlockDigest(base_ + hashed_, kBlockBytes, hashed_ / kBlockBytes);
    hashed_ += kBlockBytes;
  }
}

uint64_t Kvsum64Builder::Finish(size_t total) {
  Update(total);
  if (hashed_ < total) {
    sum_ += Kvsum64BlockDigest(base_ + hashed_, total - hashed_, hashed_ / kBlockBytes);
    hashed_ = total;
  }
  return checksum::Finish(sum_, total);
}

uint64_t Kvsum64(const void* p, size_t n) {
  Kvsum64Builder b(p);
  return b.Finish(n);
}

}  // namespace kvferry
