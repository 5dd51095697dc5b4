// kvsum64: the checksum every kvferry chunk carries.
//
// Definition (shared bit for bit by the CPU and CUDA implementations):
//   The input of n bytes is cut into 4096-byte blocks (the last may be short).
//   In block i (bytes b, length m), word j is the j-th 8-byte little-endian
//   word (j < 512); a trailing partial word t (m % 8 bytes, zero padded) gets
//   t ^ ((m % 8) << 56) and index j = m / 8. Each word w_j belongs to lane
//   l = j % 8 and is mixed with a position key K_j = avalanche((j + 1) * P2):
//       x_j  = w_j ^ K_j
//       S[l] += lo32(x_j) * hi32(x_j)      (64-bit product)
//       D[l] += w_j
//   acc[l]   = seed(i, l) + S[l] + D[l ^ 1]            (all sums mod 2^64)
//   digest_i = merge(acc, m): d = m * P5; for l: d = (d ^ round(0, acc[l])) * P1 + P4;
//              digest = avalanche(d)
//   kvsum64  = avalanche(n * P3 + sum_i digest_i)
// Sums make every block and every lane independent (SIMD lanes on the CPU,
// threads on the GPU); position keys and block seeds make it order-sensitive.
// It detects corruption; it is not a defence against forgery.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define KVF_HD __host__ __device__ __forceinline__
#else
#define KVF_HD inline
#endif

namespace kvferry::checksum {

constexpr size_t kBlockBytes = 4096;
constexpr int kLanes = 8;
constexpr int kWordsPerBlock = kBlockBytes / 8;
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

KVF_HD constexpr uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

KVF_HD constexpr uint64_t Round(uint64_t acc, uint64_t w) { return Rotl(acc + w * kP2, 31) * kP1; }

KVF_HD constexpr uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

// Position key of word j of a block.
KVF_HD constexpr uint64_t Key(uint32_t j) { return Avalanche((uint64_t{j} + 1) * kP2); }

KVF_HD constexpr uint64_t Seed(uint64_t block_index, int lane) {
  return (block_index * kLanes + static_cast<uint64_t>(lane) + 1) * kP1 + kP5;
}

KVF_HD constexpr uint64_t Product(uint64_t w, uint64_t key) {
  const uint64_t x = w ^ key;
  return (x & 0xffffffffULL) * (x >> 32);
}

// The merge of a block's lanes, step by step: d = MergeStart(m), then
// d = MergeStep(d, Round(0, acc[l])) for l = 0..7, digest = Avalanche(d).
KVF_HD constexpr uint64_t MergeStart(uint64_t m) { return m * kP5; }
KVF_HD constexpr uint64_t MergeStep(uint64_t d, uint64_t round) { return (d ^ round) * kP1 + kP4; }

// Merges the lane accumulators of a block of m bytes into its digest.
KVF_HD uint64_t MergeLanes(const uint64_t acc[kLanes], uint64_t m) {
  uint64_t d = MergeStart(m);
  for (int l = 0; l < kLanes; ++l) d = MergeStep(d, Round(0, acc[l]));
  return Avalanche(d);
}

// The trailing m % 8 bytes (zero padded) with their count in the top byte.
KVF_HD uint64_t TailWord(const uint8_t* p, size_t rem) {
  uint64_t t = 0;
  for (size_t k = 0; k < rem; ++k) t |= static_cast<uint64_t>(p[k]) << (8 * k);
  return t ^ (static_cast<uint64_t>(rem) << 56);
}

KVF_HD constexpr uint64_t Finish(uint64_t digest_sum, uint64_t n) { return Avalanche(n * kP3 + digest_sum); }

}  // namespace kvferry::checksum
