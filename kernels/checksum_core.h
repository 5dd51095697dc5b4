// kvsum64: the checksum every kvferry chunk carries.
//
// Definition (shared by the CPU and CUDA implementations, bit for bit):
//   The input of n bytes is cut into 4096-byte blocks (the last may be short).
//   Block i (bytes b, length m) has a digest:
//     acc[l] = seed(i, l) for lanes l = 0..7
//     for each full 8-byte little-endian word w_j (j = 0..m/8-1):
//         acc[j % 8] = round(acc[j % 8], w_j)
//     if m % 8 != 0: the remaining bytes, zero padded to a word t, then
//         acc[(m/8) % 8] = round(acc[(m/8) % 8], t ^ ((uint64)(m % 8) << 56))
//     d = m * P5; for l in 0..7: d = (d ^ round(0, acc[l])) * P1 + P4
//     digest_i = avalanche(d)
//   kvsum64 = avalanche(n * P3 + sum_i digest_i)   (sum mod 2^64)
// The per-block digests are independent and summed, so GPU threads compute them
// in parallel and reduce; the block index in the seed makes the sum
// order-sensitive. Not cryptographic: it detects corruption, not forgery.
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
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

KVF_HD uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

KVF_HD uint64_t Round(uint64_t acc, uint64_t w) {
  acc += w * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}

KVF_HD uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

KVF_HD uint64_t Seed(uint64_t block_index, int lane) {
  return (block_index * kLanes + static_cast<uint64_t>(lane) + 1) * kP1 + kP5;
}

// Merges the 8 lane accumulators of a block of m bytes into its digest.
KVF_HD uint64_t MergeLanes(const uint64_t acc[kLanes], uint64_t m) {
  uint64_t d = m * kP5;
  for (int l = 0; l < kLanes; ++l) d = (d ^ Round(0, acc[l])) * kP1 + kP4;
  return Avalanche(d);
}

// Reads the trailing m % 8 bytes (zero padded) with their count in the top byte.
KVF_HD uint64_t TailWord(const uint8_t* p, size_t rem) {
  uint64_t t = 0;
  for (size_t k = 0; k < rem; ++k) t |= static_cast<uint64_t>(p[k]) << (8 * k);
  return t ^ (static_cast<uint64_t>(rem) << 56);
}

KVF_HD uint64_t Finish(uint64_t digest_sum, uint64_t n) {
  return Avalanche(n * kP3 + digest_sum);
}

}  // namespace kvferry::checksum
