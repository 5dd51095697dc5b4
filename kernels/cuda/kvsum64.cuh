// Device code of kvsum64 shared by the CUDA kernels (definition in
// kernels/checksum_core.h). Eight consecutive threads own one 4 KiB block.
#pragma once

#include <cstdint>

#include "kernels/checksum_core.h"

namespace kvferry::cuda {

// Finishes checksum block `block` (m bytes) from each lane's sums S (keyed
// products) and D (words), and adds its digest to *sum. Called by the 8
// consecutive threads that own the block, all of them (the shuffles need the
// whole warp converged).
__device__ __forceinline__ void Kvsum64AddBlockLanes(uint64_t S, uint64_t D, uint64_t m, uint64_t block, int lane,
                                                     bool active, unsigned long long* sum) {
  using namespace kvferry::checksum;  // NOLINT
  const unsigned mask = 0xffffffffu;
  const uint64_t acc = Seed(block, lane) + S + __shfl_xor_sync(mask, D, 1);
  uint64_t lanes[kLanes];
  const int base = (threadIdx.x % 32) & ~(kLanes - 1);
  for (int l = 0; l < kLanes; ++l) lanes[l] = __shfl_sync(mask, acc, base + l);
  if (active && lane == 0) atomicAdd(sum, static_cast<unsigned long long>(MergeLanes(lanes, m)));
}

// Adds the digest of checksum block `block` of bytes [0, n) to *sum. Called by
// 8 consecutive threads (lanes 0..7 of a group, aligned within the warp), all
// of which must call it (the shuffles need the whole warp converged).
// src.Word(off) loads the little-endian 8-byte word at byte offset off (a
// multiple of 8); src.Byte(off) one byte.
template <typename Src>
__device__ __forceinline__ void Kvsum64AddBlockDigestFrom(const Src& src, uint64_t n, uint64_t block, int lane,
                                                          bool active, unsigned long long* sum) {
  using namespace kvferry::checksum;  // NOLINT
  uint64_t S = 0, D = 0, m = 0;
  if (active) {
    const uint64_t start = block * kBlockBytes;
    m = min(static_cast<uint64_t>(kBlockBytes), n - start);
    const uint32_t words = static_cast<uint32_t>(m / 8);
    for (uint32_t j = lane; j < words; j += kLanes) {
      const uint64_t w = src.Word(start + 8ull * j);
      S += Product(w, Key(j));
      D += w;
    }
    const uint64_t rem = m % 8;
    if (rem != 0 && static_cast<uint32_t>(lane) == words % kLanes) {
      uint64_t t = 0;
      for (uint64_t k = 0; k < rem; ++k) t |= static_cast<uint64_t>(src.Byte(start + 8ull * words + k)) << (8 * k);
      t ^= rem << 56;
      S += Product(t, Key(words));
      D += t;
    }
  }
  Kvsum64AddBlockLanes(S, D, m, block, lane, active, sum);
}

// One contiguous buffer, any alignment.
struct ContiguousBytes {
  const uint8_t* p;
  bool aligned;
  __device__ __forceinline__ uint64_t Word(uint64_t off) const {
    if (aligned) return *reinterpret_cast<const uint64_t*>(p + off);
    uint64_t w = 0;
    for (int k = 0; k < 8; ++k) w |= static_cast<uint64_t>(p[off + k]) << (8 * k);
    return w;
  }
  __device__ __forceinline__ uint8_t Byte(uint64_t off) const { return p[off]; }
};

__device__ __forceinline__ void Kvsum64AddBlockDigest(const uint8_t* data, uint64_t n, uint64_t block, int lane,
                                                      bool active, unsigned long long* sum) {
  const ContiguousBytes src{data, reinterpret_cast<uintptr_t>(data) % 8 == 0};
  Kvsum64AddBlockDigestFrom(src, n, block, lane, active, sum);
}

}  // namespace kvferry::cuda
