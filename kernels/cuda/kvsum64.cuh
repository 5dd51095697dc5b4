// Device code of kvsum64 shared by the CUDA kernels (definition in
// kernels/checksum_core.h). A warp owns each 4 KiB checksum block.
#pragma once

#include <cstdint>

#include "kernels/checksum_core.h"

namespace kvferry::cuda {

// Adds the digest of checksum block `block` (m bytes) to *sum. Each aligned
// group of 8 lanes holds checksum lanes 0..7 (`lane`), each lane its S[l] +
// D[l ^ 1] in `sd`; each lane computes its own Round, lane 0 of the group
// merges them. Every lane of the warp calls it (the shuffles need the whole
// warp converged).
__device__ __forceinline__ void Kvsum64AddBlockAcc(uint64_t sd, uint64_t m, uint64_t block, int lane, bool active,
                                                   unsigned long long* sum) {
  using namespace kvferry::checksum;  // NOLINT
  const uint64_t round = Round(0, Seed(block, lane) + sd);
  const int base = (threadIdx.x % 32) & ~(kLanes - 1);
  uint64_t d = MergeStart(m);
  for (int l = 0; l < kLanes; ++l) d = MergeStep(d, __shfl_sync(0xffffffffu, round, base + l));
  if (active && lane == 0) atomicAdd(sum, static_cast<unsigned long long>(Avalanche(d)));
}

// The same from each lane's sums S (keyed products) and D (words).
__device__ __forceinline__ void Kvsum64AddBlockLanes(uint64_t S, uint64_t D, uint64_t m, uint64_t block, int lane,
                                                     bool active, unsigned long long* sum) {
  Kvsum64AddBlockAcc(S + __shfl_xor_sync(0xffffffffu, D, 1), m, block, lane, active, sum);
}

// The whole warp finishes block `block` (m bytes) where lane t read the word
// pairs 2t + 64i, 2t + 64i + 1 (16 bytes at 16t + 512i), of checksum lanes
// 2p and 2p + 1, p = t % 4, and holds a = S[2p] + D[2p + 1] and
// b = S[2p + 1] + D[2p] of them (Kvsum64Pairs). The digest is added to *sum
// when `active` (uniform over the warp).
__device__ __forceinline__ void Kvsum64WarpFinishPairs(uint64_t a, uint64_t b, uint64_t m, uint64_t block,
                                                       bool active, unsigned long long* sum) {
  for (int o = 4; o < 32; o *= 2) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const int l = static_cast<int>(threadIdx.x % 8);  // checksum lane l is held by lane l / 2
  const uint64_t pa = __shfl_sync(0xffffffffu, a, l / 2), pb = __shfl_sync(0xffffffffu, b, l / 2);
  Kvsum64AddBlockAcc(l % 2 ? pb : pa, m, block, l, active && threadIdx.x % 32 < 8, sum);
}

// Per-lane kvsum64 sums of a warp that reads a 4 KiB block in 16-byte pieces:
// lane t the pieces at 16t + 512i, i.e. words 2t + 64i and 2t + 64i + 1, of
// checksum lanes 2p and 2p + 1 (p = t % 4). A lane keeps a = S[2p] + D[2p + 1]
// and b = S[2p + 1] + D[2p]; Finish() merges the warp's block.
struct Kvsum64Pairs {
  uint64_t a = 0, b = 0;

  // The piece's first word (key k0), then its second (k1); a word past the
  // data's end is not added, a partial one is added as the tail word.
  __device__ __forceinline__ void AddFirst(uint64_t w0, uint64_t k0) {
    a += checksum::Product(w0, k0);
    b += w0;
  }
  __device__ __forceinline__ void AddSecond(uint64_t w1, uint64_t k1) {
    b += checksum::Product(w1, k1);
    a += w1;
  }
  __device__ __forceinline__ void Add(uint64_t w0, uint64_t w1, ulonglong2 k) {
    AddFirst(w0, k.x);
    AddSecond(w1, k.y);
  }
  // The whole warp: adds block `block` (m bytes) to *sum and starts over.
  __device__ __forceinline__ void Finish(uint64_t block, uint64_t m, unsigned long long* sum) {
    Kvsum64WarpFinishPairs(a, b, m, block, true, sum);
    a = b = 0;
  }
};

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
