// Synthetic KV-like test data for the codec tests: roughly Gaussian values
// with a log-normal scale per channel (KV caches carry per-channel scale).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/codec.h"

namespace kvferry::testing {

// `elements` values of `dtype`; channel = index mod `channels`; `sigma` is the
// spread of log(scale). bf16 rounds to nearest even; fp32 is exact; the other
// types take the high bytes of the float's bits (skewed, like real exponents).
inline std::vector<uint8_t> KvLike(codec::DType dtype, size_t elements, uint32_t channels, uint32_t seed,
                                   float sigma = 1.5f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> scale(channels);
  for (auto& s : scale) s = std::exp(sigma * g(rng));
  const uint32_t size = codec::Info(dtype)->bytes;
  std::vector<uint8_t> out(elements * size);
  for (size_t i = 0; i < elements; ++i) {
    const float v = g(rng) * scale[i % channels];
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if (dtype == codec::DType::kFP32) {
      std::memcpy(&out[4 * i], &u, 4);
      continue;
    }
    if (dtype == codec::DType::kBF16) u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
    for (uint32_t b = 0; b < size; ++b) out[size * i + b] = static_cast<uint8_t>(u >> (8 * (b + 4 - size)));
  }
  return out;
}

// bf16 elements whose exponents cycle through `exps` (so that a sample of
// the codec's sampled tables sees them all), with exponent `rare` at element
// 2048 + 5 only (4 KiB block 1, outside the sample); signs and mantissas vary.
inline std::vector<uint8_t> ExponentProbe(size_t elements, const std::vector<uint32_t>& exps, uint32_t rare) {
  std::vector<uint8_t> v(2 * elements);
  for (size_t i = 0; i < elements; ++i) {
    const uint32_t e = i == 2048 + 5 ? rare : exps[i % exps.size()];
    const uint16_t x = static_cast<uint16_t>((i & 1) << 15 | e << 7 | (i * 13 & 0x7f));
    std::memcpy(&v[2 * i], &x, 2);
  }
  return v;
}

// fp8 e5m2 elements with these exponent counts ({exponent, count}), in a
// shuffled order, their signs and mantissas varying.
inline std::vector<uint8_t> E5m2WithExponents(const std::vector<std::pair<uint32_t, uint32_t>>& counts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v;
  for (const auto& [e, n] : counts) {
    for (uint32_t i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>((rng() & 1) << 7 | (e & 31) << 2 | (rng() & 3)));
  }
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

// A bf16 value with this exponent, its sign and mantissa drawn from rng.
inline uint16_t RandomBf16(std::mt19937& rng, uint32_t exponent) {
  return static_cast<uint16_t>((rng() & 0x807fu) | (exponent & 255) << 7);
}

// bf16 elements with these exponent counts ({exponent, count}), in a
// shuffled order, their signs and mantissas varying.
inline std::vector<uint8_t> Bf16WithExponents(const std::vector<std::pair<uint32_t, uint32_t>>& counts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> values;
  for (const auto& [e, n] : counts) {
    for (uint32_t i = 0; i < n; ++i) values.push_back(RandomBf16(rng, e));
  }
  std::shuffle(values.begin(), values.end(), rng);
  std::vector<uint8_t> v(2 * values.size());
  std::memcpy(v.data(), values.data(), v.size());
  return v;
}

// Peaked exponent counts (one exponent holds 99.5% and 94% of the values)
// whose table refinement stops because the symbol of most gain is the donor
// itself: at once (at frequency 255), and after one move (at 240). Where a
// step up may gain as much as a step down loses (frequencies 240 and 255),
// a warp's side-by-side choice of donor and taker is tested here.
inline const std::vector<std::pair<uint32_t, uint32_t>> kDonorGainsMost[2] = {
    {{25, 65210}, {30, 326}}, {{5, 830}, {16, 898}, {23, 2411}, {26, 61396}}};

}  // namespace kvferry::testing
