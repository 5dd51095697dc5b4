// CPU reference implementation of the kvferry codec (docs/codec-format.md).
#include "kernels/codec.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "kernels/checksum.h"
#include "kernels/codec_plan.h"

namespace kvferry::codec {
namespace {

constexpr uint32_t kM = 1u << kProbBits;
constexpr uint32_t kL = 1u << 16;
// A lane renormalises once per two symbols (docs/codec-format.md, "rANS
// coding"): before the encoder codes an odd round's symbol (frequency
// f_odd) and the even round's before it (f_even), it emits the low 16 bits of
// x if x >= f_odd * f_even << 16; the decoder refills after odd rounds only.
// f_odd * f_even <= 2^16, so the test is one compare of x >> 16.
inline bool EmitsWord(uint32_t x, uint32_t f_odd, uint32_t f_even) { return (x >> 16) >= f_odd * f_even; }
constexpr int kLanes = 32;
constexpr char kMagic[4] = {'K', 'V', 'Z', '1'};
constexpr uint16_t kFlagStored = 1;
constexpr uint16_t kFlagChannelGroups = 2;
constexpr uint32_t kTileRaw = 1u << 31;
constexpr uint64_t kMaxElements = 1ull << 40;
// The encoder groups channels only up to this many (its per-channel histograms
// take 1 KiB each); the format itself allows up to 2^20.
constexpr uint64_t kMaxGroupedChannels = 8192;

template <typename T>
void Put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename T>
T Get(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}

absl::Status Corrupt(const std::string& what) { return absl::DataLossError("corrupt chunk: " + what); }

// ---- element split -------------------------------------------------------

struct Split {
  DTypeInfo info;
  uint32_t mant_bits;  // raw bits without the sign (0 for opaque bytes)
  bool opaque;

  // Element i of `in` (little-endian hosts only; a memcpy of a run-time size
  // would be a library call an element) and its symbol. The split and join
  // loops use Elem (below), the same fields as constants.
  uint32_t Load(const uint8_t* in, uint64_t i) const {
    if (info.bytes == 1) return in[i];
    if (info.bytes == 2) return Get<uint16_t>(in + 2 * i);
    return Get<uint32_t>(in + 4 * i);
  }
  uint32_t Symbol(uint32_t v) const { return opaque ? v : (v >> mant_bits) & ((1u << info.exp_bits) - 1); }
};

absl::StatusOr<Split> MakeSplit(DType d) {
  auto info = Info(d);
  if (!info.ok()) return info.status();
  Split s{*info, info->raw_bits == 0 ? 0 : info->raw_bits - 1, d == DType::kBytes};
  return s;
}

// Groups of 8 values of `width` bits, LSB-first, `width` bytes per group.
uint64_t PackedBytes(uint64_t count, uint32_t width) { return (count + 7) / 8 * width; }

// A float type with its field widths as constants (Split at compile time),
// for the split and join loops of the types without a SIMD path.
template <uint32_t kBytes, uint32_t kExp, uint32_t kMant>
struct Elem {
  static constexpr uint32_t kRawBits = kMant + 1;  // W: sign + mantissa
  using Word = std::conditional_t<kBytes == 1, uint8_t, std::conditional_t<kBytes == 2, uint16_t, uint32_t>>;
  static uint32_t Load(const uint8_t* in, uint64_t i) { return Get<Word>(in + kBytes * i); }
  static void Store(uint8_t* out, uint64_t i, uint32_t v) { Put<Word>(out + kBytes * i, static_cast<Word>(v)); }
  static uint32_t Symbol(uint32_t v) { return (v >> kMant) & ((1u << kExp) - 1); }
  static uint32_t Raw(uint32_t v) { return (v >> (kExp + kMant)) << kMant | (v & ((1u << kMant) - 1)); }
  static uint32_t Join(uint32_t sym, uint32_t raw) {
    return (raw >> kMant) << (kExp + kMant) | sym << kMant | (raw & ((1u << kMant) - 1));
  }
};

// Calls f with the Elem of fp16, fp32 or fp8 (returns false for other types).
template <typename F>
bool WithFloatElem(DType d, F&& f) {
  switch (d) {
    case DType::kFP16: f(Elem<2, 5, 10>{}); return true;
    case DType::kFP32: f(Elem<4, 8, 23>{}); return true;
    case DType::kFP8E4M3: f(Elem<1, 4, 3>{}); return true;
    case DType::kFP8E5M2: f(Elem<1, 5, 2>{}); return true;
    default: return false;
  }
}

// Zero bytes after the tile directory that align tile 0 (and so every tile,
// whose sizes are multiples of 4) to 4 bytes from the chunk start.
uint64_t TilePad(uint64_t offset) { return (4 - offset % 4) % 4; }

// A group's bits in one 128-bit integer (little-endian hosts only): widths
// up to 16 bits hold 8 values in at most 16 bytes; wider ones (fp32's 24-bit
// raw parts; any even width up to 32) go as two half groups of 4 values,
// width / 2 bytes each.
using U128 = unsigned __int128;

// Calls f with the format's packed widths (raw parts of 3, 4, 11 and 24 bits,
// exponents of 4 and 5) as compile-time constants, so that the group code
// below has no run-time shifts' setup or library memcpy; other widths as
// run-time values.
template <typename F>
void WithWidth(uint32_t width, F&& f) {
  switch (width) {
    case 3: return f(std::integral_constant<uint32_t, 3>{});
    case 4: return f(std::integral_constant<uint32_t, 4>{});
    case 5: return f(std::integral_constant<uint32_t, 5>{});
    case 11: return f(std::integral_constant<uint32_t, 11>{});
    case 24: return f(std::integral_constant<uint32_t, 24>{});
    default: return f(width);
  }
}

// Values past k_count pack as zeros.
template <typename Width>
__attribute__((always_inline)) inline void PackGroup(const uint32_t* v, int k_count, Width width, uint8_t* out) {
  const uint32_t mask = width >= 32 ? ~0u : (1u << width) - 1;
  constexpr int per = 8;
  const int half = width <= 16 ? per : per / 2;  // values per 128-bit word
  const uint32_t bytes = half * width / 8;
  for (int h = 0; h < per; h += half) {
    U128 acc = 0;
#pragma GCC unroll 8
    for (int k = h; k < h + half; ++k) {
      if (k < k_count) acc |= static_cast<U128>(v[k] & mask) << ((k - h) * width);
    }
    std::memcpy(out + h * width / 8, &acc, bytes);
  }
}

// Values [0, 8) of a group.
template <typename Width>
__attribute__((always_inline)) inline void UnpackGroup(const uint8_t* group, Width width, uint32_t* v) {
  const uint32_t mask = width >= 32 ? ~0u : (1u << width) - 1;
  const int per = width <= 16 ? 8 : 4;
  for (int h = 0; h < 8; h += per) {
    U128 acc = 0;
    std::memcpy(&acc, group + h * width / 8, per * width / 8);
#pragma GCC unroll 8
    for (int k = 0; k < per; ++k) v[h + k] = static_cast<uint32_t>(acc >> (k * width)) & mask;
  }
}


// Packs `count` values (taken by fn(i)) into out (PackedBytes(count, width) bytes).
template <typename Fn>
void Pack(uint64_t count, uint32_t width, uint8_t* out, Fn fn) {
  if (width == 8) {
    for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<uint8_t>(fn(i));
    return;
  }
  WithWidth(width, [&](auto w) {
    uint32_t v[8];
    for (uint64_t g = 0; g * 8 < count; ++g) {
      const int k_count = static_cast<int>(std::min<uint64_t>(8, count - g * 8));
      for (int k = 0; k < k_count; ++k) v[k] = fn(g * 8 + k);
      PackGroup(v, k_count, w, out + g * w);
    }
  });
}

// Unpacks `count` values (Pack's layout) into bytes.
void UnpackBytes(uint64_t count, uint32_t width, const uint8_t* packed, uint8_t* out) {
  if (width == 8) {
    std::memcpy(out, packed, count);
    return;
  }
  WithWidth(width, [&](auto w) {
    uint32_t v[8];
    for (uint64_t g = 0; 8 * g < count; ++g) {
      UnpackGroup(packed + g * w, w, v);
      for (uint64_t k = 0; k < 8 && 8 * g + k < count; ++k) out[8 * g + k] = static_cast<uint8_t>(v[k]);
    }
  });
}

// ---- frequency tables ----------------------------------------------------

struct Table {
  uint32_t lo = 0, count = 0;
  uint32_t freq[256] = {0};
  uint32_t cum[256] = {0};

  void Finish() {
    uint32_t c = 0;
    for (int s = 0; s < 256; ++s) {
      cum[s] = c;
      c += freq[s];
    }
    lo = 0;
    count = 0;
    int first = -1, last = -1;
    for (int s = 0; s < 256; ++s) {
      if (freq[s] != 0) {
        if (first < 0) first = s;
        last = s;
      }
    }
    if (first >= 0) {
      lo = static_cast<uint32_t>(first);
      count = static_cast<uint32_t>(last - first + 1);
    }
  }
};

static_assert(plan::Refined(static_cast<uint32_t>(DType::kFP8E5M2)) &&
                  !plan::Refined(static_cast<uint32_t>(DType::kBF16)),
              "plan::Refined names fp8 e5m2 by its DType value");

// Deterministic normalisation to sum kM (see the format doc), refined
// (plan::RefineTable) for the dtypes whose tables are.
Table Normalize(const uint64_t hist[256], bool refine) {
  Table t;
  uint64_t total = 0;
  for (int s = 0; s < 256; ++s) total += hist[s];
  if (total == 0) {
    t.Finish();
    return t;
  }
  int64_t sum = 0;
  for (int s = 0; s < 256; ++s) {
    if (hist[s] == 0) continue;
    t.freq[s] = static_cast<uint32_t>(std::max<uint64_t>(1, hist[s] * kM / total));
    sum += t.freq[s];
  }
  int64_t d = static_cast<int64_t>(kM) - sum;
  if (d > 0) {
    int best = 0;
    for (int s = 1; s < 256; ++s) {
      if (hist[s] > hist[best]) best = s;
    }
    t.freq[best] += static_cast<uint32_t>(d);
  }
  while (d < 0) {
    int best = -1;
    for (int s = 0; s < 256; ++s) {
      if (t.freq[s] > 1 && (best < 0 || t.freq[s] > t.freq[best])) best = s;
    }
    --t.freq[best];
    ++d;
  }
  if (refine) plan::RefineTable(hist, t.freq);
  t.Finish();
  return t;
}

// Estimated coded size in 1/65536 bits (integer, so that the CUDA encoder
// makes the same choices).
uint64_t CostQ16(const uint64_t hist[256], const Table& t) {
  uint64_t q = 0;
  for (int s = 0; s < 256; ++s) {
    if (hist[s] != 0) q += plan::CostQ16(hist[s], t.freq[s]);
  }
  return q;
}

size_t TableBytes(const Table& t) { return 4 + 2 * t.count; }

// ---- worker pool ---------------------------------------------------------

int Threads(int requested, uint64_t work_items) {
  int t = requested > 0 ? requested : static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  return static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(t, work_items)));
}

template <typename Fn>
void ParallelFor(uint64_t n, int threads, Fn fn) {
  if (threads <= 1 || n <= 1) {
    for (uint64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<uint64_t> next{0};
  auto work = [&] {
    for (uint64_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

// Per-thread scratch reused across calls (no allocation, no page faults per
// chunk); large requests get their own buffer and do not stay.
class Scratch {
 public:
  uint8_t* Bytes(size_t n) {
    auto& v = n <= kKeep ? Tls().bytes[next_++ % 2] : own_.emplace_back();
    if (v.size() < n) v.resize(n);
    return v.data();
  }
  std::vector<std::vector<uint8_t>>& Tiles(size_t n) {
    auto& t = Tls().tiles;
    if (t.size() < n) t.resize(n);
    return t;
  }

 private:
  static constexpr size_t kKeep = 64u << 20;
  struct PerThread {
    std::vector<uint8_t> bytes[2];
    std::vector<std::vector<uint8_t>> tiles;
  };
  static PerThread& Tls() {
    thread_local PerThread t;
    return t;
  }
  int next_ = 0;
  std::vector<std::vector<uint8_t>> own_;
};

// ---- tiles ---------------------------------------------------------------

// Encodes symbols [begin, end) of the chunk into `out` (coded or RAW).
// Returns the directory entry.
std::atomic<bool> g_simd{true};
const bool kHasAvx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi2") &&
                        __builtin_cpu_supports("avx512vbmi") &&
                        __builtin_cpu_supports("avx512dq");

// bf16 elements [e0, e1): symbols (bits 14..7) and raw bytes (sign << 7 |
// bits 6..0), 32 elements per step.
__attribute__((target("avx512f,avx512bw"))) void SplitBf16Avx512(const uint8_t* in, uint64_t e0, uint64_t e1,
                                                                 uint8_t* sym, uint8_t* raw) {
  const __m512i low8 = _mm512_set1_epi16(0xff), sign = _mm512_set1_epi16(0x80), mant = _mm512_set1_epi16(0x7f);
  uint64_t i = e0;
  for (; i + 32 <= e1; i += 32) {
    const __m512i v = _mm512_loadu_si512(in + 2 * i);
    const __m512i s = _mm512_and_si512(_mm512_srli_epi16(v, 7), low8);
    const __m512i r = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 8), sign), _mm512_and_si512(v, mant));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sym + i), _mm512_cvtepi16_epi8(s));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(raw + i), _mm512_cvtepi16_epi8(r));
  }
  for (; i < e1; ++i) {
    uint16_t v;
    std::memcpy(&v, in + 2 * i, 2);
    sym[i] = static_cast<uint8_t>(v >> 7);
    raw[i] = static_cast<uint8_t>(((v >> 8) & 0x80) | (v & 0x7f));
  }
}

// The inverse: bf16 elements [e0, e1) from symbols and raw bytes.
__attribute__((target("avx512f,avx512bw"))) void JoinBf16Avx512(const uint8_t* sym, const uint8_t* raw, uint64_t e0,
                                                                uint64_t e1, uint8_t* out) {
  const __m512i sign = _mm512_set1_epi16(0x80), mant = _mm512_set1_epi16(0x7f);
  uint64_t i = e0;
  for (; i + 32 <= e1; i += 32) {
    const __m512i s = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sym + i)));
    const __m512i r = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(raw + i)));
    const __m512i v =
        _mm512_or_si512(_mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(r, sign), 8), _mm512_slli_epi16(s, 7)),
                        _mm512_and_si512(r, mant));
    _mm512_storeu_si512(out + 2 * i, v);
  }
  for (; i < e1; ++i) {
    const uint32_t rw = raw[i];
    const uint16_t v = static_cast<uint16_t>(((rw & 0x80) << 8) | (uint32_t{sym[i]} << 7) | (rw & 0x7f));
    std::memcpy(out + 2 * i, &v, 2);
  }
}

// Byte-permute indexes for raw parts of `len` whole bytes in lanes of
// `stride` bytes. GatherIndex: `parts` parts packed from lane starts (bytes
// past them 0). SpreadIndex, its inverse: lane g's first len bytes from part
// g, the rest from byte 63 (which the callers' masked loads leave zero).
__attribute__((target("avx512f"))) inline __m512i GatherIndex(int len, int stride, int parts) {
  alignas(64) uint8_t idx[64];
  for (int b = 0; b < 64; ++b) idx[b] = static_cast<uint8_t>(b < parts * len ? stride * (b / len) + b % len : 0);
  return _mm512_load_si512(idx);
}
__attribute__((target("avx512f"))) inline __m512i SpreadIndex(int len, int stride) {
  alignas(64) uint8_t idx[64];
  for (int b = 0; b < 64; ++b) idx[b] = static_cast<uint8_t>(b % stride < len ? len * (b / stride) + b % stride : 63);
  return _mm512_load_si512(idx);
}

// fp16, 32 elements a step: symbols (bits 14..10) to sym, raw parts
// (sign << 10 | mantissa, 11 bits) packed 8 to a group of 11 bytes into
// packed, as PackGroup packs them. A group's four pairs of raw parts become
// 22-bit dwords (one multiply-add), those 44-bit qwords, and a pair of qwords
// the group's 88 bits, whose 11 bytes a byte permute gathers. Returns the
// elements done (a multiple of 32; the caller packs the rest).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) uint64_t SplitFp16Avx512(const uint8_t* in, uint64_t count,
                                                                               uint8_t* sym, uint8_t* packed) {
  const __m512i k1f = _mm512_set1_epi16(0x1f), k3ff = _mm512_set1_epi16(0x3ff), k400 = _mm512_set1_epi16(0x400);
  const __m512i pair = _mm512_set1_epi32(0x08000001);  // words 1 and 2048: r0 + r1 << 11
  const __m512i low32 = _mm512_set1_epi64(0xffffffffLL);
  const __m512i gather = GatherIndex(11, 16, 4);
  uint64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512i v = _mm512_loadu_si512(in + 2 * i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sym + i),
                        _mm512_cvtepi16_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 10), k1f)));
    const __m512i r = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 5), k400), _mm512_and_si512(v, k3ff));
    const __m512i d = _mm512_madd_epi16(r, pair);  // dword k: raw parts 2k and 2k + 1
    const __m512i q = _mm512_or_si512(_mm512_and_si512(d, low32), _mm512_slli_epi64(_mm512_srli_epi64(d, 32), 22));
    // Qword 2g: the group's bits 0..63; qword 2g + 1: its bits 64..87.
    const __m512i lo = _mm512_or_si512(q, _mm512_slli_epi64(_mm512_alignr_epi64(q, q, 1), 44));
    const __m512i z = _mm512_mask_blend_epi64(0xaa, lo, _mm512_srli_epi64(q, 20));
    _mm512_mask_storeu_epi8(packed + 11 * (i / 8), (uint64_t{1} << 44) - 1, _mm512_permutexvar_epi8(gather, z));
  }
  return i;
}

// The inverse of SplitFp16Avx512: 32 elements a step from their symbols and
// packed raw parts. Returns the elements done (a multiple of 32).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) uint64_t JoinFp16Avx512(const uint8_t* sym,
                                                                              const uint8_t* packed, uint64_t count,
                                                                              uint8_t* out) {
  const __m512i k3ff = _mm512_set1_epi16(0x3ff), k400 = _mm512_set1_epi16(0x400);
  const __m512i bits44 = _mm512_set1_epi64((int64_t{1} << 44) - 1), bits22 = _mm512_set1_epi64(0x3fffff);
  const __m512i k7ff = _mm512_set1_epi32(0x7ff), shifts = _mm512_set_epi64(4, 0, 4, 0, 4, 0, 4, 0);
  // Qword 2g: group g's bytes 0..7 (bits 0..63); qword 2g + 1: its bytes
  // 5..10 (bits 40..87), shifted down 4 below; byte 63 of the load is zero.
  alignas(64) uint8_t idx[64];
  for (int b = 0; b < 64; ++b) {
    const int g = b / 16, j = b % 16;
    idx[b] = static_cast<uint8_t>(j < 8 ? 11 * g + j : j < 14 ? 11 * g + 5 + (j - 8) : 63);
  }
  const __m512i spread = _mm512_load_si512(idx);
  uint64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512i bytes = _mm512_maskz_loadu_epi8((uint64_t{1} << 44) - 1, packed + 11 * (i / 8));
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi8(spread, bytes), shifts), bits44);
    const __m512i d = _mm512_or_si512(_mm512_and_si512(q, bits22), _mm512_slli_epi64(_mm512_srli_epi64(q, 22), 32));
    const __m512i r = _mm512_or_si512(_mm512_and_si512(d, k7ff), _mm512_slli_epi32(_mm512_srli_epi32(d, 11), 16));
    const __m512i s = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sym + i)));
    const __m512i v = _mm512_or_si512(
        _mm512_or_si512(_mm512_slli_epi16(_mm512_and_si512(r, k400), 5), _mm512_slli_epi16(s, 10)),
        _mm512_and_si512(r, k3ff));
    _mm512_storeu_si512(out + 2 * i, v);
  }
  return i;
}

// The fields of 64 fp8 bytes with kMant mantissa bits (e4m3: 3, e5m2: 2):
// their exponent symbols (bits 6..kMant), their raw parts (sign << kMant |
// mantissa), and the bytes again from both.
template <int kMant>
__attribute__((target("avx512f,avx512bw"))) inline __m512i Fp8Symbols(__m512i v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, kMant), _mm512_set1_epi8((1 << (7 - kMant)) - 1));
}
template <int kMant>
__attribute__((target("avx512f,avx512bw"))) inline __m512i Fp8Raw(__m512i v) {
  return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 7 - kMant), _mm512_set1_epi8(1 << kMant)),
                         _mm512_and_si512(v, _mm512_set1_epi8((1 << kMant) - 1)));
}
template <int kMant>
__attribute__((target("avx512f,avx512bw"))) inline __m512i Fp8Join(__m512i sym, __m512i raw) {
  const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(raw, _mm512_set1_epi8(1 << kMant)), 7 - kMant);
  const __m512i exp = _mm512_and_si512(_mm512_slli_epi16(sym, kMant), _mm512_set1_epi8(0x7f & ~((1 << kMant) - 1)));
  return _mm512_or_si512(_mm512_or_si512(sign, exp), _mm512_and_si512(raw, _mm512_set1_epi8((1 << kMant) - 1)));
}

// fp8 e4m3, 64 elements a step: symbols (bits 6..3) to sym, raw parts (sign
// << 3 | mantissa, 4 bits) two to a byte into packed (element 2j in the low
// nibble), as PackGroup packs them. Returns the elements done (a multiple of
// 64; the caller packs the rest).
__attribute__((target("avx512f,avx512bw"))) uint64_t SplitE4m3Avx512(const uint8_t* in, uint64_t count,
                                                                    uint8_t* sym, uint8_t* packed) {
  const __m512i pair = _mm512_set1_epi16(0x1001);  // bytes 1 and 16: r0 + r1 << 4
  uint64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m512i v = _mm512_loadu_si512(in + i);
    _mm512_storeu_si512(sym + i, Fp8Symbols<3>(v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + i / 2),
                        _mm512_cvtepi16_epi8(_mm512_maddubs_epi16(Fp8Raw<3>(v), pair)));
  }
  return i;
}

// The inverse of SplitE4m3Avx512. Returns the elements done (a multiple of 64).
__attribute__((target("avx512f,avx512bw"))) uint64_t JoinE4m3Avx512(const uint8_t* sym, const uint8_t* packed,
                                                                   uint64_t count, uint8_t* out) {
  const __m512i k0f = _mm512_set1_epi16(0x0f);
  uint64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + i / 2)));
    const __m512i r = _mm512_or_si512(_mm512_and_si512(b, k0f), _mm512_slli_epi16(_mm512_srli_epi16(b, 4), 8));
    _mm512_storeu_si512(out + i, Fp8Join<3>(_mm512_loadu_si512(sym + i), r));
  }
  return i;
}

// fp8 e5m2, 64 elements a step: symbols (bits 6..2) to sym, raw parts (sign
// << 2 | mantissa, 3 bits) packed 8 to a group of 3 bytes into packed, as
// PackGroup packs them. Pairs of raw parts become 6-bit words (one
// multiply-add of bytes), pairs of those 12-bit dwords (one of words), pairs
// of those a group's 24 bits in a qword, whose 3 low bytes a byte permute
// gathers. Returns the elements done (a multiple of 64).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) uint64_t SplitE5m2Avx512(const uint8_t* in, uint64_t count,
                                                                               uint8_t* sym, uint8_t* packed) {
  const __m512i pair8 = _mm512_set1_epi16(0x0801);      // bytes 1 and 8: r0 + r1 << 3
  const __m512i pair16 = _mm512_set1_epi32(0x00400001);  // words 1 and 64: w0 + w1 << 6
  const __m512i low32 = _mm512_set1_epi64(0xffffffffLL);
  const __m512i gather = GatherIndex(3, 8, 8);
  uint64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m512i v = _mm512_loadu_si512(in + i);
    _mm512_storeu_si512(sym + i, Fp8Symbols<2>(v));
    // Dword k: raw parts 4k .. 4k + 3.
    const __m512i d = _mm512_madd_epi16(_mm512_maddubs_epi16(Fp8Raw<2>(v), pair8), pair16);
    const __m512i q = _mm512_or_si512(_mm512_and_si512(d, low32), _mm512_slli_epi64(_mm512_srli_epi64(d, 32), 12));
    _mm512_mask_storeu_epi8(packed + 3 * (i / 8), (uint64_t{1} << 24) - 1, _mm512_permutexvar_epi8(gather, q));
  }
  return i;
}

// The inverse of SplitE5m2Avx512. Returns the elements done (a multiple of 64).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) uint64_t JoinE5m2Avx512(const uint8_t* sym,
                                                                              const uint8_t* packed, uint64_t count,
                                                                              uint8_t* out) {
  const __m512i bits12 = _mm512_set1_epi64(0xfff), k3f = _mm512_set1_epi32(0x3f), k07 = _mm512_set1_epi16(0x07);
  // Qword g: group g's 3 bytes; byte 63 of the masked load is zero.
  const __m512i spread = SpreadIndex(3, 8);
  uint64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m512i q = _mm512_permutexvar_epi8(spread, _mm512_maskz_loadu_epi8((uint64_t{1} << 24) - 1,
                                                                              packed + 3 * (i / 8)));
    const __m512i d = _mm512_or_si512(_mm512_and_si512(q, bits12),
                                      _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(q, 12), bits12), 32));
    const __m512i w = _mm512_or_si512(_mm512_and_si512(d, k3f),
                                      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(d, 6), k3f), 16));
    const __m512i r = _mm512_or_si512(_mm512_and_si512(w, k07),
                                      _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(w, 3), k07), 8));
    _mm512_storeu_si512(out + i, Fp8Join<2>(_mm512_loadu_si512(sym + i), r));
  }
  return i;
}

// fp32, 16 elements a step: symbols (bits 30..23) to sym, raw parts (sign
// << 23 | mantissa, 24 bits) 3 bytes each into packed, as PackGroup packs
// them (24 bits are whole bytes: each part's 3 low bytes in turn, which a
// byte permute gathers). Returns the elements done (a multiple of 16).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) uint64_t SplitFp32Avx512(const uint8_t* in, uint64_t count,
                                                                               uint8_t* sym, uint8_t* packed) {
  const __m512i kff = _mm512_set1_epi32(0xff), sign = _mm512_set1_epi32(0x800000), mant = _mm512_set1_epi32(0x7fffff);
  const __m512i gather = GatherIndex(3, 4, 16);
  uint64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i v = _mm512_loadu_si512(in + 4 * i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(sym + i),
                     _mm512_cvtepi32_epi8(_mm512_and_si512(_mm512_srli_epi32(v, 23), kff)));
    const __m512i r = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 8), sign), _mm512_and_si512(v, mant));
    _mm512_mask_storeu_epi8(packed + 3 * i, (uint64_t{1} << 48) - 1, _mm512_permutexvar_epi8(gather, r));
  }
  return i;
}

// The inverse of SplitFp32Avx512. Returns the elements done (a multiple of 16).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) uint64_t JoinFp32Avx512(const uint8_t* sym,
                                                                              const uint8_t* packed, uint64_t count,
                                                                              uint8_t* out) {
  const __m512i sign = _mm512_set1_epi32(0x800000), mant = _mm512_set1_epi32(0x7fffff);
  // Dword k: raw part k's 3 bytes; byte 63 of the masked load is zero.
  const __m512i spread = SpreadIndex(3, 4);
  uint64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i r =
        _mm512_permutexvar_epi8(spread, _mm512_maskz_loadu_epi8((uint64_t{1} << 48) - 1, packed + 3 * i));
    const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sym + i)));
    const __m512i v = _mm512_or_si512(
        _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(r, sign), 8), _mm512_slli_epi32(s, 23)),
        _mm512_and_si512(r, mant));
    _mm512_storeu_si512(out + 4 * i, v);
  }
  return i;
}

// The encode entries (freq | cum << 16) of 16 symbols; table_of: their tables, or null.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx512dq"))) inline __m512i EncodeEntries16(
    const uint8_t* sym, const uint8_t* table_of, const uint32_t* enc) {
  __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sym)));
  if (table_of != nullptr) {
    const __m512i tb = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table_of)));
    idx = _mm512_add_epi32(idx, _mm512_slli_epi32(tb, 8));
  }
  return _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(enc), 4);
}

// Encodes rounds [0, rounds) (all full), last to first, with AVX-512. Words go
// into the stream from its end backwards: each round's words land, in ascending
// lane order, just before the words of the rounds after it. `enc` holds
// freq | cum << 16 per (table, symbol).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,avx512dq"))) void EncodeRoundsAvx512(
    uint32_t* x, uint32_t rounds, const uint8_t* sym, const uint8_t* table_of, const uint32_t* enc, uint16_t** pos) {
  __m512i X[2] = {_mm512_loadu_si512(x), _mm512_loadu_si512(x + 16)};
  const __m512i kFFFF = _mm512_set1_epi32(0xffff);
  uint16_t* p = *pos;
  __m512i even[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // an odd round's partners, for the round after
  for (uint32_t r = rounds; r-- > 0;) {
    __mmask16 need[2] = {0, 0};
    __m512i word[2];
    for (int h = 0; h < 2; ++h) {
      const uint32_t j = r * kLanes + 16 * h;
      const uint8_t* tb = table_of != nullptr ? table_of + j : nullptr;
      const __m512i e = r % 2 == 1 || r + 1 == rounds ? EncodeEntries16(sym + j, tb, enc) : even[h];
      const __m512i f = _mm512_and_si512(e, kFFFF), cum = _mm512_srli_epi32(e, 16);
      if (r % 2 == 1) {  // EmitsWord: (x >> 16) >= f_odd * f_even
        even[h] = EncodeEntries16(sym + j - kLanes, tb != nullptr ? tb - kLanes : nullptr, enc);
        const __m512i prod = _mm512_mullo_epi32(f, _mm512_and_si512(even[h], kFFFF));
        need[h] = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(X[h], 16), prod);
      }
      word[h] = X[h];
      const __m512i v = _mm512_mask_srli_epi32(X[h], need[h], X[h], 16);
      // q = v / f, exactly: a correctly rounded double quotient of a 32-bit v
      // by f <= 256 is never within 2^-8 of the next integer above it.
      const __m512d lo =
          _mm512_div_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(v)), _mm512_cvtepu32_pd(_mm512_castsi512_si256(f)));
      const __m512d hi = _mm512_div_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(v, 1)),
                                       _mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(f, 1)));
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvttpd_epu32(lo)), _mm512_cvttpd_epu32(hi), 1);
      const __m512i rem = _mm512_sub_epi32(v, _mm512_mullo_epi32(q, f));
      X[h] = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q, kProbBits), rem), cum);
    }
    const int c0 = __builtin_popcount(need[0]), c1 = __builtin_popcount(need[1]);
    p -= c0 + c1;
    // Compress in registers and store exactly the kept words with a masked
    // store (a compressing store to memory is lowered differently by
    // different compilers, and is slow on some CPUs; a copy of a run-time
    // length was a library call per half round).
    _mm256_mask_storeu_epi16(p, static_cast<__mmask16>((1u << c0) - 1),
                             _mm256_maskz_compress_epi16(need[0], _mm512_cvtepi32_epi16(word[0])));
    _mm256_mask_storeu_epi16(p + c0, static_cast<__mmask16>((1u << c1) - 1),
                             _mm256_maskz_compress_epi16(need[1], _mm512_cvtepi32_epi16(word[1])));
  }
  _mm512_storeu_si512(x, X[0]);
  _mm512_storeu_si512(x + 16, X[1]);
  *pos = p;
}

// Encodes symbols [begin, end) of the chunk into `out` (coded or RAW).
// Returns the directory entry.
// `unseen`: the table may lack symbols of the tile (a sampled table); a tile
// with such a symbol is RAW.
// `carry`: the tile's kCarryBytes carry bytes, or null: lane l starts from
// 2^16 | their u16 l (a RAW tile appends them).
uint32_t EncodeTile(const uint8_t* sym, uint64_t begin, uint64_t end, const uint8_t* table_of, uint32_t exp_bits,
                    const std::vector<Table>& tables, const std::vector<uint32_t>& enc, bool unseen,
                    const uint8_t* carry, std::vector<uint8_t>* out) {
  const uint32_t n = static_cast<uint32_t>(end - begin);
  const uint64_t packed = (PackedBytes(n, exp_bits) + 3) & ~uint64_t{3};
  const uint64_t raw_bytes = packed + (carry != nullptr ? plan::kCarryBytes : 0);
  auto raw_tile = [&] {
    out->assign(raw_bytes, 0);
    Pack(n, exp_bits, out->data(), [&](uint64_t i) { return uint32_t{sym[begin + i]}; });
    if (carry != nullptr) std::memcpy(out->data() + packed, carry, plan::kCarryBytes);
    return static_cast<uint32_t>(raw_bytes) | kTileRaw;
  };
  if (unseen) {  // order-0 only (sampled tables)
    uint32_t missing = 0;
    for (uint64_t i = begin; i < end; ++i) missing |= tables[0].freq[sym[i]] == 0;
    if (missing != 0) return raw_tile();
  }
  uint32_t x[kLanes];
  for (int l = 0; l < kLanes; ++l) x[l] = carry != nullptr ? kL | Get<uint16_t>(carry + 2 * l) : kL;
  // At most one word per symbol; the stream is written from the end backwards.
  thread_local std::vector<uint16_t> word_buf(kMaxTileSymbols + 1);  // n <= kMaxTileSymbols
  uint16_t* const words_end = word_buf.data() + n + 1;
  uint16_t* pos = words_end;
  const uint32_t rounds = (n + kLanes - 1) / kLanes;
  const uint32_t full = n / kLanes;
  // The frequency of the tile's symbol j (an odd round's partner).
  auto freq_at = [&](uint32_t j) {
    return tables[table_of != nullptr ? table_of[begin + j] : 0].freq[sym[begin + j]];
  };
  uint32_t r = rounds;
  // The partial last round (if any) first, scalar.
  for (; r > full;) {
    --r;
    for (int l = kLanes - 1; l >= 0; --l) {
      const uint32_t j = r * kLanes + static_cast<uint32_t>(l);
      if (j >= n) continue;
      const uint32_t s = sym[begin + j];
      const Table& t = tables[table_of != nullptr ? table_of[begin + j] : 0];
      uint32_t v = x[l];
      if (r % 2 == 1 && EmitsWord(v, t.freq[s], freq_at(j - kLanes))) {
        *--pos = static_cast<uint16_t>(v);
        v >>= 16;
      }
      // A plain division: reciprocal tricks (ryg_rans) are exact only for
      // x < 2^31, and these states reach 2^32 - 1.
      const uint32_t f = t.freq[s];
      x[l] = ((v / f) << kProbBits) + (v % f) + t.cum[s];
    }
    if (kHasAvx512 && g_simd.load(std::memory_order_relaxed)) break;
  }
  if (r > 0 && kHasAvx512 && g_simd.load(std::memory_order_relaxed)) {
    EncodeRoundsAvx512(x, r, sym + begin, table_of != nullptr ? table_of + begin : nullptr, enc.data(), &pos);
    r = 0;
  }
  for (; r-- > 0;) {
    for (int l = kLanes - 1; l >= 0; --l) {
      const uint32_t j = r * kLanes + static_cast<uint32_t>(l);
      const uint32_t s = sym[begin + j];
      const Table& t = tables[table_of != nullptr ? table_of[begin + j] : 0];
      uint32_t v = x[l];
      // Branch-free renormalisation: the word is always written, kept only if needed.
      const bool renorm = r % 2 == 1 && EmitsWord(v, t.freq[s], freq_at(j - kLanes));
      pos[-1] = static_cast<uint16_t>(v);
      pos -= renorm;
      v = renorm ? v >> 16 : v;
      const uint32_t f = t.freq[s];
      x[l] = ((v / f) << kProbBits) + (v % f) + t.cum[s];
    }
  }
  const size_t nwords = static_cast<size_t>(words_end - pos);
  const uint64_t coded = (kLanes * 4 + nwords * 2 + 3) & ~uint64_t{3};
  if (coded >= raw_bytes) return raw_tile();
  out->assign(coded, 0);
  uint8_t* p = out->data();
  for (int l = 0; l < kLanes; ++l) Put<uint32_t>(p + 4 * l, x[l]);
  p += kLanes * 4;
  for (size_t k = 0; k < nwords; ++k) Put<uint16_t>(p + 2 * k, pos[k]);
  return static_cast<uint32_t>(coded);
}

struct DecodeTable {
  uint32_t freq[256], cum[256];
  uint8_t slot_sym[kM];
  // Per slot, for the SIMD decoder: sym | (freq - 1) << 8 | (slot - cum) << 20.
  uint32_t packed[kM];
};

// Decodes `rounds` full rounds (32 symbols each) with AVX-512: 16 lanes per
// register, the slot table gathered, words handed to the lanes that need them
// in ascending lane order by an expanding load. Returns false if the stream
// ends early. x, *wp are updated.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2"))) bool DecodeRoundsAvx512(
    uint32_t* x, const uint8_t** wp, const uint8_t* w_end, uint32_t rounds, const uint8_t* table_of,
    const uint32_t* packed, int32_t stride, uint8_t* sym) {
  __m512i X[2] = {_mm512_loadu_si512(x), _mm512_loadu_si512(x + 16)};
  const __m512i kSlot = _mm512_set1_epi32(kM - 1), k4095 = _mm512_set1_epi32(4095), k255 = _mm512_set1_epi32(255),
                one = _mm512_set1_epi32(1);
  const __m512i L = _mm512_set1_epi32(static_cast<int>(kL)), vstride = _mm512_set1_epi32(stride);
  const uint8_t* w = *wp;
  for (uint32_t r = 0; r < rounds; ++r) {
    for (int h = 0; h < 2; ++h) {
      const uint32_t j = r * kLanes + 16 * h;
      __m512i idx = _mm512_and_si512(X[h], kSlot);
      if (table_of != nullptr) {
        const __m512i tb = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table_of + j)));
        idx = _mm512_add_epi32(idx, _mm512_mullo_epi32(tb, vstride));
      }
      const __m512i e = _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(packed), 4);
      const __m512i freq = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 8), k4095), one);
      X[h] = _mm512_add_epi32(_mm512_mullo_epi32(freq, _mm512_srli_epi32(X[h], kProbBits)), _mm512_srli_epi32(e, 20));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(sym + j), _mm512_cvtepi32_epi8(_mm512_and_si512(e, k255)));
      if (r % 2 == 0) continue;  // lanes refill after odd rounds only
      const __mmask16 need = _mm512_cmplt_epu32_mask(X[h], L);
      const int count = __builtin_popcount(need);
      if (w + 2 * count > w_end) return false;
      // Load exactly the words needed (a masked load: the words past them are
      // not read; a copy of a run-time length was a library call, and its
      // stores' reload a stall), then expand them to their lanes in registers.
      const __m256i loaded = _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << count) - 1), w);
      const __m512i words = _mm512_cvtepu16_epi32(_mm256_maskz_expand_epi16(need, loaded));
      X[h] = _mm512_mask_or_epi32(X[h], need, _mm512_slli_epi32(X[h], 16), words);
      w += 2 * count;
    }
  }
  _mm512_storeu_si512(x, X[0]);
  _mm512_storeu_si512(x + 16, X[1]);
  *wp = w;
  return true;
}

// `carry`: where the tile's carry bytes go, or null when it has none.
absl::Status DecodeTile(const uint8_t* tile, uint32_t entry, uint64_t begin, uint64_t end, uint32_t exp_bits,
                        const uint8_t* table_of, const std::vector<DecodeTable>& tables, uint8_t* sym,
                        uint8_t* carry) {
  const uint32_t n = static_cast<uint32_t>(end - begin);
  const uint32_t size = entry & ~kTileRaw;
  if (entry & kTileRaw) {
    const uint64_t packed = (PackedBytes(n, exp_bits) + 3) & ~uint64_t{3};
    if (size != packed + (carry != nullptr ? plan::kCarryBytes : 0)) return Corrupt("raw tile size");
    UnpackBytes(n, exp_bits, tile, sym + begin);
    if (carry != nullptr) std::memcpy(carry, tile + packed, plan::kCarryBytes);
    return absl::OkStatus();
  }
  if (size < kLanes * 4) return Corrupt("coded tile shorter than its states");
  uint32_t x[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    x[l] = Get<uint32_t>(tile + 4 * l);
    if (x[l] < kL) return Corrupt("rANS state out of range");
  }
  const uint8_t* w = tile + kLanes * 4;
  const uint8_t* w_end = tile + size;
  const uint32_t rounds = (n + kLanes - 1) / kLanes;
  uint32_t r = 0;
  if (kHasAvx512 && g_simd.load(std::memory_order_relaxed)) {
    const uint32_t full = n / kLanes;  // the partial last round stays scalar
    const int32_t stride = static_cast<int32_t>(sizeof(DecodeTable) / 4);
    if (!DecodeRoundsAvx512(x, &w, w_end, full, table_of != nullptr ? table_of + begin : nullptr, tables[0].packed,
                            stride, sym + begin)) {
      return Corrupt("rANS stream ends early");
    }
    r = full;
  }
  for (; r < rounds; ++r) {
    for (int l = 0; l < kLanes; ++l) {
      const uint32_t j = r * kLanes + static_cast<uint32_t>(l);
      if (j >= n) break;
      const DecodeTable& t = tables[table_of != nullptr ? table_of[begin + j] : 0];
      const uint32_t slot = x[l] & (kM - 1);
      const uint32_t s = t.slot_sym[slot];
      if (t.freq[s] == 0) return Corrupt("coded symbol uses an empty table");
      uint32_t v = t.freq[s] * (x[l] >> kProbBits) + slot - t.cum[s];
      const bool renorm = r % 2 == 1 && v < kL;  // after odd rounds only
      if (renorm && w + 2 > w_end) return Corrupt("rANS stream ends early");
      const uint32_t word = w + 2 <= w_end ? Get<uint16_t>(w) : 0;
      x[l] = renorm ? (v << 16) | word : v;
      w += renorm ? 2 : 0;
      sym[begin + j] = static_cast<uint8_t>(s);
    }
  }
  // Every lane ends where it started: 2^16, or 2^16 | its carry bytes.
  for (int l = 0; l < kLanes; ++l) {
    if (carry != nullptr ? x[l] >> 16 != 1 : x[l] != kL) return Corrupt("rANS final state");
    if (carry != nullptr) Put<uint16_t>(carry + 2 * l, static_cast<uint16_t>(x[l]));
  }
  if (((w - tile + 3) & ~static_cast<ptrdiff_t>(3)) != static_cast<ptrdiff_t>(size)) {
    return Corrupt("rANS stream has unread words");
  }
  return absl::OkStatus();
}

// ---- channel grouping (KV-aware mode) -------------------------------------

struct Grouping {
  uint32_t groups = 1;
  std::vector<uint8_t> channel_group;  // C entries, empty when groups == 1
  std::vector<Table> tables;
  size_t side_bytes = 0;  // map + tables
  uint64_t cost_q16 = 0;  // estimated coded size of the symbols, 1/65536 bits

  uint64_t TotalQ16() const { return cost_q16 + (uint64_t{side_bytes} << 19); }  // 8 bits/byte in Q16
};

void CountSymbols(absl::Span<const uint8_t> sym, uint64_t part[4][256]) {
  const size_t n = sym.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++part[0][sym[i]];
    ++part[1][sym[i + 1]];
    ++part[2][sym[i + 2]];
    ++part[3][sym[i + 3]];
  }
  for (; i < n; ++i) ++part[0][sym[i]];
}

// The order-0 table of the chunk's symbols, or, when `block` is not 0, of
// its sample (plan::Sampled): elements [k block, (k + 1) block) for k a
// multiple of plan::kSampleStride. A sampled cost is scaled by the stride
// (an estimate, as split-send's EstimatedChunkBytes is).
Grouping Order0(absl::Span<const uint8_t> sym, bool refine, uint64_t block = 0) {
  uint64_t part[4][256] = {};
  if (block == 0) {
    CountSymbols(sym, part);
  } else {
    for (uint64_t e = 0; e < sym.size(); e += block * plan::kSampleStride) {
      CountSymbols(sym.subspan(e, std::min<uint64_t>(block, sym.size() - e)), part);
    }
  }
  uint64_t hist[256];
  for (int s = 0; s < 256; ++s) hist[s] = part[0][s] + part[1][s] + part[2][s] + part[3][s];
  if (block != 0) {  // a sample's holes (plan::SampleHole) count 1
    bool hole[256] = {};
    uint32_t holes = 0;
    for (int s = 1; s < 255; ++s) holes += hole[s] = plan::SampleHole(hist[s - 1], hist[s], hist[s + 1]);
    for (int s = 1; s < 255 && holes <= plan::kMaxSampleHoles; ++s) hist[s] += hole[s];
  }
  Grouping g;
  g.tables.push_back(Normalize(hist, refine));
  g.side_bytes = TableBytes(g.tables[0]);
  g.cost_q16 = CostQ16(hist, g.tables[0]) * (block == 0 ? 1 : plan::kSampleStride);
  return g;
}

// A caller's table (EncodeOptions::table, checked by CheckTable).
Grouping Given(const FrequencyTable& given) {
  Grouping g;
  Table t;
  for (int s = 0; s < 256; ++s) t.freq[s] = given.freq[s];
  t.Finish();
  g.tables.push_back(t);
  g.side_bytes = TableBytes(t);
  return g;
}

// A table a chunk can store: frequencies summing to kM, none for a symbol
// wider than the dtype's exponent (E bits).
absl::Status CheckTable(const FrequencyTable& t, uint32_t exp_bits) {
  uint32_t sum = 0;
  for (uint32_t s = 0; s < 256; ++s) {
    if (t.freq[s] != 0 && s >> exp_bits != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table gives symbol %d a frequency, past the %d-bit exponents", s, exp_bits));
    }
    sum += t.freq[s];
  }
  if (sum != kM) return absl::InvalidArgumentError(absl::StrFormat("table frequencies sum to %d, not %d", sum, kM));
  return absl::OkStatus();
}

// KV-aware mode: channels ranked by mean exponent (plan::ChannelKey), cut into
// 16 groups whose histograms are counted once; the candidates with 2, 4 and 8
// tables merge neighbouring groups (plan::Group16).
class ChannelStats {
 public:
  ChannelStats(absl::Span<const uint8_t> sym, uint64_t channels)
      : channels_(channels), group16_(channels), hist16_(16 * 256, 0) {
    std::vector<uint64_t> sum(channels_, 0);
    uint64_t c = 0;
    for (uint8_t s : sym) {
      sum[c] += s;
      if (++c == channels_) c = 0;
    }
    std::vector<uint64_t> key(channels_);
    for (uint64_t ch = 0; ch < channels_; ++ch) {
      key[ch] = plan::ChannelKey(sum[ch], plan::ChannelCount(sym.size(), channels_, ch), static_cast<uint32_t>(ch));
    }
    std::sort(key.begin(), key.end());  // keys are unique: the channel is in the low bits
    for (uint64_t k = 0; k < channels_; ++k) {
      group16_[static_cast<uint32_t>(key[k])] = static_cast<uint8_t>(plan::Group16(k, channels_));
    }
    c = 0;
    for (uint8_t s : sym) {
      ++hist16_[group16_[c] * 256 + s];
      if (++c == channels_) c = 0;
    }
  }

  Grouping Groups(uint32_t groups, bool refine) const {
    const uint32_t shift = groups == 2 ? 3 : groups == 4 ? 2 : groups == 8 ? 1 : 0;
    Grouping g;
    g.groups = groups;
    g.channel_group.resize(channels_);
    for (uint64_t c = 0; c < channels_; ++c) g.channel_group[c] = static_cast<uint8_t>(group16_[c] >> shift);
    std::vector<uint64_t> hist(groups * 256, 0);
    for (uint32_t k = 0; k < 16; ++k) {
      for (int s = 0; s < 256; ++s) hist[(k >> shift) * 256 + s] += hist16_[k * 256 + s];
    }
    g.side_bytes = channels_;
    for (uint32_t k = 0; k < groups; ++k) {
      g.tables.push_back(Normalize(&hist[k * 256], refine));
      g.side_bytes += TableBytes(g.tables.back());
      g.cost_q16 += CostQ16(&hist[k * 256], g.tables.back());
    }
    return g;
  }

 private:
  uint64_t channels_;
  std::vector<uint8_t> group16_;
  std::vector<uint64_t> hist16_;
};

}  // namespace

// ---- public API ------------------------------------------------------------

void SetSimdForTesting(bool enabled) { g_simd.store(enabled); }

absl::StatusOr<DTypeInfo> Info(DType d) {
  switch (d) {
    case DType::kBF16:
      return DTypeInfo{2, 8, 8};
    case DType::kFP16:
      return DTypeInfo{2, 5, 11};
    case DType::kFP32:
      return DTypeInfo{4, 8, 24};
    case DType::kFP8E4M3:
      return DTypeInfo{1, 4, 4};
    case DType::kFP8E5M2:
      return DTypeInfo{1, 5, 3};
    case DType::kBytes:
      return DTypeInfo{1, 8, 0};
  }
  return absl::InvalidArgumentError(absl::StrFormat("unknown dtype %d", static_cast<int>(d)));
}

absl::StatusOr<DType> ParseDType(const char* name) {
  const std::string n = name;
  if (n == "bf16") return DType::kBF16;
  if (n == "fp16") return DType::kFP16;
  if (n == "fp32") return DType::kFP32;
  if (n == "fp8_e4m3" || n == "fp8") return DType::kFP8E4M3;
  if (n == "fp8_e5m2") return DType::kFP8E5M2;
  if (n == "bytes") return DType::kBytes;
  return absl::InvalidArgumentError("unknown dtype '" + n + "' (bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, bytes)");
}

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kBF16:
      return "bf16";
    case DType::kFP16:
      return "fp16";
    case DType::kFP32:
      return "fp32";
    case DType::kFP8E4M3:
      return "fp8_e4m3";
    case DType::kFP8E5M2:
      return "fp8_e5m2";
    case DType::kBytes:
      return "bytes";
  }
  return "?";
}

absl::StatusOr<size_t> Encode(const EncodeOptions& o, const void* in_v, size_t in_bytes, void* out_v,
                              size_t out_capacity) {
  auto split = MakeSplit(o.dtype);
  if (!split.ok()) return split.status();
  const Split& sp = *split;
  if (in_bytes % sp.info.bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bytes is not a whole number of %s elements", in_bytes, DTypeName(o.dtype)));
  }
  const size_t need = o.on_raw_plane ? MaxSplitEncodedBytes(in_bytes) : MaxEncodedBytes(in_bytes);
  if (out_capacity < need) {
    return absl::InvalidArgumentError(absl::StrFormat("output capacity %d < %d needed", out_capacity, need));
  }
  if (o.tile_log2 != 0 && (o.tile_log2 < plan::kMinTileLog2 || o.tile_log2 > plan::kMaxTileLog2)) {
    return absl::InvalidArgumentError(absl::StrFormat("tile_log2 %d is not 0 (automatic) or %d..%d", o.tile_log2,
                                                      plan::kMinTileLog2, plan::kMaxTileLog2));
  }
  if (o.tile_log2 != 0 && o.on_raw_plane && (uint64_t{sp.info.bytes} << o.tile_log2) < plan::kMinTileInputBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("with on_raw_plane, tiles must cover at least %d bytes of input", plan::kMinTileInputBytes));
  }
  if (o.table != nullptr) {
    if (o.on_raw_plane) return absl::InvalidArgumentError("a given table (table reuse) is not for split-send");
    if (absl::Status s = CheckTable(*o.table, sp.info.exp_bits); !s.ok()) return s;
  }
  const uint64_t n = in_bytes / sp.info.bytes;
  if (n > kMaxElements) return absl::InvalidArgumentError("chunk too large");
  if (in_bytes > 0 && (in_v == nullptr || out_v == nullptr)) return absl::InvalidArgumentError("null buffer");
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  const uint64_t channels = o.layout.channels();
  // Of the input; taken after the split, so that the raw plane is out first.
  uint64_t checksum = 0;
  bool summed = false;
  auto sum = [&] {
    if (!summed) checksum = Kvsum64(in, in_bytes);
    summed = true;
  };

  auto header = [&](uint16_t flags, uint32_t tables, uint32_t tile_log2, uint32_t tiles, uint64_t raw_plane,
                    uint64_t payload) {
    std::memset(out, 0, kHeaderBytes);
    std::memcpy(out, kMagic, 4);
    out[4] = kFormatVersion;
    out[5] = static_cast<uint8_t>(o.dtype);
    Put<uint16_t>(out + 6, flags);
    Put<uint64_t>(out + 8, n);
    Put<uint32_t>(out + 16, o.layout.tokens);
    Put<uint32_t>(out + 20, o.layout.heads);
    Put<uint32_t>(out + 24, o.layout.head_dim);
    Put<uint16_t>(out + 28, static_cast<uint16_t>(tables));
    out[30] = static_cast<uint8_t>(tile_log2);
    Put<uint32_t>(out + 32, tiles);
    Put<uint64_t>(out + 40, raw_plane);
    Put<uint64_t>(out + 48, payload);
    Put<uint64_t>(out + 56, checksum);
  };
  auto stored = [&]() -> size_t {
    sum();
    header(kFlagStored, 0, 0, 0, 0, in_bytes);
    if (in_bytes > 0) std::memcpy(out + kHeaderBytes, in, in_bytes);
    return kHeaderBytes + in_bytes;
  };
  if (n == 0) return stored();

  const uint32_t tile_log2 = o.tile_log2 != 0 ? o.tile_log2 : plan::TileLog2(sp.info.bytes, n);
  const uint64_t tile = uint64_t{1} << tile_log2;
  const uint32_t tiles = static_cast<uint32_t>(plan::TileCount(n, tile_log2));
  const uint32_t W = sp.info.raw_bits;
  const uint64_t carry_tiles = plan::CarryTiles(n, W, tile_log2);
  const uint64_t raw_plane = plan::RawPlaneBytes(n, W, tile_log2);
  // Group padding can make the raw plane alone as large as the input (tiny
  // chunks): then coding cannot pay, and the plane would not fit in `out`.
  if (raw_plane >= in_bytes) return stored();
  const int threads = Threads(o.threads, tiles);
  // 1. Split: symbols to a temporary array, the raw plane straight into place
  // (each whole tile's last kCarryBytes of it to `carry`, for its states).
  Scratch scratch;
  uint8_t* const sym = scratch.Bytes(n);
  std::vector<uint8_t> carry(carry_tiles * plan::kCarryBytes);
  uint8_t* raw_out = out + kHeaderBytes;
  const uint64_t tile_raw = plan::TileRawBytes(W, tile_log2);
  const bool simd = kHasAvx512 && g_simd.load(std::memory_order_relaxed);
  ParallelFor(tiles, threads, [&](uint64_t t) {
    const uint64_t e0 = t * tile, e1 = std::min(n, e0 + tile);
    const bool carries = t < carry_tiles;
    // Tiles before t each left kCarryBytes of their part out of the plane.
    uint8_t* const plane = raw_out + t * tile_raw - plan::CarriedBefore(t, carry_tiles);
    uint8_t* const tile_carry = carries ? carry.data() + t * plan::kCarryBytes : nullptr;
    if (o.dtype == DType::kBF16) {  // the common case: a raw byte per element
      const uint64_t keep = carries ? e1 - e0 - plan::kCarryBytes : e1 - e0;
      auto split = [&](uint64_t a, uint64_t len, uint8_t* raw) {
        if (simd) return SplitBf16Avx512(in + 2 * a, 0, len, sym + a, raw);
        for (uint64_t i = 0; i < len; ++i) {
          uint16_t v;
          std::memcpy(&v, in + 2 * (a + i), 2);
          sym[a + i] = static_cast<uint8_t>(v >> 7);
          raw[i] = static_cast<uint8_t>(((v >> 8) & 0x80) | (v & 0x7f));
        }
      };
      split(e0, keep, plane);
      if (carries) split(e0 + keep, plan::kCarryBytes, tile_carry);
      return;
    }
    // fp16, fp32, fp8: symbols and packed raw parts in one pass, group by group.
    const bool split_done = WithFloatElem(o.dtype, [&](auto el) {
      using E = decltype(el);
      auto split = [&](uint64_t a, uint64_t count, uint8_t* packed) {  // elements [a, a + count)
        constexpr std::integral_constant<uint32_t, E::kRawBits> w{};
        uint32_t raw[8];
        uint64_t g = 0;
        if constexpr (std::is_same_v<E, Elem<2, 5, 10>>) {
          if (simd) g = SplitFp16Avx512(in + 2 * a, count, sym + a, packed) / 8;
        } else if constexpr (std::is_same_v<E, Elem<1, 4, 3>>) {
          if (simd) g = SplitE4m3Avx512(in + a, count, sym + a, packed) / 8;
        } else if constexpr (std::is_same_v<E, Elem<1, 5, 2>>) {
          if (simd) g = SplitE5m2Avx512(in + a, count, sym + a, packed) / 8;
        } else if constexpr (std::is_same_v<E, Elem<4, 8, 23>>) {
          if (simd) g = SplitFp32Avx512(in + 4 * a, count, sym + a, packed) / 8;
        }
        auto group = [&](int k_count) {  // group g; whole groups pass a constant 8
          for (int k = 0; k < k_count; ++k) {
            const uint32_t v = E::Load(in, a + 8 * g + k);
            sym[a + 8 * g + k] = static_cast<uint8_t>(E::Symbol(v));
            raw[k] = E::Raw(v);
          }
          PackGroup(raw, k_count, w, packed + g * w);
        };
        for (; 8 * g + 8 <= count; ++g) group(8);
        if (8 * g < count) group(static_cast<int>(count - 8 * g));
      };
      if (!carries) return split(e0, e1 - e0, plane);
      // Whole groups before the carry straight into the plane; the rest (the
      // group the carry starts in, and those after it) through `last`.
      const uint64_t keep = tile_raw - plan::kCarryBytes, direct = keep / W;
      split(e0, 8 * direct, plane);
      uint8_t last[plan::kCarryBytes + 32];  // tile_raw - direct W <= kCarryBytes + W - 1 bytes
      split(e0 + 8 * direct, e1 - e0 - 8 * direct, last);
      std::memcpy(plane + direct * W, last, keep - direct * W);
      std::memcpy(tile_carry, last + (keep - direct * W), plan::kCarryBytes);
    });
    if (split_done) return;
    std::memcpy(sym + e0, in + e0, e1 - e0);  // opaque bytes: each its own symbol, no raw plane
  });

  // 2. Tables: order-0, or channel groups when a layout is given and it pays.
  // Large bf16 chunks without channel groups: order-0 from a sample.
  // A given table: no counting; its tiles' symbols checked as a sample's.
  const bool grouping =
      o.table == nullptr && o.channel_groups && channels >= 2 && channels <= kMaxGroupedChannels && n >= channels;
  const bool sampled = o.table != nullptr || plan::Sampled(o.dtype == DType::kBF16, n, grouping);
  const bool refine = plan::Refined(static_cast<uint32_t>(o.dtype));
  Grouping best = o.table != nullptr ? Given(*o.table)
                                     : Order0({sym, n}, refine, sampled ? plan::kSampleBlockBytes / sp.info.bytes : 0);
  if (grouping) {
    const ChannelStats stats({sym, n}, channels);
    for (uint32_t g : {2u, 4u, 8u, 16u}) {
      if (g > channels) break;
      Grouping cand = stats.Groups(g, refine);
      if (cand.TotalQ16() < best.TotalQ16()) best = std::move(cand);
    }
  }
  const uint8_t* table_of = nullptr;
  if (best.groups > 1) {
    uint8_t* table_per_element = scratch.Bytes(n);
    for (uint64_t i = 0, c = 0; i < n; ++i) {
      table_per_element[i] = best.channel_group[c];
      if (++c == channels) c = 0;
    }
    table_of = table_per_element;
  }

  // Split-send: the raw plane is final; the caller may take it now.
  const bool committed =
      o.on_raw_plane && raw_plane > 0 &&
      o.on_raw_plane(raw_plane, plan::EstimatedChunkBytes(raw_plane, best.TotalQ16(), tiles, carry_tiles));
  sum();

  // 3. Tiles in parallel.
  std::vector<std::vector<uint8_t>>& tile_bytes = scratch.Tiles(tiles);
  std::vector<uint32_t> dir(tiles);
  std::vector<uint32_t> enc(best.tables.size() * 256);  // freq | cum << 16, for the SIMD encoder
  for (size_t t = 0; t < best.tables.size(); ++t) {
    for (int sy = 0; sy < 256; ++sy) enc[t * 256 + sy] = best.tables[t].freq[sy] | best.tables[t].cum[sy] << 16;
  }
  ParallelFor(tiles, threads, [&](uint64_t t) {
    dir[t] = EncodeTile(sym, t * tile, std::min<uint64_t>(n, (t + 1) * tile), table_of, sp.info.exp_bits, best.tables,
                        enc, sampled, t < carry_tiles ? carry.data() + t * plan::kCarryBytes : nullptr,
                        &tile_bytes[t]);
  });

  // 4. Assemble, or store when coding does not pay.
  uint64_t payload = raw_plane + (best.groups > 1 ? channels : 0) + 4ull * tiles;
  for (const auto& t : best.tables) payload += TableBytes(t);
  const uint64_t pad = TilePad(kHeaderBytes + payload);
  payload += pad;
  for (uint32_t t = 0; t < tiles; ++t) payload += tile_bytes[t].size();
  if (payload >= in_bytes && !committed) return stored();
  if (kHeaderBytes + payload > out_capacity) return absl::InternalError("split chunk exceeds its bound");
  uint8_t* p = out + kHeaderBytes + raw_plane;
  if (best.groups > 1) {
    std::memcpy(p, best.channel_group.data(), channels);
    p += channels;
  }
  for (const auto& t : best.tables) {
    Put<uint16_t>(p, static_cast<uint16_t>(t.lo));
    Put<uint16_t>(p + 2, static_cast<uint16_t>(t.count));
    p += 4;
    for (uint32_t s = t.lo; s < t.lo + t.count; ++s, p += 2) Put<uint16_t>(p, static_cast<uint16_t>(t.freq[s]));
  }
  for (uint32_t t = 0; t < tiles; ++t, p += 4) Put<uint32_t>(p, dir[t]);
  std::memset(p, 0, pad);
  p += pad;
  for (uint32_t t = 0; t < tiles; ++t) {
    const auto& tb = tile_bytes[t];
    std::memcpy(p, tb.data(), tb.size());
    p += tb.size();
  }
  header(best.groups > 1 ? kFlagChannelGroups : 0, best.groups, tile_log2, tiles, raw_plane, payload);
  return kHeaderBytes + payload;
}

namespace {

// Everything Decode needs, parsed and checked from the chunk.
struct Parsed {
  ChunkInfo info;
  Split split;
  const uint8_t* raw_plane = nullptr;
  const uint8_t* channel_map = nullptr;
  std::vector<DecodeTable> tables;
  std::vector<uint32_t> dir;
  std::vector<const uint8_t*> tile_ptr;
};

absl::StatusOr<Parsed> Parse(const uint8_t* in, size_t in_bytes, bool build_tables) {
  if (in == nullptr || in_bytes < kHeaderBytes) return Corrupt("shorter than its 64-byte header");
  if (std::memcmp(in, kMagic, 4) != 0) return Corrupt("bad magic");
  if (in[4] != kFormatVersion) return Corrupt(absl::StrFormat("unsupported version %d", in[4]));
  Parsed p;
  p.info.dtype = static_cast<DType>(in[5]);
  auto split = MakeSplit(p.info.dtype);
  if (!split.ok()) return Corrupt(std::string(split.status().message()));
  p.split = *split;
  const uint16_t flags = Get<uint16_t>(in + 6);
  if (flags & ~(kFlagStored | kFlagChannelGroups)) return Corrupt("unknown flags");
  if (in[31] != 0 || Get<uint32_t>(in + 36) != 0) return Corrupt("reserved fields set");
  const uint64_t n = Get<uint64_t>(in + 8);
  if (n > kMaxElements) return Corrupt("element count too large");
  p.info.elements = n;
  p.info.layout = {Get<uint32_t>(in + 16), Get<uint32_t>(in + 20), Get<uint32_t>(in + 24)};
  p.info.tables = Get<uint16_t>(in + 28);
  p.info.tile_log2 = in[30];
  p.info.tiles = Get<uint32_t>(in + 32);
  p.info.raw_plane_bytes = Get<uint64_t>(in + 40);
  const uint64_t payload = Get<uint64_t>(in + 48);
  p.info.checksum = Get<uint64_t>(in + 56);
  p.info.original_bytes = n * p.split.info.bytes;
  if (payload != in_bytes - kHeaderBytes) {
    return Corrupt(absl::StrFormat("payload of %d bytes, %d present", payload, in_bytes - kHeaderBytes));
  }
  p.info.chunk_bytes = in_bytes;
  p.info.stored = flags & kFlagStored;
  p.info.channel_groups = flags & kFlagChannelGroups;
  if (p.info.stored) {
    if (p.info.channel_groups || p.info.tables != 0 || p.info.tile_log2 != 0 || p.info.tiles != 0 ||
        p.info.raw_plane_bytes != 0 || payload != p.info.original_bytes) {
      return Corrupt("inconsistent stored chunk");
    }
    return p;
  }
  const uint32_t E = p.split.info.exp_bits;
  if (n == 0) return Corrupt("coded chunk without elements");
  if (p.info.tile_log2 < plan::kMinTileLog2 || p.info.tile_log2 > plan::kMaxTileLog2) return Corrupt("tile size");
  if (p.info.raw_plane_bytes != plan::RawPlaneBytes(n, p.split.info.raw_bits, p.info.tile_log2)) {
    return Corrupt("raw plane size");
  }
  if (p.info.tiles != plan::TileCount(n, p.info.tile_log2)) return Corrupt("tile count");
  if (p.info.tables < 1 || p.info.tables > kMaxTables) return Corrupt("table count");
  if (!p.info.channel_groups && p.info.tables != 1) return Corrupt("several tables without a channel map");
  const uint8_t* cur = in + kHeaderBytes;
  const uint8_t* end = in + in_bytes;
  auto take = [&](uint64_t bytes) -> const uint8_t* {
    if (bytes > static_cast<uint64_t>(end - cur)) return nullptr;
    const uint8_t* r = cur;
    cur += bytes;
    return r;
  };
  if ((p.raw_plane = take(p.info.raw_plane_bytes)) == nullptr && p.info.raw_plane_bytes != 0) {
    return Corrupt("truncated raw plane");
  }
  if (p.info.channel_groups) {
    const uint64_t c = p.info.layout.channels();
    if (c < 2 || c > (1u << 20)) return Corrupt("channel map needs a layout hint");
    if ((p.channel_map = take(c)) == nullptr) return Corrupt("truncated channel map");
    for (uint64_t k = 0; k < c; ++k) {
      if (p.channel_map[k] >= p.info.tables) return Corrupt("channel map names a missing table");
    }
  }
  if (build_tables) p.tables.resize(p.info.tables);
  std::vector<bool> empty(p.info.tables);
  for (uint32_t t = 0; t < p.info.tables; ++t) {
    const uint8_t* h = take(4);
    if (h == nullptr) return Corrupt("truncated table");
    const uint32_t lo = Get<uint16_t>(h), count = Get<uint16_t>(h + 2);
    if (lo + count > (1u << E)) return Corrupt("table range");
    const uint8_t* f = take(2ull * count);
    if (f == nullptr) return Corrupt("truncated table");
    uint32_t any = 0;
    for (uint32_t k = 0; k < count; ++k) any |= Get<uint16_t>(f + 2 * k);
    empty[t] = any == 0;
    if (!build_tables) continue;
    DecodeTable& dt = p.tables[t];
    std::memset(dt.freq, 0, sizeof(dt.freq));
    uint32_t c = 0;
    for (uint32_t s = 0; s < 256; ++s) {
      dt.cum[s] = c;
      if (s >= lo && s < lo + count) {
        dt.freq[s] = Get<uint16_t>(f + 2 * (s - lo));
        if (c + dt.freq[s] > kM) return Corrupt(absl::StrFormat("table sums past %d", kM));
        std::memset(dt.slot_sym + c, static_cast<int>(s), dt.freq[s]);
        c += dt.freq[s];
      }
    }
    if (c != kM && c != 0) return Corrupt(absl::StrFormat("table does not sum to %d", kM));
    if (c == 0) std::memset(dt.slot_sym, 0, kM);  // unused table: any use is caught below
    for (uint32_t slot = 0; slot < kM; ++slot) {
      const uint32_t sy = dt.slot_sym[slot];
      dt.packed[slot] = sy | ((dt.freq[sy] - 1) & 0xfff) << 8 | ((slot - dt.cum[sy]) & 0xfff) << 20;
    }
  }
  // Every element's table must be non-empty (an encoder builds each table
  // from the symbols of its channels).
  if (p.info.channel_groups) {
    const uint64_t used = std::min<uint64_t>(p.info.layout.channels(), p.info.elements);
    for (uint64_t k = 0; k < used; ++k) {
      if (empty[p.channel_map[k]]) return Corrupt("a channel in use maps to an empty table");
    }
  } else if (empty[0]) {
    return Corrupt("empty table");
  }
  const uint8_t* d = take(4ull * p.info.tiles);
  if (d == nullptr) return Corrupt("truncated tile directory");
  const uint64_t pad = TilePad(static_cast<uint64_t>(cur - in));
  const uint8_t* zeros = take(pad);
  if (zeros == nullptr && pad != 0) return Corrupt("truncated tile padding");
  for (uint64_t k = 0; k < pad; ++k) {
    if (zeros[k] != 0) return Corrupt("non-zero tile padding");
  }
  p.dir.resize(p.info.tiles);
  p.tile_ptr.resize(p.info.tiles);
  for (uint32_t t = 0; t < p.info.tiles; ++t) {
    p.dir[t] = Get<uint32_t>(d + 4 * t);
    const uint32_t size = p.dir[t] & ~kTileRaw;
    if (size % 4 != 0) return Corrupt("tile size not a multiple of 4");
    if ((p.tile_ptr[t] = take(size)) == nullptr) return Corrupt("truncated tile");
    p.info.raw_tiles += (p.dir[t] & kTileRaw) ? 1 : 0;
  }
  if (cur != end) return Corrupt("trailing bytes");
  return p;
}

}  // namespace

absl::StatusOr<ChunkInfo> Inspect(const void* in, size_t in_bytes) {
  auto p = Parse(static_cast<const uint8_t*>(in), in_bytes, /*build_tables=*/false);
  if (!p.ok()) return p.status();
  return p->info;
}

absl::StatusOr<FrequencyTable> TableOf(const void* chunk, size_t chunk_bytes) {
  auto p = Parse(static_cast<const uint8_t*>(chunk), chunk_bytes, /*build_tables=*/false);
  if (!p.ok()) return p.status();
  if (p->info.stored || p->info.tables != 1) {
    return absl::InvalidArgumentError(p->info.stored ? "a STORED chunk has no table"
                                                     : "the chunk has channel-group tables, not one order-0 table");
  }
  const uint8_t* h = static_cast<const uint8_t*>(chunk) + kHeaderBytes + p->info.raw_plane_bytes;  // Parse checked it
  FrequencyTable t;
  const uint32_t lo = Get<uint16_t>(h), count = Get<uint16_t>(h + 2);
  for (uint32_t k = 0; k < count; ++k) t.freq[lo + k] = Get<uint16_t>(h + 4 + 2 * k);
  if (absl::Status s = CheckTable(t, p->split.info.exp_bits); !s.ok()) return Corrupt(std::string(s.message()));
  return t;
}

absl::StatusOr<size_t> Decode(const void* in_v, size_t in_bytes, void* out_v, size_t out_capacity, int threads) {
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  auto parsed = Parse(in, in_bytes, /*build_tables=*/true);
  if (!parsed.ok()) return parsed.status();
  Parsed& p = *parsed;
  const uint64_t n = p.info.elements;
  if (out_capacity < p.info.original_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("output capacity %d < %d decoded bytes", out_capacity, p.info.original_bytes));
  }
  if (p.info.original_bytes > 0 && out == nullptr) return absl::InvalidArgumentError("null output");
  if (p.info.stored) {
    if (n > 0) std::memcpy(out, in + kHeaderBytes, p.info.original_bytes);
  } else {
    Scratch scratch;
    uint8_t* const sym = scratch.Bytes(n);
    const uint8_t* table_of = nullptr;
    const uint64_t channels = p.info.layout.channels();
    if (p.info.channel_groups) {
      uint8_t* table_per_element = scratch.Bytes(n);
      for (uint64_t i = 0, c = 0; i < n; ++i) {
        table_per_element[i] = p.channel_map[c];
        if (++c == channels) c = 0;
      }
      table_of = table_per_element;
    }
    const int nt = Threads(threads, p.info.tiles);
    std::vector<absl::Status> status(p.info.tiles);
    const uint32_t tile_log2 = p.info.tile_log2;
    const uint64_t tile = uint64_t{1} << tile_log2;
    const Split& sp = p.split;
    const uint32_t W = sp.info.raw_bits;
    const uint64_t carry_tiles = plan::CarryTiles(n, W, tile_log2), tile_raw = plan::TileRawBytes(W, tile_log2);
    const bool simd = kHasAvx512 && g_simd.load(std::memory_order_relaxed);
    ParallelFor(p.info.tiles, nt, [&](uint64_t t) {
      const uint64_t b = t * tile, e = std::min<uint64_t>(n, (t + 1) * tile);
      const bool carries = t < carry_tiles;
      uint8_t carry[plan::kCarryBytes];
      status[t] = DecodeTile(p.tile_ptr[t], p.dir[t], b, e, p.split.info.exp_bits, table_of, p.tables, sym,
                             carries ? carry : nullptr);
      if (!status[t].ok()) return;
      // The tile's part of the whole plane: the chunk's plane, then its carry.
      const uint8_t* plane = p.raw_plane + t * tile_raw - plan::CarriedBefore(t, carry_tiles);
      if (p.info.dtype == DType::kBF16) {
        auto join = [&](uint64_t a, uint64_t len, const uint8_t* raw) {
          if (simd) return JoinBf16Avx512(sym + a, raw, 0, len, out + 2 * a);
          for (uint64_t i = 0; i < len; ++i) {
            const uint32_t r = raw[i];
            const uint16_t v = static_cast<uint16_t>(((r & 0x80) << 8) | (uint32_t{sym[a + i]} << 7) | (r & 0x7f));
            std::memcpy(out + 2 * (a + i), &v, 2);
          }
        };
        const uint64_t keep = carries ? e - b - plan::kCarryBytes : e - b;
        join(b, keep, plane);
        if (carries) join(b + keep, plan::kCarryBytes, carry);
        return;
      }
      uint8_t whole[plan::kCarryBytes + 32];  // the tile's last groups, carry included
      const uint64_t keep = tile_raw - plan::kCarryBytes, direct = keep / (W == 0 ? 1 : W);
      if (carries) {
        std::memcpy(whole, plane + direct * W, keep - direct * W);
        std::memcpy(whole + (keep - direct * W), carry, plan::kCarryBytes);
      }
      // fp16, fp32, fp8: group by group, the field widths constants.
      const bool joined = WithFloatElem(p.info.dtype, [&](auto el) {
        using E = decltype(el);
        constexpr std::integral_constant<uint32_t, E::kRawBits> w{};
        uint64_t g = 0;
        if constexpr (std::is_same_v<E, Elem<2, 5, 10>>) {  // the groups in the plane
          if (simd) g = JoinFp16Avx512(sym + b, plane, carries ? 8 * direct : e - b, out + 2 * b) / 8;
        } else if constexpr (std::is_same_v<E, Elem<1, 4, 3>>) {
          if (simd) g = JoinE4m3Avx512(sym + b, plane, carries ? 8 * direct : e - b, out + b) / 8;
        } else if constexpr (std::is_same_v<E, Elem<1, 5, 2>>) {
          if (simd) g = JoinE5m2Avx512(sym + b, plane, carries ? 8 * direct : e - b, out + b) / 8;
        } else if constexpr (std::is_same_v<E, Elem<4, 8, 23>>) {
          if (simd) g = JoinFp32Avx512(sym + b, plane, carries ? 8 * direct : e - b, out + 4 * b) / 8;
        }
        for (; b + 8 * g < e; ++g) {
          uint32_t raw[8];
          UnpackGroup(carries && g >= direct ? whole + (g - direct) * w : plane + g * w, w, raw);
          const uint64_t i0 = b + 8 * g;
          auto join = [&](uint64_t count) {  // whole groups pass a constant 8
            for (uint64_t k = 0; k < count; ++k) E::Store(out, i0 + k, E::Join(sym[i0 + k], raw[k]));
          };
          if (i0 + 8 <= e) {
            join(8);
          } else {
            join(e - i0);
          }
        }
      });
      if (!joined) std::memcpy(out + b, sym + b, e - b);  // opaque bytes: the symbols are the bytes
    });
    for (const auto& s : status) {
      if (!s.ok()) return s;
    }
  }
  if (Kvsum64(out, p.info.original_bytes) != p.info.checksum) {
    return absl::DataLossError("corrupt chunk: checksum of the decoded bytes does not match");
  }
  return p.info.original_bytes;
}

absl::StatusOr<double> Order0BoundBytes(DType dtype, const void* in_v, size_t in_bytes) {
  auto split = MakeSplit(dtype);
  if (!split.ok()) return split.status();
  if (in_bytes % split->info.bytes != 0) return absl::InvalidArgumentError("not a whole number of elements");
  const auto* in = static_cast<const uint8_t*>(in_v);
  const uint64_t n = in_bytes / split->info.bytes;
  uint64_t hist[256] = {0};
  for (uint64_t i = 0; i < n; ++i) ++hist[split->Symbol(split->Load(in, i))];
  double bits = 0;
  for (uint64_t h : hist) {
    if (h != 0) bits -= static_cast<double>(h) * std::log2(static_cast<double>(h) / static_cast<double>(n));
  }
  return bits / 8 + static_cast<double>(n) * split->info.raw_bits / 8;
}

}  // namespace kvferry::codec
