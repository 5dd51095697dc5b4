// Device code of kvsum64 shared by the CUDA kernels (definition in
// kernels/checksum_core.h). Eight consecutive threads own one 4 KiB block.
#pragma once

#include <cstdint>

#include "kernels/checksum_core.h"

namespace kvferry::cuda {

// Adds the digest of checksum block `block` of data[0, n) to *sum. Called by
// 8 consecutive threads (lanes 0..7 of a group, aligned within the warp), all
// of which must call it (the shuffles need the whole warp converged).
__device__ __forceinline__ void Kvsum64AddBlockDigest(const uint8_t* data, uint64_t n, uint64_t block, int lane,
                                                      bool active, unsigned long long* sum) {
  using namespace kvferry::checksum;  // NOLINT
  uint64_t S = 0, D = 0, m = 0;
  if (active) {
    const uint64_t start = block * kBlockBytes;
    m = min(static_cast<uint64_t>(kBlockBytes), n - start);
    const uint8_t* p = data + start;
    const uint32_t words = static_cast<uint32_t>(m / 8);
    const bool aligned = (reinterpret_cast<uintptr_t>(p) % 8) == 0;
    for (uint32_t j = lane; j < words; j += kLanes) {
      uint64_t w;
      if (aligned) {
        w = reinterpret_cast<const uint64_t*>(p)[j];
      } else {
        w = 0;
        for (int k = 0; k < 8; ++k) w |= static_cast<uint64_t>(p[8 * j + k]) << (8 * k);
      }
      S += Product(w, Key(j));
      D += w;
    }
    const uint64_t rem = m % 8;
    if (rem != 0 && static_cast<uint32_t>(lane) == words % kLanes) {
      const uint64_t t = TailWord(p + 8 * static_cast<uint64_t>(words), rem);
      S += Product(t, Key(words));
      D += t;
    }
  }
  const unsigned mask = 0xffffffffu;
  const uint64_t acc = Seed(block, lane) + S + __shfl_xor_sync(mask, D, 1);
  uint64_t lanes[kLanes];
  const int base = (threadIdx.x % 32) & ~(kLanes - 1);
  for (int l = 0; l < kLanes; ++l) lanes[l] = __shfl_sync(mask, acc, base + l);
  if (active && lane == 0) atomicAdd(sum, static_cast<unsigned long long>(MergeLanes(lanes, m)));
}

}  // namespace kvferry::cuda
