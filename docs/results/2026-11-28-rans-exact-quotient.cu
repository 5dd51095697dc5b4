// The encoder's rANS rounds alone (as docs/results/2026-11-28-rans-rounds.cu), with the
// quotient corrected (the step before 68adff5) or exact: q = (v m_hi + umulhi(v, m_lo)) >> 8,
// m = ceil(2^40 / f), exact for the states a step sees (v < f 2^24, f < 256). Checks that
// on the host near the top of each f's range, and that the variants write the same words
// and states. Renormalisation as compiled (a predicated shift) or as a select beside a
// shift (kSelp). Results: docs/performance.md ("The rANS step's exact quotient",
// 2026-11-28), log 2026-11-28-h100-exact-quotient.log (runs 99 and 102).
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o exactq rans-exact-quotient.cu
#include <cstdio>
#include <cstdint>
#include <vector>
#include <random>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
constexpr uint32_t kM = 256, kL = 1u << 16;
constexpr int kRounds = 128, kSeg = 16;

// kExact: q = (v * mhi + umulhi(v, mlo)) >> 8, m = ceil(2^40 / f) (exact for v < f 2^24, f < 256).
template <bool kExact>
__device__ __forceinline__ uint32_t Next(uint32_t v, uint4 e, uint2 m) {
  if (kExact) {
    const uint32_t h = __umulhi(v, m.x);
    uint32_t a;
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(a) : "r"(v), "r"(m.y), "r"(h));
    const uint32_t q = a >> 8;
    uint32_t x;
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x) : "r"(q), "r"(e.z), "r"(v + e.w));
    return x;
  }
  const uint32_t q = __umulhi(v, e.x);
  uint32_t x0, x1;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x0) : "r"(q), "r"(e.z), "r"(v + e.w));
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x1) : "r"(q), "r"(e.z), "r"(v + e.w + e.z));
  return v >= q * e.y + e.y ? x1 : x0;
}

// kMode 0: chain only; 1: deferred, batched, no branch (every lane stores); 2: the codec's step (store in its round).
template <bool kSelp>
__device__ __forceinline__ uint32_t Renorm(uint32_t x, uint32_t bound, bool need) {
  if (!kSelp) return need ? x >> 16 : x;
  uint32_t hi, v;
  asm("shr.b32 %0, %1, 16;" : "=r"(hi) : "r"(x));
  asm("{.reg .pred p; setp.gt.u32 p, %1, %2; selp.b32 %0, %3, %1, p;}" : "=r"(v) : "r"(x), "r"(bound), "r"(hi));
  return v;
}

template <int kMode, bool kExact, bool kSelp = false>
__global__ void __launch_bounds__(128, 1) Rounds(const uint8_t* sym, const uint32_t* freq, uint16_t* out, long long* cyc, uint32_t* res) {
  __shared__ uint4 tables[256];
  __shared__ uint2 mags[256];
  __shared__ uint8_t syms[4][kRounds * 32];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    uint32_t cum = 0;
    for (int j = 0; j < i; ++j) cum += freq[j];
    const uint32_t f = freq[i];
    tables[i] = make_uint4(f ? 0xffffffffu / f : 0, f, kM - f, cum);
    const uint64_t m = f ? ((uint64_t{1} << 40) + f - 1) / f : 0;
    mags[i] = make_uint2(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32));
  }
  const uint32_t tile = blockIdx.x * 4 + warp;
  for (int i = lane; i < kRounds * 32; i += 32) syms[warp][i] = sym[tile * kRounds * 32 + i];
  __syncthreads();
  uint16_t* words_end = out + (tile + 1) * (kRounds * 32 + 64);
  const uint32_t lt = (1u << lane) - 1;
  uint32_t x = kL | lane, emitted = 0;
  const long long t0 = clock64();
  for (int sg = kRounds / kSeg - 1; sg >= 0; --sg) {
    const uint8_t* st = syms[warp] + sg * kSeg * 32;
    uint4 en[kSeg];
    uint2 mg[kSeg];
#pragma unroll
    for (int r = 0; r < kSeg; ++r) {
      const uint32_t s = st[r * 32 + lane];
      en[r] = tables[s];
      if (kExact) mg[r] = mags[s];
    }
    uint32_t w[kSeg / 2], nb = 0;
#pragma unroll
    for (int r = kSeg - 1; r >= 0; r -= 2) {
      const int k = (kSeg - 1 - r) / 2;
      const uint32_t bound = (en[r].y * en[r - 1].y << 16) - 1u;
      const bool need = x > bound;
      if (kMode == 2) {
        const unsigned mask = __ballot_sync(0xffffffffu, need);
        const uint32_t c = __popc(mask);
        uint32_t word;
        asm("and.b32 %0, %1, 0xffff;" : "=r"(word) : "r"(x));
        if (need) words_end[static_cast<int32_t>(__popc(mask & lt)) - static_cast<int32_t>(emitted + c)] = word;
        emitted += c;
      } else {
        w[k] = x;
        if (need) nb |= 1u << k;
      }
      const uint32_t v = Renorm<kSelp>(x, bound, need);
      x = Next<kExact>(v, en[r], kExact ? mg[r] : make_uint2(0, 0));
      x = Next<kExact>(x, en[r - 1], kExact ? mg[r - 1] : make_uint2(0, 0));
    }
    if (kMode == 0) {
      emitted += __popc(nb);
    } else if (kMode == 1) {
      unsigned m[kSeg / 2];
#pragma unroll
      for (int k = 0; k < kSeg / 2; ++k) m[k] = __ballot_sync(0xffffffffu, (nb >> k) & 1);
      int32_t pos[kSeg / 2];
      uint32_t base = emitted;
#pragma unroll
      for (int k = 0; k < kSeg / 2; ++k) {
        base += __popc(m[k]);
        pos[k] = static_cast<int32_t>(__popc(m[k] & lt)) - static_cast<int32_t>(base);
      }
      emitted = base;
#pragma unroll
      for (int k = 0; k < kSeg / 2; ++k) {
        words_end[(nb >> k) & 1 ? pos[k] : static_cast<int32_t>(lane) - (kRounds * 32 + 64)] = w[k];
      }
    }
  }
  const long long t1 = clock64();
  if (lane == 0) cyc[tile] = t1 - t0;
  res[tile * 32 + lane] = x ^ emitted;
}

int main() {
  const int tiles = 512;
  // Exactness of the two-part reciprocal, checked on the host at the worst v of each residue class's top.
  int inexact = 0;
  for (uint32_t f = 1; f < 256; ++f) {
    const uint64_t m = ((uint64_t{1} << 40) + f - 1) / f;
    const uint32_t mlo = static_cast<uint32_t>(m), mhi = static_cast<uint32_t>(m >> 32);
    const uint64_t top = static_cast<uint64_t>(f) << 24;
    for (uint64_t v = top - 1, n = 0; n < 200000 && v > 0; --v, ++n) {
      const uint32_t h = static_cast<uint32_t>((static_cast<uint64_t>(v) * mlo) >> 32);
      const uint64_t a = static_cast<uint64_t>(v) * mhi + h;
      if (a >> 32) { ++inexact; break; }
      if ((a >> 8) != v / f) { ++inexact; break; }
    }
  }
  printf("host check (top 200000 states of each f < 256): %d frequencies inexact\n", inexact);
  std::vector<uint32_t> freq(256, 0);
  int tot = 0;
  for (int s = 100; s < 127; ++s) { freq[s] = std::max(1, (int)(60.0 * std::pow(0.6, std::abs(s - 118)))); tot += freq[s]; }
  freq[118] += 256 - tot;
  std::vector<uint8_t> sym(tiles * kRounds * 32);
  std::mt19937 rng(1);
  std::vector<int> cdf;
  for (int s = 0; s < 256; ++s) for (uint32_t k = 0; k < freq[s]; ++k) cdf.push_back(s);
  for (auto& v : sym) v = cdf[rng() % 256];
  uint8_t* dsym; uint32_t* dfreq; uint16_t* dout; long long* dcyc; uint32_t* dres;
  const size_t out_words = tiles * (kRounds * 32 + 64) + 4096;
  cudaMalloc(&dsym, sym.size()); cudaMalloc(&dfreq, 1024); cudaMalloc(&dout, out_words * 2);
  cudaMalloc(&dcyc, tiles * 8); cudaMalloc(&dres, tiles * 128);
  cudaMemcpy(dsym, sym.data(), sym.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dfreq, freq.data(), 1024, cudaMemcpyHostToDevice);
  auto run = [&](auto kern, const char* name, std::vector<uint16_t>* o, std::vector<uint32_t>* r) {
    std::vector<long long> cyc(tiles), med;
    for (int i = 0; i < 11; ++i) {
      cudaMemset(dout, 0, out_words * 2);
      kern<<<tiles / 4, 128>>>(dsym, dfreq, dout, dcyc, dres);
      cudaDeviceSynchronize();
      cudaMemcpy(cyc.data(), dcyc, tiles * 8, cudaMemcpyDeviceToHost);
      std::sort(cyc.begin(), cyc.end());
      med.push_back(cyc[tiles / 2]);
    }
    std::sort(med.begin(), med.end());
    printf("%-36s loop cycles median %lld (min %lld max %lld over 11 runs) = %.1f cycles/round\n", name, med[5], med[0],
           med[10], (double)med[5] / kRounds);
    if (o) { o->resize(out_words); cudaMemcpy(o->data(), dout, out_words * 2, cudaMemcpyDeviceToHost); }
    if (r) { r->resize(tiles * 32); cudaMemcpy(r->data(), dres, tiles * 128, cudaMemcpyDeviceToHost); }
  };
  std::vector<uint16_t> oa, ob; std::vector<uint32_t> ra, rb;
  for (int rep = 0; rep < 2; ++rep) {
    run(Rounds<0, false>, "chain only, corrected", nullptr, &ra);
    run(Rounds<0, true>, "chain only, exact", nullptr, &rb);
    printf("  states %s\n", ra == rb ? "equal" : "DIFFER");
    run(Rounds<1, false>, "batched, no branch, corrected", &oa, &ra);
    run(Rounds<1, true>, "batched, no branch, exact", &ob, &rb);
    printf("  words %s, states %s\n", oa == ob ? "equal" : "DIFFER", ra == rb ? "equal" : "DIFFER");
    run(Rounds<2, false>, "codec step, corrected", &oa, &ra);
    run(Rounds<2, true>, "codec step, exact", &ob, &rb);
    printf("  words %s, states %s\n", oa == ob ? "equal" : "DIFFER", ra == rb ? "equal" : "DIFFER");
    run(Rounds<0, true, true>, "chain only, exact, selp", nullptr, &rb);
    run(Rounds<2, true, true>, "codec step, exact, selp", &ob, &rb);
    printf("  words %s, states %s\n", oa == ob ? "equal" : "DIFFER", ra == rb ? "equal" : "DIFFER");
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
