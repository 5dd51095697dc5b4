// The v5 rANS rounds (exact quotient, words after each 16-round segment) on synthetic and on
// real bf16 KV symbols, with 16-byte table entries {m_lo, m_hi, M - f, cum} (the codec's) or
// 8-byte ones {m_lo, m_hi | (M - f) << 9 | cum << 18}. 128 blocks of 4 warps, a 4096-symbol
// tile a warp from shared memory. Checks both against the host's states and word counts.
// kStamps: clock64 around a segment's table loads, rounds and word stores (tile 100 printed).
// Results in docs/performance.md ("The rANS rounds in place, and a joint step for a pair",
// 2026-11-28), log 2026-11-28-h200.log (runs 128 and 131; run 128 without the stamped variant).
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o lds 2026-11-28-rans-table-entries.cu
// Run: ./lds KV_DIR (real bf16 KV from tools/kv_capture.py: chat, code and prose .bf16)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
constexpr uint32_t kM = 256, kL = 1u << 16;
constexpr int kRounds = 128, kSeg = 16, kTiles = 512;
constexpr int kSpan = kRounds * 32 + 64;

template <bool kPacked, bool kStamps = false>
__global__ void __launch_bounds__(128, 1)
    Rounds(const uint8_t* sym, const uint32_t* freq, uint16_t* out, long long* cyc, uint32_t* res) {
  __shared__ uint4 t16[256];
  __shared__ uint2 t8[256];
  __shared__ uint8_t syms[4][kRounds * 32];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    uint32_t cum = 0;
    for (int j = 0; j < i; ++j) cum += freq[j];
    const uint32_t f = freq[i];
    const uint64_t m = f ? ((uint64_t{1} << 40) + f - 1) / f : 0;
    t16[i] = make_uint4(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32), kM - f, cum & 0xff);
    t8[i] = make_uint2(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32) | (kM - f) << 9 | (cum & 0xff) << 18);
  }
  const uint32_t tile = blockIdx.x * 4 + warp;
  for (int i = lane; i < kRounds * 32; i += 32) syms[warp][i] = sym[tile * kRounds * 32 + i];
  __syncthreads();
  uint16_t* words_end = out + (tile + 1) * kSpan;
  const uint32_t lt = (1u << lane) - 1;
  uint32_t x = kL | lane, emitted = 0;
  long long ch = 0, cr = 0, ct = 0;
  const long long t0 = clock64();
  for (int sg = kRounds / kSeg - 1; sg >= 0; --sg) {
    long long ca = kStamps ? clock64() : 0;
    const uint8_t* st = syms[warp] + sg * kSeg * 32;
    uint4 en[kSeg];
#pragma unroll
    for (int r = 0; r < kSeg; ++r) {
      const uint32_t s = st[r * 32 + lane];
      if (kPacked) {
        const uint2 e = t8[s];
        en[r] = make_uint4(e.x, e.y & 0x1ff, (e.y >> 9) & 0x1ff, e.y >> 18);
      } else {
        en[r] = t16[s];
      }
    }
    long long cb = kStamps ? clock64() : 0;
    uint32_t w[kSeg / 2], nb = 0;
#pragma unroll
    for (int r = kSeg - 1; r >= 0; r -= 2) {
      const int k = (kSeg - 1 - r) / 2;
      const uint32_t bound = ((kM - en[r].z) * (kM - en[r - 1].z) << 16) - 1u;
      const bool need = x > bound;
      w[k] = x;
      nb |= need ? 1u << k : 0u;
      x = need ? x >> 16 : x;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 e = en[r - h];
        const uint32_t v = x;
        const uint32_t hh = __umulhi(v, e.x);
        uint32_t a, nx;
        asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(a) : "r"(v), "r"(e.y), "r"(hh));
        asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(nx) : "r"(a >> 8), "r"(e.z), "r"(v + e.w));
        x = nx;
      }
    }
    long long cc = kStamps ? clock64() : 0;
    unsigned m[kSeg / 2];
#pragma unroll
    for (int k = 0; k < kSeg / 2; ++k) m[k] = __ballot_sync(0xffffffffu, (nb >> k) & 1);
#pragma unroll
    for (int k = 0; k < kSeg / 2; ++k) {
      emitted += __popc(m[k]);
      const int32_t at = static_cast<int32_t>(__popc(m[k] & lt)) - static_cast<int32_t>(emitted);
      words_end[(nb >> k) & 1 ? at : static_cast<int32_t>(lane) - kSpan] = static_cast<uint16_t>(w[k]);
    }
    if (kStamps) {
      const long long cd = clock64();
      ch += cb - ca;
      cr += cc - cb;
      ct += cd - cc;
    }
  }
  const long long t1 = clock64();
  if (lane == 0) cyc[tile] = t1 - t0;
  if (kStamps && lane == 0 && tile == 100)
    printf("stamped tile: heads %.1f rounds %.1f tails %.1f loop %.1f cycles a round\n", (double)ch / kRounds,
           (double)cr / kRounds, (double)ct / kRounds, (double)(t1 - t0) / kRounds);
  res[tile * 32 + lane] = x;
  res[kTiles * 32 + tile] = emitted;
}

static void Host(const std::vector<uint8_t>& sym, const std::vector<uint32_t>& f, std::vector<uint32_t>* res) {
  std::vector<uint32_t> c(257, 0);
  for (int s = 0; s < 256; ++s) c[s + 1] = c[s] + f[s];
  res->assign(kTiles * 33, 0);
  for (int t = 0; t < kTiles; ++t) {
    for (int l = 0; l < 32; ++l) {
      uint32_t x = kL | l;
      for (int r = kRounds - 1; r >= 1; r -= 2) {
        const uint32_t a = sym[t * kRounds * 32 + r * 32 + l], b = sym[t * kRounds * 32 + (r - 1) * 32 + l];
        if (x >= (uint64_t{f[a]} * f[b] << 16)) ++(*res)[kTiles * 32 + t], x >>= 16;
        for (uint32_t y : {a, b}) x = x / f[y] * kM + x % f[y] + c[y];
      }
      (*res)[t * 32 + l] = x;
    }
  }
}

static std::vector<uint32_t> Normalise(const std::vector<uint8_t>& sym) {
  std::vector<uint64_t> h(256, 0);
  for (uint8_t s : sym) ++h[s];
  std::vector<uint32_t> f(256, 0);
  uint32_t sum = 0;
  for (int s = 0; s < 256; ++s)
    if (h[s]) f[s] = std::max<uint64_t>(1, h[s] * kM / sym.size()), sum += f[s];
  while (sum > kM) {
    auto j = std::max_element(f.begin(), f.end()) - f.begin();
    --f[j];
    --sum;
  }
  f[std::max_element(h.begin(), h.end()) - h.begin()] += kM - sum;
  return f;
}

int main(int argc, char** argv) {
  const size_t n = size_t{kTiles} * kRounds * 32;
  std::vector<uint8_t> synth(n), real;
  {
    std::vector<uint32_t> freq(256, 0);
    int tot = 0;
    for (int s = 100; s < 127; ++s) {
      freq[s] = std::max(1, (int)(60.0 * std::pow(0.6, std::abs(s - 118))));
      tot += freq[s];
    }
    freq[118] += 256 - tot;
    std::vector<int> cdf;
    for (int s = 0; s < 256; ++s)
      for (uint32_t k = 0; k < freq[s]; ++k) cdf.push_back(s);
    std::mt19937 rng(1);
    for (auto& v : synth) v = cdf[rng() % 256];
  }
  for (const char* name : {"chat", "code", "prose"}) {
    FILE* fp = fopen((std::string(argc > 1 ? argv[1] : "kv") + "/" + name + ".bf16").c_str(), "rb");
    if (!fp) continue;
    uint16_t b[4096];
    size_t k;
    while ((k = fread(b, 2, 4096, fp)) > 0)
      for (size_t i = 0; i < k; ++i) real.push_back((b[i] >> 7) & 0xff);
    fclose(fp);
  }
  if (real.size() < n) {
    printf("no real KV (%zu symbols)\n", real.size());
    return 1;
  }
  real.resize(n);
  uint8_t* dsym;
  uint32_t* dfreq;
  uint16_t* dout;
  long long* dcyc;
  uint32_t* dres;
  const size_t out_words = kTiles * kSpan + 4096;
  cudaMalloc(&dsym, n);
  cudaMalloc(&dfreq, 1024);
  cudaMalloc(&dout, out_words * 2);
  cudaMalloc(&dcyc, kTiles * 8);
  cudaMalloc(&dres, kTiles * 33 * 4);
  for (int rep = 0; rep < 2; ++rep) {
    for (int data = 0; data < 2; ++data) {
      const auto& sym = data ? real : synth;
      const auto f = Normalise(sym);
      double bits = 0;
      for (uint8_t s : sym) bits += 8 - std::log2(f[s]);
      std::vector<uint32_t> want;
      Host(sym, f, &want);
      cudaMemcpy(dsym, sym.data(), n, cudaMemcpyHostToDevice);
      cudaMemcpy(dfreq, f.data(), 1024, cudaMemcpyHostToDevice);
      auto run = [&](auto kern, const char* name) {
        std::vector<long long> cyc(kTiles), med;
        for (int i = 0; i < 11; ++i) {
          kern<<<kTiles / 4, 128>>>(dsym, dfreq, dout, dcyc, dres);
          cudaDeviceSynchronize();
          cudaMemcpy(cyc.data(), dcyc, kTiles * 8, cudaMemcpyDeviceToHost);
          std::sort(cyc.begin(), cyc.end());
          med.push_back(cyc[kTiles / 2]);
        }
        std::sort(med.begin(), med.end());
        std::vector<uint32_t> r(kTiles * 33);
        cudaMemcpy(r.data(), dres, kTiles * 33 * 4, cudaMemcpyDeviceToHost);
        printf("%-9s %-22s %6.1f cycles/round (min %.1f max %.1f); states and word counts %s\n",
               data ? "real KV" : "synthetic", name, (double)med[5] / kRounds, (double)med[0] / kRounds,
               (double)med[10] / kRounds, r == want ? "equal to the host" : "DIFFER from the host");
      };
      if (rep == 0) printf("%s: %.3f bits a symbol under the table\n", data ? "real KV" : "synthetic", bits / n);
      run(Rounds<false>, "16-byte entries");
      run(Rounds<true>, "8-byte entries");
      if (rep == 0) run(Rounds<false, true>, "16-byte, stamped");
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
