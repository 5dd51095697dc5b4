#include "kernels/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace kvferry {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Kvsum64, DetectsEverySingleBitFlip) {
  auto data = RandomBytes(3 * 4096 + 77, 1);
  const uint64_t ref = Kvsum64(data.data(), data.size());
  for (size_t pos : {size_t{0}, size_t{7}, size_t{4095}, size_t{4096}, size_t{8191}, data.size() - 1}) {
    for (int bit = 0; bit < 8; ++bit) {
      data[pos] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_NE(Kvsum64(data.data(), data.size()), ref) << "pos " << pos << " bit " << bit;
      data[pos] ^= static_cast<uint8_t>(1u << bit);
    }
  }
  EXPECT_EQ(Kvsum64(data.data(), data.size()), ref);
}

TEST(Kvsum64, SwappingBlocksChangesSum) {
  auto data = RandomBytes(2 * 4096, 2);
  const uint64_t ref = Kvsum64(data.data(), data.size());
  std::vector<uint8_t> swapped(data.begin() + 4096, data.end());
  swapped.insert(swapped.end(), data.begin(), data.begin() + 4096);
  EXPECT_NE(Kvsum64(swapped.data(), swapped.size()), ref);
}

TEST(Kvsum64, LengthMatters) {
  std::vector<uint8_t> zeros(4096 + 16, 0);
  std::vector<uint64_t> seen;
  for (size_t n : {0, 1, 7, 8, 9, 4095, 4096, 4097, 4112}) {
    const uint64_t s = Kvsum64(zeros.data(), n);
    for (uint64_t prev : seen) EXPECT_NE(prev, s) << "n=" << n;
    seen.push_back(s);
  }
}

TEST(Kvsum64, BuilderMatchesOneShotForAnySplit) {
  auto data = RandomBytes(5 * 4096 + 333, 3);
  const uint64_t ref = Kvsum64(data.data(), data.size());
  for (size_t step : {size_t{1000}, size_t{4096}, size_t{6000}}) {
    Kvsum64Builder b(data.data());
    for (size_t filled = step; filled < data.size(); filled += step) b.Update(filled);
    EXPECT_EQ(b.Finish(data.size()), ref) << "step " << step;
  }
}

TEST(Kvsum64, SimdMatchesScalarReference) {
  auto data = RandomBytes(4096 + 64, 5);
  for (size_t off : {size_t{0}, size_t{1}, size_t{7}}) {
    for (size_t m :
         {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{4095}, size_t{4096}}) {
      EXPECT_EQ(Kvsum64BlockDigest(data.data() + off, m, 3), Kvsum64BlockDigestScalar(data.data() + off, m, 3))
          << "off " << off << " m " << m;
    }
  }
}

TEST(Kvsum64, SwappingWordsWithinALaneChangesSum) {
  auto data = RandomBytes(4096, 6);
  const uint64_t ref = Kvsum64(data.data(), data.size());
  std::swap_ranges(data.begin(), data.begin() + 8, data.begin() + 64);  // word 0 <-> word 8
  EXPECT_NE(Kvsum64(data.data(), data.size()), ref);
}

TEST(Kvsum64, BlockDigestsSumToTheChecksum) {
  // The definition GPU code relies on: digests are independent and position-keyed.
  auto data = RandomBytes(3 * 4096 + 5, 4);
  Kvsum64Builder b(data.data());
  const uint64_t ref = b.Finish(data.size());
  EXPECT_EQ(ref, Kvsum64(data.data(), data.size()));
  EXPECT_NE(Kvsum64BlockDigest(data.data(), 4096, 0), Kvsum64BlockDigest(data.data(), 4096, 1));
}

}  // namespace
}  // namespace kvferry
