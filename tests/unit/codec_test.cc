#include "kernels/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec_plan.h"
#include "tests/util/kv_like.h"

namespace kvferry::codec {
namespace {

std::vector<uint8_t> Encoded(const EncodeOptions& o, const std::vector<uint8_t>& in) {
  std::vector<uint8_t> out(MaxEncodedBytes(in.size()));
  auto n = Encode(o, in.data(), in.size(), out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status();
  out.resize(n.ok() ? *n : 0);
  return out;
}

std::vector<uint8_t> Decoded(const std::vector<uint8_t>& chunk, size_t capacity) {
  std::vector<uint8_t> out(capacity);
  auto n = Decode(chunk.data(), chunk.size(), out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status();
  out.resize(n.ok() ? *n : 0);
  return out;
}

using testing::KvLike;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

const DType kAll[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3, DType::kFP8E5M2, DType::kBytes};

// The integer planning shared with the CUDA encoder: a fixed-point log2 close
// to the real one and monotonic, and group arithmetic whose 16-group form
// gives every smaller group count by a shift.
TEST(CodecPlan, Log2Q16IsMonotonicAndWithinOneUlp) {
  uint32_t prev = 0;
  for (uint32_t f = 1; f <= 4096; ++f) {
    const uint32_t q = plan::Log2Q16(f);
    const double exact = std::log2(static_cast<double>(f)) * 65536.0;
    EXPECT_LE(std::fabs(q - exact), 1.0) << f;
    if (f > 1) {
      EXPECT_GT(q, prev) << f;
    }
    prev = q;
  }
  EXPECT_EQ(plan::Log2Q16(1), 0u);
  EXPECT_EQ(plan::Log2Q16(4096), 12u << 16);
}

// The format's plain normalisation (docs/codec-format.md, "Normalisation").
void PlainNormalisation(const uint64_t h[256], uint32_t f[256]) {
  uint64_t total = 0;
  for (int s = 0; s < 256; ++s) total += h[s];
  int64_t sum = 0;
  int most = 0;
  for (int s = 0; s < 256; ++s) {
    f[s] = h[s] == 0 ? 0 : static_cast<uint32_t>(std::max<uint64_t>(1, h[s] * plan::kM / total));
    sum += f[s];
    if (h[s] > h[most]) most = s;
  }
  if (sum < plan::kM) f[most] += static_cast<uint32_t>(plan::kM - sum);
  for (; sum > plan::kM; --sum) {
    int best = -1;
    for (int s = 0; s < 256; ++s) {
      if (f[s] > 1 && (best < 0 || f[s] > f[best])) best = s;
    }
    --f[best];
  }
}

uint64_t TableCostQ16(const uint64_t h[256], const uint32_t f[256]) {
  uint64_t q = 0;
  for (int s = 0; s < 256; ++s) q += h[s] == 0 ? 0 : plan::CostQ16(h[s], f[s]);
  return q;
}

// The refinement's donor for table f of h: the symbol (f > 1) of least
// loss, the lower on ties; -1 if none.
int CheapestDonor(const uint64_t h[256], const uint32_t f[256]) {
  int d = -1;
  for (int s = 0; s < 256; ++s) {
    if (h[s] != 0 && f[s] > 1 && (d < 0 || plan::MoveLoss(h[s], f[s]) < plan::MoveLoss(h[d], f[d]))) d = s;
  }
  return d;
}

// Refinement (fp8 e5m2's tables) keeps a valid table, never costs more, and
// stops where no unit move from one symbol to another lowers the cost: on
// histograms like e5m2's (a few common exponents, a long tail of rare ones)
// it moves units, and its result is a fixed point.
TEST(CodecPlan, RefinedTablesAreValidNoCostlierAndLocallyBest) {
  std::mt19937_64 rng(7);
  int moved = 0;
  for (int trial = 0; trial < 200; ++trial) {
    uint64_t h[256] = {};
    const int symbols = 2 + static_cast<int>(rng() % 31);
    for (int k = 0; k < symbols; ++k) {
      const double scale = std::pow(10.0, static_cast<double>(rng() % 60) / 10.0);  // 1 .. 10^6
      h[(k * 7 + trial) % 32] += 1 + static_cast<uint64_t>(scale * static_cast<double>(rng() % 1000) / 1000.0);
    }
    uint32_t f[256], r[256];
    PlainNormalisation(h, f);
    std::copy(f, f + 256, r);
    plan::RefineTable(h, r);
    uint32_t sum = 0;
    for (int s = 0; s < 256; ++s) {
      sum += r[s];
      EXPECT_EQ(r[s] == 0, h[s] == 0) << trial << " symbol " << s;
    }
    EXPECT_EQ(sum, plan::kM) << trial;
    EXPECT_LE(TableCostQ16(h, r), TableCostQ16(h, f)) << trial;
    moved += !std::equal(f, f + 256, r);
    uint32_t again[256];
    std::copy(r, r + 256, again);
    plan::RefineTable(h, again);
    EXPECT_TRUE(std::equal(r, r + 256, again)) << trial << ": not a fixed point";
    // No move from the cheapest donor to any other symbol pays.
    const int d = CheapestDonor(h, r);
    for (int s = 0; d >= 0 && s < 256; ++s) {
      if (h[s] != 0 && s != d && r[s] < plan::kM) {
        EXPECT_LE(plan::MoveGain(h[s], r[s]), plan::MoveLoss(h[d], r[d])) << trial << " " << d << " -> " << s;
      }
    }
  }
  EXPECT_GT(moved, 20) << "the refinement should move units on most such histograms";
}

// The refinement stops when the symbol of most gain is the donor, even where
// that symbol's step up gains as much as its step down loses (frequencies
// 240 and 255 of the integer log2): testing::kDonorGainsMost's histograms
// move 0 and 1 units, and end with donor and taker the same symbol.
TEST(CodecPlan, RefinementStopsWhenTheDonorGainsMost) {
  const int moves[2] = {0, 1};
  for (int c = 0; c < 2; ++c) {
    uint64_t h[256] = {};
    for (const auto& [e, n] : testing::kDonorGainsMost[c]) h[e] = n;
    uint32_t f[256], r[256];
    PlainNormalisation(h, f);
    std::copy(f, f + 256, r);
    plan::RefineTable(h, r);
    const int d = CheapestDonor(h, r);
    int moved = 0, t = -1;
    for (int s = 0; s < 256; ++s) {
      moved += r[s] > f[s] ? static_cast<int>(r[s] - f[s]) : 0;
      if (h[s] != 0 && r[s] < plan::kM && (t < 0 || plan::MoveGain(h[s], r[s]) > plan::MoveGain(h[t], r[t]))) t = s;
    }
    EXPECT_EQ(moved, moves[c]) << c;
    EXPECT_EQ(d, t) << c;
    EXPECT_GE(plan::MoveGain(h[d], r[d]), plan::MoveLoss(h[d], r[d])) << c << ": not a step that gains what it loses";
  }
}

TEST(CodecPlan, SixteenGroupsShiftToFewerGroups) {
  for (uint64_t channels : {2u, 3u, 5u, 16u, 17u, 192u, 1000u, 8192u}) {
    for (uint64_t rank = 0; rank < channels; ++rank) {
      const uint32_t g16 = plan::Group16(rank, channels);
      EXPECT_LT(g16, 16u);
      for (uint32_t groups : {2u, 4u, 8u}) {
        const uint32_t shift = groups == 2 ? 3 : groups == 4 ? 2 : 1;
        EXPECT_EQ(g16 >> shift, rank * groups / channels) << channels << " " << rank << " " << groups;
      }
    }
  }
  // Keys order by mean exponent, then by channel.
  EXPECT_LT(plan::ChannelKey(10, 4, 7), plan::ChannelKey(11, 4, 0));
  EXPECT_LT(plan::ChannelKey(10, 4, 0), plan::ChannelKey(10, 4, 1));
  EXPECT_EQ(plan::ChannelCount(10, 4, 1), 3u);
  EXPECT_EQ(plan::ChannelCount(10, 4, 2), 2u);
}

TEST(Codec, RoundTripsEveryDtypeAndSizeClass) {
  for (DType d : kAll) {
    const uint32_t es = Info(d)->bytes;
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{33}, size_t{1001}, kMaxTileSymbols / 2 - 1,
                     kMaxTileSymbols / 2, kMaxTileSymbols / 2 + 1, kMaxTileSymbols - 1, kMaxTileSymbols,
                     kMaxTileSymbols + 1, 3 * kMaxTileSymbols + 17, size_t{300000}, (size_t{1} << 21) + 1}) {
      auto in = KvLike(d, n, 128, static_cast<uint32_t>(n));
      EncodeOptions o;
      o.dtype = d;
      auto kv_opts = o;
      kv_opts.layout = {0, 8, 16};  // KV-aware mode as well
      EXPECT_EQ(Decoded(Encoded(kv_opts, in), in.size()), in) << DTypeName(d) << " n=" << n << " (KV-aware)";
      auto chunk = Encoded(o, in);
      ASSERT_LE(chunk.size(), MaxEncodedBytes(in.size()));
      EXPECT_EQ(Decoded(chunk, in.size()), in) << DTypeName(d) << " n=" << n;
      auto info = Inspect(chunk.data(), chunk.size());
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->elements, n);
      EXPECT_EQ(info->original_bytes, n * es);
      if (!info->stored) {  // for 2- and 4-byte elements 4096-symbol tiles from 256 Ki, 8192 above 2 Mi
        const uint32_t want = es < 2 || n < (1u << 18) ? 14u : n <= (1u << 21) ? 12u : 13u;
        EXPECT_EQ(info->tile_log2, want) << DTypeName(d) << " n=" << n;
        EXPECT_EQ(info->tiles, plan::TileCount(n, info->tile_log2));
      }
    }
  }
}

// Decoders accept every tile size for any chunk; an encoder may be told
// which to write. 1-byte elements in 4096- or 8192-symbol tiles (4 or 8 KiB
// of input a tile) are sizes no kvferry encoder picks on its own.
TEST(Codec, EveryTileSizeRoundTripsAndIsRecorded) {
  for (DType d : kAll) {
    for (size_t n : {size_t{1}, size_t{4097}, size_t{8193}, size_t{100001}}) {
      for (uint32_t log2 : {12u, 13u, 14u}) {
        for (bool kv : {false, true}) {
          EncodeOptions o;
          o.dtype = d;
          o.tile_log2 = log2;
          if (kv) o.layout = {0, 8, 16};
          const auto in = KvLike(d, n, 128, static_cast<uint32_t>(n + log2));
          const auto chunk = Encoded(o, in);
          EXPECT_EQ(Decoded(chunk, in.size()), in) << DTypeName(d) << " n=" << n << " log2=" << log2;
          auto info = Inspect(chunk.data(), chunk.size());
          ASSERT_TRUE(info.ok()) << info.status();
          if (!info->stored) {
            EXPECT_EQ(info->tile_log2, log2);
            EXPECT_EQ(info->tiles, plan::TileCount(n, log2));
          }
        }
      }
    }
  }
}

// plan::MaxTiles sizes the CUDA coders: no chunk of at most that many bytes
// gets more tiles from plan::TileLog2, whatever its dtype, and some chunk
// gets exactly that many.
TEST(Codec, MaxTilesBoundsEveryChunkOfThatSize) {
  std::mt19937_64 rng(8);
  for (uint64_t bytes : {uint64_t{1}, uint64_t{8192}, uint64_t{1} << 19, uint64_t{4} << 20, (uint64_t{4} << 20) + 2,
                         uint64_t{8} << 20, uint64_t{63} << 20, uint64_t{256} << 20}) {
    const uint64_t most = plan::MaxTiles(bytes);
    uint64_t seen = 0;
    for (uint32_t es : {1u, 2u, 4u}) {
      const uint64_t top = bytes / es;
      std::vector<uint64_t> ns = {top, top / 2, top / 3};
      for (uint64_t edge : {uint64_t{1} << 18, uint64_t{1} << 21, uint64_t{1} << 25}) {
        for (uint64_t n : {edge - 1, edge, edge + 1}) ns.push_back(n);
      }
      for (int k = 0; k < 200; ++k) ns.push_back(top == 0 ? 0 : rng() % (top + 1));
      for (uint64_t n : ns) {
        if (n > top) continue;
        const uint64_t tiles = plan::TileCount(n, plan::TileLog2(es, n));
        EXPECT_LE(tiles, most) << bytes << " bytes, " << es << "-byte elements, n=" << n;
        seen = std::max(seen, tiles);
      }
    }
    EXPECT_EQ(seen, most) << bytes;
  }
}

TEST(Codec, RejectsTileSizesOutsideTheFormat) {
  const auto in = KvLike(DType::kFP8E4M3, 50000, 64, 2);
  std::vector<uint8_t> out(MaxSplitEncodedBytes(in.size()));
  EncodeOptions o;
  o.dtype = DType::kFP8E4M3;
  for (uint32_t bad : {1u, 11u, 15u, 40u}) {
    o.tile_log2 = bad;
    EXPECT_EQ(Encode(o, in.data(), in.size(), out.data(), out.size()).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  // Split-send's size bound counts on tiles of at least 8 KiB of input.
  o.tile_log2 = 12;
  o.on_raw_plane = [](uint64_t, uint64_t) { return true; };
  EXPECT_EQ(Encode(o, in.data(), in.size(), out.data(), out.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (uint32_t log2 : {13u, 14u}) {
    o.tile_log2 = log2;
    EXPECT_TRUE(Encode(o, in.data(), in.size(), out.data(), out.size()).ok()) << log2;
  }
}

TEST(Codec, CompressesKvLikeBf16AndKvAwareModeIsNoWorse) {
  const uint32_t heads = 8, dim = 128;
  auto in = KvLike(DType::kBF16, 16 * 16 * heads * dim, heads * dim, 3);  // 16 blocks of 16 tokens
  EncodeOptions plain;
  auto p = Encoded(plain, in);
  EncodeOptions kv;
  kv.layout = {256, heads, dim};
  auto k = Encoded(kv, in);
  EXPECT_LT(p.size(), in.size() * 0.8) << "bf16 KV-like data should shrink";
  EXPECT_LE(k.size(), p.size());
  EXPECT_TRUE(Inspect(k.data(), k.size())->channel_groups) << "per-channel scale: groups should pay";
  EXPECT_EQ(Decoded(k, in.size()), in);
  // Within 1.5% of the order-0 bound (exponents at entropy + raw plane).
  const double bound = *Order0BoundBytes(DType::kBF16, in.data(), in.size());
  EXPECT_LT(p.size(), bound * 1.015) << "size " << p.size() << " bound " << bound;
}

TEST(Codec, SpecialValuesRoundTripBitExactly) {
  const uint16_t bf16[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0xffff, 0x0001, 0x807f, 0x7f7f, 0x3f80};
  std::vector<uint8_t> in;
  for (int rep = 0; rep < 5000; ++rep) {
    for (uint16_t v : bf16) {
      in.push_back(static_cast<uint8_t>(v));
      in.push_back(static_cast<uint8_t>(v >> 8));
    }
  }
  for (DType d : kAll) {
    EncodeOptions o;
    o.dtype = d;
    std::vector<uint8_t> use(in.begin(), in.begin() + (in.size() / Info(d)->bytes) * Info(d)->bytes);
    EXPECT_EQ(Decoded(Encoded(o, use), use.size()), use) << DTypeName(d);
  }
  // Every fp32 exponent and the NaN payloads.
  std::vector<uint8_t> f32;
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t m : {0u, 1u, 0x400000u, 0x7fffffu}) {
      for (uint32_t s : {0u, 1u}) {
        const uint32_t v = (s << 31) | (e << 23) | m;
        for (int b = 0; b < 4; ++b) f32.push_back(static_cast<uint8_t>(v >> (8 * b)));
      }
    }
  }
  EncodeOptions o;
  o.dtype = DType::kFP32;
  EXPECT_EQ(Decoded(Encoded(o, f32), f32.size()), f32);
}

TEST(Codec, RandomBytesNeverGrowPastTheBound) {
  for (DType d : kAll) {
    for (size_t n : {size_t{4}, size_t{4096}, size_t{1} << 20}) {
      auto in = RandomBytes(n, 9);
      EncodeOptions o;
      o.dtype = d;
      auto chunk = Encoded(o, in);
      EXPECT_LE(chunk.size(), in.size() + in.size() / 500 + 64) << DTypeName(d);
      EXPECT_EQ(Decoded(chunk, in.size()), in);
    }
  }
}

// Split-send: the hook sees the final raw plane before any exponent is coded
// and an estimate close to the real size. Declining changes nothing; taking
// the plane means no STORED fallback, within MaxSplitEncodedBytes.
TEST(Codec, RawPlaneHookSeesTheFinalPlaneAndBindsTheEncoder) {
  for (DType d : kAll) {
    for (bool random : {false, true}) {
      for (size_t n : {size_t{0}, size_t{64}, size_t{100000}, size_t{1} << 20}) {
        auto in = random ? RandomBytes(n, 21) : KvLike(d, n / Info(d)->bytes, 128, 5);
        in.resize(n);
        EncodeOptions o;
        o.dtype = d;
        o.layout = {0, 1, 128};
        const auto plain = Encoded(o, in);
        for (bool take : {false, true}) {
          std::vector<uint8_t> out(MaxSplitEncodedBytes(n), 0xee);
          int calls = 0;
          uint64_t plane = 0, estimate = 0;
          std::vector<uint8_t> seen;
          o.on_raw_plane = [&](uint64_t raw_plane, uint64_t est) {
            ++calls;
            plane = raw_plane;
            estimate = est;
            seen.assign(out.begin() + kHeaderBytes, out.begin() + kHeaderBytes + raw_plane);
            return take;
          };
          auto got = Encode(o, in.data(), in.size(), out.data(), out.size());
          const std::string what = std::string(DTypeName(d)) + (random ? " random " : " kv ") + std::to_string(n) +
                                   (take ? " taken" : " declined");
          ASSERT_TRUE(got.ok()) << what << ": " << got.status();
          out.resize(*got);
          auto info = Inspect(out.data(), out.size());
          ASSERT_TRUE(info.ok()) << what;
          if (calls == 0) {  // no raw plane: opaque bytes, empty or tiny chunks
            EXPECT_TRUE(d == DType::kBytes || n <= 64) << what;
            EXPECT_EQ(out, plain) << what;
            continue;
          }
          EXPECT_EQ(calls, 1) << what;
          if (!info->stored) {  // a declined plane may still end STORED
            EXPECT_EQ(plane, info->raw_plane_bytes) << what;
            EXPECT_TRUE(std::equal(seen.begin(), seen.end(), out.begin() + kHeaderBytes)) << what;
          }
          if (take) {
            EXPECT_FALSE(info->stored) << what;
            EXPECT_LE(out.size(), MaxSplitEncodedBytes(n)) << what;
            // The estimate is close to the coded size (the slack: the states
            // and directory entry it counts for tiles that end up RAW).
            if (n >= 100000) {
              const double tiles = static_cast<double>(info->tiles);
              EXPECT_NEAR(static_cast<double>(estimate), static_cast<double>(out.size()), 0.01 * n + 132 * tiles)
                  << what;
            }
          } else {
            EXPECT_EQ(out, plain) << what;
          }
          EXPECT_EQ(Decoded(out, n), in) << what;
        }
      }
    }
  }
  // The hook needs room for a chunk that can no longer be STORED.
  std::vector<uint8_t> in(4096, 1), out(MaxEncodedBytes(4096));
  EncodeOptions o;
  o.on_raw_plane = [](uint64_t, uint64_t) { return true; };
  EXPECT_EQ(Encode(o, in.data(), in.size(), out.data(), out.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Codec, ConstantDataShrinksToAlmostNothing) {
  std::vector<uint8_t> in(1 << 20, 0);
  for (size_t i = 0; i < in.size(); i += 2) in[i + 1] = 0x3f;  // bf16 0x3f00 everywhere
  EncodeOptions o;
  auto chunk = Encoded(o, in);
  // The raw plane (1 byte/element) stays, and each of the 128 tiles (4096
  // symbols) keeps its 128 bytes of final states, 64 of them its carry (out
  // of the plane), and its directory entry.
  EXPECT_LT(chunk.size(), in.size() / 2 + 128 * (64 + 4) + 1024);
  EXPECT_EQ(Decoded(chunk, in.size()), in);
  o.dtype = DType::kBytes;
  auto bytes = Encoded(o, in);  // opaque: 0x00,0x3f alternate -> 1 bit per byte
  EXPECT_LT(bytes.size(), in.size() / 6);
  EXPECT_EQ(Decoded(bytes, in.size()), in);
}

// An independent reading of docs/codec-format.md ("rANS coding"): a model
// decoder written from the text, 8-bit probabilities and a refill only after
// odd rounds, must recover every exponent of a one-tile bf16 chunk from the
// encoder's bytes, consume every word and end each lane at 2^16. Partial
// last rounds of both parities (the even one holds lone symbols).
TEST(Codec, CodedTilesFollowTheFormatText) {
  std::mt19937 rng(21);
  for (uint32_t n : {32u * 41 + 9, 32u * 40 + 9, 32u * 64}) {
    std::vector<uint8_t> in(2 * n);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t e = 120 + std::min<uint32_t>(rng() % 16, rng() % 16);  // skewed exponents
      const uint16_t v = testing::RandomBf16(rng, e);
      std::memcpy(&in[2 * i], &v, 2);
    }
    auto chunk = Encoded(EncodeOptions{}, in);
    ASSERT_GE(chunk.size(), 64u);
    auto u16 = [&](size_t at) { return static_cast<uint32_t>(chunk[at] | chunk[at + 1] << 8); };
    auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
    ASSERT_EQ(chunk[4], 5) << "version";
    ASSERT_EQ(u16(6), 0u) << "flags: coded, one table";
    ASSERT_EQ(u32(32), 1u) << "one tile";
    size_t at = 64 + u32(40);  // the exponent section, after the raw plane
    const uint32_t lo = u16(at), count = u16(at + 2);
    uint32_t freq[256] = {}, cum[257] = {}, total = 0;
    for (uint32_t k = 0; k < count; ++k) freq[lo + k] = u16(at + 4 + 2 * k);
    for (uint32_t s = 0; s < 256; ++s) cum[s + 1] = cum[s] + freq[s];
    total = cum[256];
    ASSERT_EQ(total, 256u);
    at += 4 + 2 * count;
    const uint32_t entry = u32(at);
    ASSERT_EQ(entry >> 31, 0u) << "a coded tile, not RAW";
    at = (at + 4 + 3) & ~size_t{3};  // the directory's padding
    ASSERT_EQ(at + entry, chunk.size());
    uint32_t x[32];
    for (int l = 0; l < 32; ++l) x[l] = u32(at + 4 * l);
    size_t w = at + 128;
    const size_t end = at + entry;
    for (uint32_t r = 0; r * 32 < n; ++r) {
      for (uint32_t l = 0; l < 32 && r * 32 + l < n; ++l) {
        const uint32_t j = r * 32 + l, slot = x[l] & 255;
        uint32_t s = 0;
        while (cum[s + 1] <= slot) ++s;
        x[l] = freq[s] * (x[l] >> 8) + slot - cum[s];
        if (r % 2 == 1 && x[l] < (1u << 16)) {
          ASSERT_LE(w + 2, end) << "n " << n << ": the stream ends early";
          x[l] = x[l] << 16 | u16(w);
          w += 2;
        }
        ASSERT_EQ(s, (in[2 * j] >> 7 | in[2 * j + 1] << 1) & 0xffu) << "n " << n << ", element " << j;
      }
    }
    for (int l = 0; l < 32; ++l) EXPECT_EQ(x[l], 1u << 16) << "n " << n << ", lane " << l;
    EXPECT_EQ((w + 3) & ~size_t{3}, end) << "n " << n << ": every word read";
  }
}

// A symbol with probability >= 1/2 (frequency >= 128) drives encoder states
// above 2^31, where reciprocal-multiply division shortcuts stop being exact.
TEST(Codec, PeakyDistributionsRoundTrip) {
  std::mt19937 rng(8);
  for (int dominant_pct : {55, 90, 99}) {
    std::vector<uint8_t> in(2 * 200000);
    for (size_t i = 0; i < in.size(); i += 2) {
      in[i] = static_cast<uint8_t>(rng());
      in[i + 1] = static_cast<uint8_t>(static_cast<int>(rng() % 100) < dominant_pct ? 0x3f : 0x3c + rng() % 8);
    }
    EncodeOptions o;
    auto chunk = Encoded(o, in);
    EXPECT_EQ(Decoded(chunk, in.size()), in) << dominant_pct << "%";
    EXPECT_LT(chunk.size(), in.size()) << dominant_pct << "%";
  }
}

// The SIMD encoder (where the CPU has it) writes exactly the scalar encoder's
// bytes, for every dtype, both modes and partial last rounds.
TEST(Codec, SimdAndScalarEncodersWriteTheSameBytes) {
  const DType all[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3, DType::kFP8E5M2, DType::kBytes};
  for (DType d : all) {
    for (size_t n : {size_t{31}, size_t{64}, kMaxTileSymbols + 5, 3 * kMaxTileSymbols + 100}) {
      for (bool kv : {false, true}) {
        EncodeOptions o;
        o.dtype = d;
        if (kv) o.layout = {0, 4, 64};
        auto in = KvLike(d, n, 256, static_cast<uint32_t>(n) + kv);
        SetSimdForTesting(true);
        auto a = Encoded(o, in);
        SetSimdForTesting(false);
        auto b = Encoded(o, in);
        SetSimdForTesting(true);
        EXPECT_EQ(a, b) << DTypeName(d) << " n=" << n << " kv=" << kv;
      }
    }
  }
}

// bf16 elements with exponents 120..124 in every 4 KiB block, plus one
// exponent 254 in block 1 (not in the sample: tile 0) and one 253 in block 16
// (in the sample: tile 4).
std::vector<uint8_t> SampleProbe(size_t n) {
  std::vector<uint8_t> v(2 * n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t e = 120 + static_cast<uint32_t>(i * 7 % 5);
    if (i == 2048 + 5) e = 254;
    if (i == 16 * 2048 + 3) e = 253;
    const uint16_t x = static_cast<uint16_t>((i & 1) << 15 | e << 7 | (i * 13 & 0x7f));
    std::memcpy(&v[2 * i], &x, 2);
  }
  return v;
}

// Directory entry t of a coded order-0 chunk.
uint32_t DirectoryEntry(const std::vector<uint8_t>& chunk, uint32_t t) {
  uint64_t raw_plane;
  uint16_t count;
  std::memcpy(&raw_plane, &chunk[40], 8);
  std::memcpy(&count, &chunk[64 + raw_plane + 2], 2);
  uint32_t e;
  std::memcpy(&e, &chunk[64 + raw_plane + 4 + 2 * count + 4 * t], 4);
  return e;
}

// Since format version 3, the last 64 bytes of each whole tile's raw plane part
// leave the plane and ride in the tile: 2 bytes in each lane's initial rANS
// state (2^16 | u16), which the decoder's final state gives back, or after a
// RAW tile's packed symbols. A partial last tile keeps its raw part.
TEST(Codec, WholeTilesCarryTheEndOfTheirRawPlanePart) {
  constexpr uint32_t kTile = 8192, kWhole = 3;
  const size_t n = kWhole * kTile + 100;
  for (bool noise : {false, true}) {  // coded tiles; RAW tiles (random bits, the plane taken first)
    const auto in = noise ? RandomBytes(2 * n, 11) : KvLike(DType::kBF16, n, 128, 7);
    std::vector<uint8_t> r(n);  // the raw bytes: sign << 7 | mantissa
    for (size_t i = 0; i < n; ++i) r[i] = static_cast<uint8_t>((in[2 * i + 1] & 0x80) | (in[2 * i] & 0x7f));
    EncodeOptions o;
    o.tile_log2 = 13;
    if (noise) o.on_raw_plane = [](uint64_t, uint64_t) { return true; };
    std::vector<uint8_t> chunk(MaxSplitEncodedBytes(in.size()));
    auto size = Encode(o, in.data(), in.size(), chunk.data(), chunk.size());
    ASSERT_TRUE(size.ok()) << size.status();
    chunk.resize(*size);
    ASSERT_EQ(chunk[4], kFormatVersion);
    uint64_t raw_plane;
    std::memcpy(&raw_plane, &chunk[40], 8);
    ASSERT_EQ(raw_plane, (n + 7) / 8 * 8 - kWhole * 64);
    for (uint32_t t = 0; t <= kWhole; ++t) {  // the plane: each tile's part without its carry
      const size_t keep = t < kWhole ? kTile - 64 : n - kWhole * kTile;
      EXPECT_TRUE(std::equal(r.begin() + t * kTile, r.begin() + t * kTile + keep,
                             chunk.begin() + 64 + t * (kTile - 64)))
          << "tile " << t;
    }
    uint16_t count;
    std::memcpy(&count, &chunk[64 + raw_plane + 2], 2);
    const size_t dir = 64 + raw_plane + 4 + 2 * count;
    const size_t tile0 = dir + 4 * (kWhole + 1) + (4 - (dir + 4 * (kWhole + 1)) % 4) % 4;
    size_t at = tile0;
    for (uint32_t t = 0; t < kWhole; ++t) {
      uint32_t e;
      std::memcpy(&e, &chunk[dir + 4 * t], 4);
      const uint8_t* carry = &r[t * kTile + kTile - 64];
      if (noise) {  // RAW: the packed symbols, then the carry bytes
        ASSERT_EQ(e, (kTile + 64) | (1u << 31)) << "tile " << t;
        EXPECT_TRUE(std::equal(carry, carry + 64, chunk.begin() + at + kTile)) << "tile " << t;
      } else {  // coded: the carry is in the states the decoder ends in (the round trip below)
        ASSERT_EQ(e >> 31, 0u) << "tile " << t;
      }
      at += e & ~(1u << 31);
    }
    EXPECT_EQ(Decoded(chunk, in.size()), in);
    // A carry bit flipped in tile 0 is not decoded into the output unnoticed.
    auto bad = chunk;
    bad[tile0 + (noise ? kTile + 9 : 4 * 5)] ^= 1;
    std::vector<uint8_t> out(in.size());
    EXPECT_FALSE(Decode(bad.data(), bad.size(), out.data(), out.size()).ok());
  }
}

// From plan::kSampleMinElements elements on, an order-0 chunk's table comes
// from every 16th 4 KiB block: a symbol seen only outside them makes its
// tile RAW, one inside them does not, and below the threshold the whole
// chunk counts. Both encoders (SIMD and scalar) write the same bytes, and
// the chunk decodes bit-exactly.
TEST(Codec, LargeChunksTakeTheirTableFromASample) {
  for (size_t n : {size_t{plan::kSampleMinElements}, size_t{plan::kSampleMinElements - 2048}}) {
    const auto in = SampleProbe(n);
    EncodeOptions o;
    SetSimdForTesting(true);
    const auto chunk = Encoded(o, in);
    SetSimdForTesting(false);
    EXPECT_EQ(Encoded(o, in), chunk) << n;
    SetSimdForTesting(true);
    auto info = Inspect(chunk.data(), chunk.size());
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_FALSE(info->stored);
    ASSERT_EQ(info->tile_log2, 13u);
    const bool sampled = n >= plan::kSampleMinElements;
    EXPECT_EQ(info->raw_tiles, sampled ? 1u : 0u) << n;
    EXPECT_EQ(DirectoryEntry(chunk, 0) >> 31, sampled ? 1u : 0u) << n;  // bit 31: RAW
    EXPECT_EQ(DirectoryEntry(chunk, 4) >> 31, 0u) << n;
    EXPECT_TRUE(Decoded(chunk, in.size()) == in) << n;
  }
}

// A sampled table gives a symbol the sample lacks but whose neighbours it has
// (a hole) frequency 1 when there are at most plan::kMaxSampleHoles holes: a
// tile holding such a symbol is coded, not RAW. With more holes, none is
// filled. Symbols outside the sample's range stay RAW (the test above).
TEST(Codec, SampledTablesFillAFewHoles) {
  const size_t n = plan::kSampleMinElements;
  struct Case {
    std::vector<uint32_t> exps;
    uint32_t want_freq, want_raw_tiles;
  };
  const Case cases[] = {{{120, 122}, 1, 0},                       // one hole: 121
                        {{120, 122, 124, 126, 128}, 1, 0},        // four holes
                        {{120, 122, 124, 126, 128, 130}, 0, 1}};  // five: none filled
  for (const Case& c : cases) {
    const auto in = testing::ExponentProbe(n, c.exps, 121);
    const auto chunk = Encoded(EncodeOptions{}, in);
    auto table = TableOf(chunk.data(), chunk.size());
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_EQ(table->freq[121], c.want_freq) << c.exps.size() << " exponents";
    EXPECT_EQ(table->freq[119] + table->freq[c.exps.back() + 1], 0u) << "outside the range: no frequency";
    EXPECT_EQ(Inspect(chunk.data(), chunk.size())->raw_tiles, c.want_raw_tiles) << c.exps.size() << " exponents";
    EXPECT_TRUE(Decoded(chunk, in.size()) == in);
  }
  // Below the sample threshold every symbol is counted: no holes to fill.
  const auto small = testing::ExponentProbe(n - 2048, {120, 122}, 121);
  const auto chunk = Encoded(EncodeOptions{}, small);
  EXPECT_EQ(TableOf(chunk.data(), chunk.size())->freq[121], 1u);
  EXPECT_EQ(Inspect(chunk.data(), chunk.size())->raw_tiles, 0u);
}

// The encoder refines fp8 e5m2's tables and no other dtype's: each chunk's
// table is the plain normalisation of its symbols, refined for e5m2.
TEST(Codec, OnlyFp8E5m2TablesAreRefined) {
  const size_t n = 1 << 20;
  for (const DType dtype : {DType::kFP8E5M2, DType::kFP8E4M3, DType::kBF16}) {
    const auto in = testing::KvLike(dtype, n, 64, 3, 1.2f);
    EncodeOptions o;
    o.dtype = dtype;
    const auto chunk = Encoded(o, in);
    auto table = TableOf(chunk.data(), chunk.size());
    ASSERT_TRUE(table.ok()) << table.status();
    // The symbols: fp8 bits 6..2 (e5m2) or 6..3 (e4m3); bf16 bits 14..7.
    uint64_t h[256] = {};
    for (size_t i = 0; i < n; ++i) {
      const uint32_t v = dtype == DType::kBF16 ? (in[2 * i] | in[2 * i + 1] << 8) : in[i];
      ++h[dtype == DType::kBF16 ? (v >> 7) & 0xff : dtype == DType::kFP8E5M2 ? (v >> 2) & 31 : (v >> 3) & 15];
    }
    uint32_t want[256], plain[256];
    PlainNormalisation(h, want);
    std::copy(want, want + 256, plain);
    if (dtype == DType::kFP8E5M2) plan::RefineTable(h, want);
    for (int s = 0; s < 256; ++s) EXPECT_EQ(table->freq[s], want[s]) << static_cast<int>(dtype) << " symbol " << s;
    if (dtype == DType::kFP8E5M2) {
      EXPECT_FALSE(std::equal(want, want + 256, plain)) << "this data should need a refined table";
      EXPECT_LT(TableCostQ16(h, want), TableCostQ16(h, plain));
    }
    EXPECT_TRUE(Decoded(chunk, in.size()) == in);
  }
}

// Table reuse (EncodeOptions::table): a chunk coded with another chunk's
// table stores that table as its own (TableOf gives it back), decodes
// bit-exactly, and makes RAW exactly the tiles holding a symbol the table
// lacks. Every dtype; the SIMD and scalar encoders agree.
TEST(Codec, ChunksCodedWithAGivenTableStoreItAndDecode) {
  for (DType d : kAll) {
    const uint32_t size = Info(d)->bytes;
    const size_t n = 3 * 8192 / size * 8 + 77;  // several tiles and a partial one
    const auto first = KvLike(d, n, 128, 3);
    EncodeOptions o;
    o.dtype = d;
    const auto planned = Encoded(o, first);
    auto table = TableOf(planned.data(), planned.size());
    ASSERT_TRUE(table.ok()) << DTypeName(d) << ": " << table.status();
    // Other data with the same symbols (the elements in reverse order), and
    // in its first element one symbol the table lacks.
    std::vector<uint8_t> second(first.size());
    for (size_t i = 0; i < n; ++i) std::memcpy(&second[size * i], &first[size * (n - 1 - i)], size);
    int missing = -1;
    const uint32_t E = Info(d)->exp_bits;
    for (uint32_t s = 0; s < (1u << E) && missing < 0; ++s) {
      if (table->freq[s] == 0) missing = static_cast<int>(s);
    }
    ASSERT_GE(missing, 0) << DTypeName(d);
    if (d == DType::kBytes) {
      second[0] = static_cast<uint8_t>(missing);
    } else {  // the exponent field sits just below the sign bit
      const uint32_t bits = 8 * size, v = static_cast<uint32_t>(missing) << (bits - 1 - E);
      for (uint32_t k = 0; k < size; ++k) second[k] = static_cast<uint8_t>(v >> (8 * k));
    }
    o.table = &*table;
    SetSimdForTesting(true);
    const auto chunk = Encoded(o, second);
    SetSimdForTesting(false);
    EXPECT_EQ(Encoded(o, second), chunk) << DTypeName(d);
    SetSimdForTesting(true);
    auto again = TableOf(chunk.data(), chunk.size());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(std::equal(std::begin(again->freq), std::end(again->freq), std::begin(table->freq))) << DTypeName(d);
    auto info = Inspect(chunk.data(), chunk.size());
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_FALSE(info->stored) << DTypeName(d);
    // One more than the planned chunk (whose tiny last tile is RAW too).
    EXPECT_EQ(info->raw_tiles, Inspect(planned.data(), planned.size())->raw_tiles + 1) << DTypeName(d);
    EXPECT_EQ(DirectoryEntry(chunk, 0) >> 31, 1u) << DTypeName(d);
    EXPECT_TRUE(Decoded(chunk, second.size()) == second) << DTypeName(d);
  }
}

TEST(Codec, RejectsTablesAChunkCannotStoreAndChunksWithoutOne) {
  const auto in = KvLike(DType::kBF16, 20000, 64, 5);
  std::vector<uint8_t> out(MaxSplitEncodedBytes(in.size()));
  FrequencyTable t;
  t.freq[120] = 200;
  t.freq[121] = 55;  // sums to 255
  EncodeOptions o;
  o.table = &t;
  auto r = Encode(o, in.data(), in.size(), out.data(), out.size());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sum to 255"), std::string::npos) << r.status();
  t.freq[121] = 56;
  EXPECT_TRUE(Encode(o, in.data(), in.size(), out.data(), out.size()).ok());
  o.dtype = DType::kFP16;  // symbol 120 is past fp16's 5-bit exponents
  r = Encode(o, in.data(), in.size(), out.data(), out.size());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("past the 5-bit"), std::string::npos) << r.status();
  o.dtype = DType::kBF16;
  o.on_raw_plane = [](uint64_t, uint64_t) { return true; };
  EXPECT_EQ(Encode(o, in.data(), in.size(), out.data(), out.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // TableOf: a STORED chunk, a channel-group chunk, a truncated chunk.
  EncodeOptions bytes;
  bytes.dtype = DType::kBytes;
  const auto stored = Encoded(bytes, RandomBytes(5000, 2));
  ASSERT_EQ(Inspect(stored.data(), stored.size())->stored, true);
  EXPECT_FALSE(TableOf(stored.data(), stored.size()).ok());
  EncodeOptions kv;
  kv.layout = {256, 8, 128};
  const auto grouped = Encoded(kv, KvLike(DType::kBF16, 16 * 16 * 8 * 128, 8 * 128, 3));
  ASSERT_GT(Inspect(grouped.data(), grouped.size())->tables, 1u);
  EXPECT_FALSE(TableOf(grouped.data(), grouped.size()).ok());
  const auto plain = Encoded(EncodeOptions{}, in);
  EXPECT_TRUE(TableOf(plain.data(), plain.size()).ok());
  EXPECT_FALSE(TableOf(plain.data(), plain.size() - 1).ok());
  EXPECT_FALSE(TableOf(nullptr, 0).ok());
}

// The SIMD decoder (where the CPU has it) and the scalar one agree on every
// chunk, good or corrupted.
TEST(Codec, SimdAndScalarDecodersAgree) {
  std::mt19937 rng(12);
  for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3, DType::kFP8E5M2})
  for (bool kv : {false, true}) {
    EncodeOptions o;
    o.dtype = d;
    if (kv) o.layout = {0, 8, 128};
    auto in = KvLike(d, 5 * kMaxTileSymbols + 77, 1024, kv ? 1 : 2);
    auto chunk = Encoded(o, in);
    for (int k = 0; k < 60; ++k) {
      auto bad = chunk;
      if (k > 0) bad[64 + rng() % (bad.size() - 64)] ^= static_cast<uint8_t>(1 + rng() % 255);
      std::vector<uint8_t> a(in.size()), b(in.size());
      SetSimdForTesting(true);
      auto ra = Decode(bad.data(), bad.size(), a.data(), a.size());
      SetSimdForTesting(false);
      auto rb = Decode(bad.data(), bad.size(), b.data(), b.size());
      SetSimdForTesting(true);
      EXPECT_EQ(ra.ok(), rb.ok()) << DTypeName(d) << " k=" << k << " simd: " << ra.status() << " scalar: " << rb.status();
      if (ra.ok() && rb.ok()) {
        EXPECT_EQ(a, b);
      }
      if (k == 0) {
        EXPECT_EQ(a, in);
      }
    }
  }
}

TEST(Codec, RejectsBadArguments) {
  std::vector<uint8_t> in(101), out(1000);
  EncodeOptions o;
  EXPECT_EQ(Encode(o, in.data(), in.size(), out.data(), out.size()).status().code(),
            absl::StatusCode::kInvalidArgument);  // odd bytes for bf16
  EXPECT_EQ(Encode(o, in.data(), 100, out.data(), 100).status().code(), absl::StatusCode::kInvalidArgument);
  o.dtype = static_cast<DType>(9);
  EXPECT_EQ(Encode(o, in.data(), 100, out.data(), out.size()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseDType("bf17").ok());
  auto good = Encoded(EncodeOptions{}, KvLike(DType::kBF16, 50000, 64, 1));
  std::vector<uint8_t> small(10);
  EXPECT_EQ(Decode(good.data(), good.size(), small.data(), small.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Codec, CorruptedOrTruncatedChunksFailAndNeverLie) {
  EncodeOptions o;
  o.layout = {64, 2, 64};
  auto in = KvLike(DType::kBF16, 3 * kMaxTileSymbols + 5, 128, 4);
  auto chunk = Encoded(o, in);
  std::vector<uint8_t> out(in.size());
  for (size_t cut : {size_t{0}, size_t{10}, size_t{64}, chunk.size() / 2, chunk.size() - 1}) {
    EXPECT_FALSE(Decode(chunk.data(), cut, out.data(), out.size()).ok()) << "cut " << cut;
  }
  std::mt19937 rng(5);
  int failed = 0;
  for (int k = 0; k < 300; ++k) {
    auto bad = chunk;
    const size_t pos = rng() % bad.size();
    bad[pos] ^= static_cast<uint8_t>(1 + rng() % 255);
    auto r = Decode(bad.data(), bad.size(), out.data(), out.size());
    if (r.ok()) {
      EXPECT_EQ(out, in) << "a corrupted chunk decoded to different bytes at pos " << pos;
    } else {
      ++failed;
    }
  }
  EXPECT_GT(failed, 290);  // only bytes no decoder reads (padding) may change unnoticed
}

// The tile size is a header field: a coded chunk with any other value than
// 4096, 8192 or 16384 symbols (or one that disagrees with its tile count), a
// stored chunk with one at all, or an older version fails with a reason.
TEST(Codec, RejectsBadTileSizesAndOtherVersions) {
  auto in = KvLike(DType::kBF16, (1 << 21) + 5, 128, 4);
  const auto chunk = Encoded(EncodeOptions{}, in);
  ASSERT_EQ(chunk[30], 13);
  std::vector<uint8_t> out(in.size());
  for (uint8_t v : {0, 11, 12, 14, 15, 255}) {
    auto bad = chunk;
    bad[30] = v;
    auto r = Decode(bad.data(), bad.size(), out.data(), out.size());
    ASSERT_FALSE(r.ok()) << int{v};
    // 12 and 14 are valid sizes, but not this chunk's: the carry (whole
    // tiles) then gives another raw plane size, checked first.
    EXPECT_NE(r.status().message().find(v == 12 || v == 14 ? "raw plane size" : "tile"), std::string::npos)
        << r.status();
  }
  for (uint8_t version : {1, 2, 3}) {
    auto old = chunk;
    old[4] = version;
    EXPECT_NE(Decode(old.data(), old.size(), out.data(), out.size()).status().message().find(
                  "version " + std::to_string(version)),
              std::string::npos);
  }
  std::vector<uint8_t> noise(4096);
  std::mt19937 rng(3);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  auto stored = Encoded(EncodeOptions{}, noise);
  ASSERT_EQ(stored[30], 0);
  stored[30] = 13;
  EXPECT_FALSE(Decode(stored.data(), stored.size(), out.data(), out.size()).ok());
}

// A table that sums to 0 is legal only when no element uses it; a chunk whose
// only table is emptied must fail in parsing, before any tile is read.
TEST(Codec, RejectsAnEmptyTableThatElementsUse) {
  EncodeOptions o;
  auto in = KvLike(DType::kBF16, 2 * kMaxTileSymbols, 128, 8);
  auto chunk = Encoded(o, in);
  ChunkInfo info;
  {
    auto i = Inspect(chunk.data(), chunk.size());
    ASSERT_TRUE(i.ok()) << i.status();
    info = *i;
  }
  ASSERT_FALSE(info.stored);
  ASSERT_FALSE(info.channel_groups);
  const size_t table = 64 + info.raw_plane_bytes;  // header, raw plane, then the table
  const uint32_t count = chunk[table + 2] | chunk[table + 3] << 8;
  ASSERT_GT(count, 0u);
  for (uint32_t k = 0; k < count; ++k) chunk[table + 4 + 2 * k] = chunk[table + 5 + 2 * k] = 0;
  std::vector<uint8_t> out(in.size());
  auto r = Decode(chunk.data(), chunk.size(), out.data(), out.size());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty table"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace kvferry::codec
