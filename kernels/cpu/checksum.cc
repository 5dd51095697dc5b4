#include "kernels/checksum.h"

#include <immintrin.h>

#include <array>
#include <cstring>

#include "kernels/checksum_core.h"

namespace kvferry {

using namespace checksum;  // NOLINT(google-build-using-namespace)

namespace {

struct KeyTable {
  alignas(64) uint64_t k[kWordsPerBlock + 1];  // +1: a tail word may follow 511 full words
  constexpr KeyTable() : k{} {
    for (uint32_t j = 0; j <= kWordsPerBlock; ++j) k[j] = Key(j);
  }
};
constexpr KeyTable kKeys;

// Full words from `first` (a multiple of 8) and the tail, scalar.
void Rest(const uint8_t* p, size_t m, size_t first, uint64_t S[kLanes], uint64_t D[kLanes]) {
  const size_t words = m / 8;
  for (size_t j = first; j < words; ++j) {
    uint64_t w;
    std::memcpy(&w, p + 8 * j, 8);
    S[j % kLanes] += Product(w, kKeys.k[j]);
    D[j % kLanes] += w;
  }
  if (const size_t rem = m % 8) {
    const uint64_t t = TailWord(p + 8 * words, rem);
    S[words % kLanes] += Product(t, kKeys.k[words]);
    D[words % kLanes] += t;
  }
}

uint64_t Combine(const uint64_t S[kLanes], const uint64_t D[kLanes], size_t m, uint64_t block_index) {
  uint64_t acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = Seed(block_index, l) + S[l] + D[l ^ 1];
  return MergeLanes(acc, m);
}

uint64_t DigestScalar(const uint8_t* p, size_t m, uint64_t block_index) {
  uint64_t S[kLanes] = {0}, D[kLanes] = {0};
  Rest(p, m, 0, S, D);
  return Combine(S, D, m, block_index);
}

__attribute__((target("avx2"))) uint64_t DigestAvx2(const uint8_t* p, size_t m, uint64_t block_index) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, d0 = s0, d1 = s0;
  const size_t stripes = m / 64;
  for (size_t s = 0; s < stripes; ++s) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * s));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * s + 32));
    const __m256i x0 = _mm256_xor_si256(w0, _mm256_load_si256(reinterpret_cast<const __m256i*>(kKeys.k + 8 * s)));
    const __m256i x1 = _mm256_xor_si256(w1, _mm256_load_si256(reinterpret_cast<const __m256i*>(kKeys.k + 8 * s + 4)));
    s0 = _mm256_add_epi64(s0, _mm256_mul_epu32(x0, _mm256_srli_epi64(x0, 32)));
    s1 = _mm256_add_epi64(s1, _mm256_mul_epu32(x1, _mm256_srli_epi64(x1, 32)));
    d0 = _mm256_add_epi64(d0, w0);
    d1 = _mm256_add_epi64(d1, w1);
  }
  alignas(32) uint64_t S[kLanes], D[kLanes];
  _mm256_store_si256(reinterpret_cast<__m256i*>(S), s0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(S + 4), s1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(D), d0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(D + 4), d1);
  Rest(p, m, stripes * 8, S, D);
  return Combine(S, D, m, block_index);
}

using DigestFn = uint64_t (*)(const uint8_t*, size_t, uint64_t);
// Chosen once at start-up from what the CPU supports.
const DigestFn kDigest = __builtin_cpu_supports("avx2") ? DigestAvx2 : DigestScalar;

}  // namespace

uint64_t Kvsum64BlockDigest(const uint8_t* p, size_t m, uint64_t block_index) { return kDigest(p, m, block_index); }
uint64_t Kvsum64BlockDigestScalar(const uint8_t* p, size_t m, uint64_t block_index) {
  return DigestScalar(p, m, block_index);
}

void Kvsum64Builder::Update(size_t filled) {
  while (hashed_ + kBlockBytes <= filled) {
    sum_ += kDigest(base_ + hashed_, kBlockBytes, hashed_ / kBlockBytes);
    hashed_ += kBlockBytes;
  }
}

uint64_t Kvsum64Builder::Finish(size_t total) {
  Update(total);
  if (hashed_ < total) {
    sum_ += kDigest(base_ + hashed_, total - hashed_, hashed_ / kBlockBytes);
    hashed_ = total;
  }
  return checksum::Finish(sum_, total);
}

uint64_t Kvsum64(const void* p, size_t n) {
  Kvsum64Builder b(p);
  return b.Finish(n);
}

}  // namespace kvferry
