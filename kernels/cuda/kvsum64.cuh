// Device code of kvsum64 shared by the CUDA kernels (definition in
// kernels/checksum_core.h). A warp owns each 4 KiB checksum block.
#pragma once

#include <cstdint>

#include "kernels/checksum_core.h"

namespace kvferry::cuda {

// Finishes checksum block `block` (m bytes) from each lane's sums S (keyed
// products) and D (words), and adds its digest to *sum. Each aligned group of
// 8 lanes holds checksum lanes 0..7 (`lane`); every lane of the warp calls it
// (the shuffles need the whole warp converged).
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

// The whole warp finishes block `block` (m bytes) where lane t holds the sums
// S, D of words j with j % 32 = t (so of checksum lane t % 8): two butterflies
// leave each checksum lane's sums on lanes 0..7, whose digest is added to *sum
// when `active` (uniform over the warp).
__device__ __forceinline__ void Kvsum64WarpFinish(uint64_t S, uint64_t D, uint64_t m, uint64_t block, bool active,
                                                  unsigned long long* sum) {
  for (int o = 8; o < 32; o *= 2) {
    S += __shfl_xor_sync(0xffffffffu, S, o);
    D += __shfl_xor_sync(0xffffffffu, D, o);
  }
  const uint32_t lane = threadIdx.x % 32;
  Kvsum64AddBlockLanes(S, D, m, block, static_cast<int>(lane % 8), active && lane < 8, sum);
}

// The whole warp adds the digest of checksum block `block` of bytes [0, n):
// lane t reads words t + 32 i (coalesced), so every word a lane reads
// belongs to checksum lane t % 8 (then Kvsum64WarpFinish). `key` holds Key(0..511) (shared memory). All 32
// lanes must call it. src.Word(off) loads the little-endian 8-byte word at
// byte offset off (a multiple of 8); src.Byte(off) one byte.
template <typename Src>
__device__ __forceinline__ void Kvsum64WarpBlockFrom(const Src& src, uint64_t n, uint64_t block, const uint64_t* key,
                                                     bool active, unsigned long long* sum) {
  using namespace kvferry::checksum;  // NOLINT
  const uint32_t lane = threadIdx.x % 32;
  uint64_t S = 0, D = 0, m = 0;
  if (active) {
    const uint64_t start = block * kBlockBytes;
    m = min(static_cast<uint64_t>(kBlockBytes), n - start);
    const uint32_t words = static_cast<uint32_t>(m / 8);
    for (uint32_t j = lane; j < words; j += 32) {
      const uint64_t w = src.Word(start + 8ull * j);
      S += Product(w, key[j]);
      D += w;
    }
    const uint64_t rem = m % 8;
    if (rem != 0 && lane == words % 32) {
      uint64_t t = 0;
      for (uint64_t k = 0; k < rem; ++k) t |= static_cast<uint64_t>(src.Byte(start + 8ull * words + k)) << (8 * k);
      t ^= rem << 56;
      S += Product(t, key[words]);
      D += t;
    }
  }
  Kvsum64WarpFinish(S, D, m, block, active, sum);
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

}  // namespace kvferry::cuda
