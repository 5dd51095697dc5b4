// The codec's symbol-pair mode (format flag PAIRS): round trips, the
// encoder's choice, and a decoder that judges bad pair tables.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_plan.h"
#include "tests/util/kv_like.h"

namespace kvferry::codec {
namespace {

using testing::KvLike;

std::vector<uint8_t> Encoded(const EncodeOptions& o, const std::vector<uint8_t>& in) {
  std::vector<uint8_t> out(MaxEncodedBytes(in.size()));
  auto n = Encode(o, in.data(), in.size(), out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status();
  out.resize(n.ok() ? *n : 0);
  return out;
}

bool DecodesTo(const std::vector<uint8_t>& chunk, const std::vector<uint8_t>& want) {
  std::vector<uint8_t> out(want.size());
  auto n = Decode(chunk.data(), chunk.size(), out.data(), out.size());
  return n.ok() && *n == want.size() && out == want;
}

EncodeOptions Pairs(DType d) {
  EncodeOptions o;
  o.dtype = d;
  o.pairs = true;
  return o;
}

// bf16 whose neighbours' exponents are correlated (real KV has this between
// adjacent channels; tools/kv_capture.py): pair j's first exponent is one of
// 8, its second the same or one more. Pairs code 2 bits a symbol, single
// symbols about 3.
std::vector<uint8_t> Correlated(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(2 * n);
  uint32_t a = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    a = i % 2 == 0 ? 118 + r % 8 : a + (r >> 3) % 2;
    const uint16_t b = static_cast<uint16_t>(((r >> 4) & 0x8000) | a << 7 | ((r >> 8) & 0x7f));
    std::memcpy(&v[2 * i], &b, 2);
  }
  return v;
}

void SetExponent(std::vector<uint8_t>* v, size_t i, uint32_t e) {
  uint16_t b;
  std::memcpy(&b, &(*v)[2 * i], 2);
  b = static_cast<uint16_t>((b & 0x807f) | e << 7);
  std::memcpy(&(*v)[2 * i], &b, 2);
}

TEST(CodecPairs, RoundTripsEveryDtypeAndSizeClass) {
  for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3, DType::kFP8E5M2, DType::kBytes}) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{33}, size_t{1001}, kMaxTileSymbols - 1,
                     kMaxTileSymbols, kMaxTileSymbols + 1, 3 * kMaxTileSymbols + 17, size_t{300001},
                     (size_t{1} << 21) + 1}) {
      const auto in = KvLike(d, n, 128, static_cast<uint32_t>(n));
      for (uint32_t tile_log2 : {0u, 12u}) {
        auto o = Pairs(d);
        o.tile_log2 = tile_log2;
        const auto chunk = Encoded(o, in);
        EXPECT_TRUE(DecodesTo(chunk, in)) << DTypeName(d) << " n=" << n << " tile_log2=" << tile_log2;
        auto info = Inspect(chunk.data(), chunk.size());
        ASSERT_TRUE(info.ok()) << info.status();
        EXPECT_FALSE(info->pairs && info->stored);
      }
    }
  }
}

TEST(CodecPairs, PairsPayWhereNeighboursAreCorrelatedAndNeverCostMore) {
  const auto in = Correlated(3 * kMaxTileSymbols + 11, 7);
  EncodeOptions single;
  const auto s = Encoded(single, in);
  const auto p = Encoded(Pairs(DType::kBF16), in);
  auto info = Inspect(p.data(), p.size());
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->pairs);
  EXPECT_LT(p.size(), s.size());
  EXPECT_TRUE(DecodesTo(p, in));
  // Independent exponents: pairs are chosen only if their estimate is
  // cheaper, so never a larger chunk than a small margin of estimate error.
  const auto kv = KvLike(DType::kBF16, 5 * kMaxTileSymbols, 128, 3);
  const auto ks = Encoded(single, kv), kp = Encoded(Pairs(DType::kBF16), kv);
  EXPECT_LE(kp.size(), ks.size() + ks.size() / 500);
  EXPECT_TRUE(DecodesTo(kp, kv));
}

TEST(CodecPairs, PeakyDataIsCodedOneSymbolAtATime) {
  // One pair of probability > 1/2 would need a frequency above 2048.
  std::mt19937 rng(4);
  std::vector<uint8_t> in(2 * 50000);
  for (size_t i = 0; i < in.size() / 2; ++i) {
    const uint32_t e = rng() % 8 == 0 ? 120 + rng() % 4 : 127;
    const uint16_t b = static_cast<uint16_t>(e << 7 | (rng() & 0x7f));
    std::memcpy(&in[2 * i], &b, 2);
  }
  const auto chunk = Encoded(Pairs(DType::kBF16), in);
  auto info = Inspect(chunk.data(), chunk.size());
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->pairs);
  EXPECT_TRUE(DecodesTo(chunk, in));
}

TEST(CodecPairs, ManyDistinctSymbolsFallBackToSingleSymbols) {
  std::mt19937 rng(3);
  std::vector<uint8_t> in(2 * 100000);
  for (auto& b : in) b = static_cast<uint8_t>(rng());  // bf16 with ~256 exponents
  const auto chunk = Encoded(Pairs(DType::kBF16), in);
  auto info = Inspect(chunk.data(), chunk.size());
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->pairs);
  EXPECT_TRUE(DecodesTo(chunk, in));
}

TEST(CodecPairs, SampledChunksFallBackTileByTileWhereTheSampleMissedSomething) {
  // >= plan::kSampleMinElements bf16: both tables come from the sample
  // (every 16th 2048-element block). In blocks it skips: an exponent the
  // data has nowhere else (its tile is RAW), and a pair of known exponents
  // that never occurs elsewhere (its tile is coded with the order-0 table).
  const size_t n = plan::kSampleMinElements;
  auto in = Correlated(n, 11);
  SetExponent(&in, 2048 + 10, 200);      // tile 0 (8192-symbol tiles)
  SetExponent(&in, 5 * 8192 + 2048, 118);  // tile 5: pair (118, 125) = element 2048's first ...
  SetExponent(&in, 5 * 8192 + 2049, 125);  // ... and second
  const auto chunk = Encoded(Pairs(DType::kBF16), in);
  auto info = Inspect(chunk.data(), chunk.size());
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->pairs);
  EXPECT_EQ(info->tile_log2, 13u);
  EXPECT_EQ(info->raw_tiles, 1u);
  EXPECT_EQ(info->single_tiles, 1u);
  EXPECT_TRUE(DecodesTo(chunk, in));
}

// The pair table's offset in a pair chunk: after the header, the raw plane
// and the order-0 table (u16 lo, u16 count, count frequencies).
size_t PairTableAt(const std::vector<uint8_t>& chunk) {
  uint64_t raw = 0;
  std::memcpy(&raw, &chunk[40], 8);
  const size_t t = kHeaderBytes + raw;
  return t + 4 + 2 * (chunk[t + 2] | chunk[t + 3] << 8);
}

void Put16(std::vector<uint8_t>* v, size_t at, uint16_t x) {
  (*v)[at] = static_cast<uint8_t>(x);
  (*v)[at + 1] = static_cast<uint8_t>(x >> 8);
}

TEST(CodecPairs, BadPairTablesAndFlagsAreJudgedCorrupt) {
  const auto in = Correlated(kMaxTileSymbols + 3, 5);
  const auto chunk = Encoded(Pairs(DType::kBF16), in);
  ASSERT_TRUE(Inspect(chunk.data(), chunk.size())->pairs);
  std::vector<uint8_t> out(in.size());
  auto fails = [&](std::vector<uint8_t> bad, const char* what) {
    auto r = Decode(bad.data(), bad.size(), out.data(), out.size());
    EXPECT_FALSE(r.ok()) << what;
    if (!r.ok()) {
      EXPECT_TRUE(r.status().code() == absl::StatusCode::kDataLoss ||
                  r.status().code() == absl::StatusCode::kInvalidArgument)
          << what << ": " << r.status();
    }
  };
  const size_t t = PairTableAt(chunk);
  ASSERT_EQ(chunk[t] | chunk[t + 1] << 8, 118);  // lo
  ASSERT_EQ(chunk[t + 2] | chunk[t + 3] << 8, 9);  // S: exponents 118 .. 126
  for (uint16_t span : {0, 33}) {  // outside 1 .. plan::kMaxPairSpan
    auto bad = chunk;
    Put16(&bad, t + 2, span);
    fails(bad, "span");
  }
  {  // lo + S past the 256 symbols
    auto bad = chunk;
    Put16(&bad, t, 250);
    fails(bad, "range");
  }
  {  // a frequency above 2048 (the rest lowered so that the sum holds)
    auto bad = chunk;
    Put16(&bad, t + 4, 2049);
    for (size_t k = 1; k < 81; ++k) Put16(&bad, t + 4 + 2 * k, 0);
    Put16(&bad, t + 4 + 2, 4096 - 2049);
    fails(bad, "peak");
  }
  {  // a frequency changed: the table no longer sums to 4096
    auto bad = chunk;
    bad[t + 4 + 2 * 10] ^= 1;
    fails(bad, "sum");
  }
  {  // PAIRS with CHANNEL_GROUPS
    auto bad = chunk;
    bad[6] |= 2;
    fails(bad, "flags");
  }
  {  // PAIRS on a stored chunk
    auto bad = chunk;
    bad[6] |= 1;
    fails(bad, "stored");
  }
  // Every byte of the table section flipped: an error or the right bytes.
  for (size_t k = t; k < t + 4 + 2 * 81 + 8; ++k) {
    auto bad = chunk;
    bad[k] ^= 0x5a;
    auto r = Decode(bad.data(), bad.size(), out.data(), out.size());
    if (r.ok()) {
      EXPECT_EQ(out, in) << "byte " << k;
    }
  }
}

TEST(CodecPairs, SplitSendTakesThePlaneAndPairsStillDecode) {
  const auto in = Correlated(4 * kMaxTileSymbols, 9);
  auto o = Pairs(DType::kBF16);
  uint64_t plane = 0, estimate = 0;
  o.on_raw_plane = [&](uint64_t p, uint64_t e) {
    plane = p;
    estimate = e;
    return true;
  };
  std::vector<uint8_t> out(MaxSplitEncodedBytes(in.size()));
  auto n = Encode(o, in.data(), in.size(), out.data(), out.size());
  ASSERT_TRUE(n.ok()) << n.status();
  out.resize(*n);
  EXPECT_GT(plane, 0u);
  EXPECT_NEAR(static_cast<double>(estimate), static_cast<double>(*n), *n * 0.02);
  EXPECT_TRUE(Inspect(out.data(), out.size())->pairs);
  EXPECT_TRUE(DecodesTo(out, in));
}

}  // namespace
}  // namespace kvferry::codec
