// rANS rounds: the v5 step (two exact-quotient steps a pair) against a joint step of a pair
// (one division by F = f_a f_b, M = 2^16 a pair, m = ceil(2^48 / F) from a global table).
// 128 blocks of 4 warps, a 4096-symbol tile a warp from shared memory; words put out after
// each 16-round segment (every lane storing). Checks both against a host encoder.
// A joint step is a format change (not made): results in docs/performance.md ("The rANS
// rounds in place, and a joint step for a pair", 2026-11-28), log 2026-11-28-h200.log
// (runs 125-126; run 125 had variants 0-2 only).
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o pair 2026-11-28-rans-joint-pairs.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>
constexpr uint32_t kM = 256, kL = 1u << 16;
constexpr int kRounds = 128, kSeg = 16, kTiles = 512;
constexpr int kSpan = kRounds * 32 + 64;  // words a tile's output area holds

// kJoint 0: v5 (two steps). 1: joint, m from the global F table. 2: joint, chain only (m of F
// computed as if free: taken from a per-lane constant, wrong bytes, timing only). 3: as 1, the
// next segment's m loaded while this segment's rounds run.
template <int kJoint>
__global__ void __launch_bounds__(128, 1)
    Rounds(const uint8_t* sym, const uint32_t* freq, const uint2* fmag, uint16_t* out, long long* cyc, uint32_t* res) {
  __shared__ uint4 tables[256];  // {m_lo, m_hi, M - f, cum} (v5) ; joint: {f, cum, 0, 0}
  __shared__ uint8_t syms[4][kRounds * 32];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    uint32_t cum = 0;
    for (int j = 0; j < i; ++j) cum += freq[j];
    const uint32_t f = freq[i];
    const uint64_t m = f ? ((uint64_t{1} << 40) + f - 1) / f : 0;
    tables[i] = kJoint ? make_uint4(f, cum, 0, 0)
                       : make_uint4(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32), kM - f, cum);
  }
  const uint32_t tile = blockIdx.x * 4 + warp;
  for (int i = lane; i < kRounds * 32; i += 32) syms[warp][i] = sym[tile * kRounds * 32 + i];
  __syncthreads();
  uint16_t* words_end = out + (tile + 1) * kSpan;
  const uint32_t lt = (1u << lane) - 1;
  uint32_t x = kL | lane, emitted = 0;
  uint2 mcur[kSeg / 2], mnext[kSeg / 2];
  if (kJoint == 3) {
    const uint8_t* sn = syms[warp] + (kRounds / kSeg - 1) * kSeg * 32;
#pragma unroll
    for (int k = 0; k < kSeg / 2; ++k) {
      const int r = kSeg - 1 - 2 * k;
      mnext[k] = fmag[tables[sn[r * 32 + lane]].x * tables[sn[(r - 1) * 32 + lane]].x];
    }
  }
  const long long t0 = clock64();
  for (int sg = kRounds / kSeg - 1; sg >= 0; --sg) {
    const uint8_t* st = syms[warp] + sg * kSeg * 32;
    uint32_t w[kSeg / 2], nb = 0;
    if (kJoint == 0) {
      uint4 en[kSeg];
#pragma unroll
      for (int r = 0; r < kSeg; ++r) en[r] = tables[st[r * 32 + lane]];
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
    } else {
      // A pair (r odd, r - 1): outer symbol b = round r - 1 (decoded first), inner a = round r.
      if (kJoint == 3) {
#pragma unroll
        for (int k = 0; k < kSeg / 2; ++k) mcur[k] = mnext[k];
        if (sg > 0) {
          const uint8_t* sn = st - kSeg * 32;
#pragma unroll
          for (int k = 0; k < kSeg / 2; ++k) {
            const int r = kSeg - 1 - 2 * k;
            mnext[k] = fmag[tables[sn[r * 32 + lane]].x * tables[sn[(r - 1) * 32 + lane]].x];
          }
        }
      }
      uint4 pe[kSeg / 2];  // {m_lo, m_hi, 2^16 - F, C}
      uint32_t bnd[kSeg / 2];
#pragma unroll
      for (int k = 0; k < kSeg / 2; ++k) {
        const int r = kSeg - 1 - 2 * k;
        const uint4 ea = tables[st[r * 32 + lane]], eb = tables[st[(r - 1) * 32 + lane]];
        const uint32_t F = ea.x * eb.x;
        const uint2 m = kJoint == 1 ? fmag[F] : kJoint == 3 ? mcur[k] : make_uint2(F * 977u, 1u + (F >> 15));
        pe[k] = make_uint4(m.x, m.y, 65536u - F, (eb.y << 8) + eb.x * ea.y);
        bnd[k] = (F << 16) - 1u;
      }
#pragma unroll
      for (int k = 0; k < kSeg / 2; ++k) {
        const bool need = x > bnd[k];
        w[k] = x;
        nb |= need ? 1u << k : 0u;
        const uint32_t v = need ? x >> 16 : x;
        const uint32_t hh = __umulhi(v, pe[k].x);
        uint32_t a, nx;
        asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(a) : "r"(v), "r"(pe[k].y), "r"(hh));
        asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(nx) : "r"(a >> 16), "r"(pe[k].z), "r"(v + pe[k].w));
        x = nx;
      }
    }
    unsigned m[kSeg / 2];
#pragma unroll
    for (int k = 0; k < kSeg / 2; ++k) m[k] = __ballot_sync(0xffffffffu, (nb >> k) & 1);
#pragma unroll
    for (int k = 0; k < kSeg / 2; ++k) {
      emitted += __popc(m[k]);
      const int32_t at = static_cast<int32_t>(__popc(m[k] & lt)) - static_cast<int32_t>(emitted);
      words_end[(nb >> k) & 1 ? at : static_cast<int32_t>(lane) - kSpan] = static_cast<uint16_t>(w[k]);
    }
  }
  const long long t1 = clock64();
  if (lane == 0) cyc[tile] = t1 - t0;
  res[tile * 32 + lane] = x;
  res[kTiles * 32 + tile] = emitted;
}

// The host's encoder of one tile: states, and the words as the kernel lays them out (from the end).
static void HostTile(const uint8_t* s, const std::vector<uint32_t>& f, const std::vector<uint32_t>& c, bool joint,
                     uint32_t* xs, std::vector<uint16_t>* words) {
  uint32_t x[32];
  for (int l = 0; l < 32; ++l) x[l] = kL | l;
  words->clear();  // in order of emission; the kernel writes them backwards, each pair's in lane order
  std::vector<uint16_t> rev;
  for (int r = kRounds - 1; r >= 1; r -= 2) {
    std::vector<uint16_t> batch;
    for (int l = 0; l < 32; ++l) {
      const uint32_t a = s[r * 32 + l], b = s[(r - 1) * 32 + l];
      const uint64_t F = uint64_t{f[a]} * f[b];
      if (x[l] >= (F << 16)) {
        batch.push_back(static_cast<uint16_t>(x[l]));
        x[l] >>= 16;
      }
      if (!joint) {
        for (uint32_t y : {a, b}) x[l] = x[l] / f[y] * kM + x[l] % f[y] + c[y];
      } else {
        const uint64_t v = x[l];
        x[l] = static_cast<uint32_t>(v / F * 65536 + v % F + (c[b] << 8) + f[b] * c[a]);
      }
    }
    // this pair's words sit before the earlier ones: prepend in lane order
    rev.insert(rev.begin(), batch.begin(), batch.end());
  }
  *words = rev;
  for (int l = 0; l < 32; ++l) xs[l] = x[l];
}

int main() {
  std::vector<uint32_t> freq(256, 0);
  int tot = 0;
  for (int s = 100; s < 127; ++s) {
    freq[s] = std::max(1, (int)(60.0 * std::pow(0.6, std::abs(s - 118))));
    tot += freq[s];
  }
  freq[118] += 256 - tot;
  std::vector<uint32_t> cum(257, 0);
  for (int s = 0; s < 256; ++s) cum[s + 1] = cum[s] + freq[s];
  std::vector<uint8_t> sym(kTiles * kRounds * 32);
  std::mt19937 rng(1);
  std::vector<int> cdf;
  for (int s = 0; s < 256; ++s)
    for (uint32_t k = 0; k < freq[s]; ++k) cdf.push_back(s);
  for (auto& v : sym) v = cdf[rng() % 256];
  std::vector<uint2> fm(65537);
  for (uint64_t F = 1; F <= 65536; ++F) {
    const uint64_t m = ((uint64_t{1} << 48) + F - 1) / F;
    fm[F] = make_uint2(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32));
  }
  fm[0] = make_uint2(0, 0);
  uint8_t* dsym;
  uint32_t* dfreq;
  uint2* dfm;
  uint16_t* dout;
  long long* dcyc;
  uint32_t* dres;
  const size_t out_words = kTiles * kSpan + 4096;
  cudaMalloc(&dsym, sym.size());
  cudaMalloc(&dfreq, 1024);
  cudaMalloc(&dfm, fm.size() * 8);
  cudaMalloc(&dout, out_words * 2);
  cudaMalloc(&dcyc, kTiles * 8);
  cudaMalloc(&dres, kTiles * 33 * 4);
  cudaMemcpy(dsym, sym.data(), sym.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dfreq, freq.data(), 1024, cudaMemcpyHostToDevice);
  cudaMemcpy(dfm, fm.data(), fm.size() * 8, cudaMemcpyHostToDevice);
  auto run = [&](auto kern, const char* name, int check_joint) {
    std::vector<long long> cyc(kTiles), med;
    for (int i = 0; i < 11; ++i) {
      cudaMemset(dout, 0, out_words * 2);
      kern<<<kTiles / 4, 128>>>(dsym, dfreq, dfm, dout, dcyc, dres);
      cudaDeviceSynchronize();
      cudaMemcpy(cyc.data(), dcyc, kTiles * 8, cudaMemcpyDeviceToHost);
      std::sort(cyc.begin(), cyc.end());
      med.push_back(cyc[kTiles / 2]);
    }
    std::sort(med.begin(), med.end());
    std::vector<uint16_t> o(out_words);
    std::vector<uint32_t> r(kTiles * 33);
    cudaMemcpy(o.data(), dout, out_words * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(r.data(), dres, kTiles * 33 * 4, cudaMemcpyDeviceToHost);
    uint64_t words = 0;
    for (int t = 0; t < kTiles; ++t) words += r[kTiles * 32 + t];
    int bad = -1;
    if (check_joint >= 0) {
      bad = 0;
      for (int t = 0; t < kTiles; ++t) {
        uint32_t xs[32];
        std::vector<uint16_t> w;
        HostTile(&sym[t * kRounds * 32], freq, cum, check_joint == 1, xs, &w);
        bool ok = w.size() == r[kTiles * 32 + t];
        for (int l = 0; l < 32; ++l) ok &= xs[l] == r[t * 32 + l];
        for (size_t k = 0; ok && k < w.size(); ++k) ok &= o[(t + 1) * kSpan - w.size() + k] == w[k];
        bad += !ok;
      }
    }
    printf("%-34s %7.1f cycles/round (min %.1f max %.1f), %llu words, %s\n", name, (double)med[5] / kRounds,
           (double)med[0] / kRounds, (double)med[10] / kRounds, (unsigned long long)words,
           bad < 0    ? "unchecked"
           : bad == 0 ? "equal to the host"
                      : "DIFFERS from the host");
  };
  for (int rep = 0; rep < 2; ++rep) {
    run(Rounds<0>, "v5: two exact steps a pair", 0);
    run(Rounds<1>, "joint: m from the F table", 1);
    run(Rounds<3>, "joint: m from the table, a segment ahead", 1);
    run(Rounds<2>, "joint: m free (timing only)", -1);
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
