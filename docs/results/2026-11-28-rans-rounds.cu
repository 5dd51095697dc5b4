// The encoder's rANS rounds alone, as a one 4 MiB bf16 call runs them: one
// warp a scheduler (128 blocks x 4 warps), a 4096-symbol tile a warp from
// shared memory, an exponent-like table. Prints each variant's cycles a
// round (clock64 around the round loop, median warp) and kernel time, checks
// that the variants that must write the same words and states do, and times
// a few dependent-instruction chains. Results: docs/performance.md
// ("the rANS rounds alone", 2026-11-28), log 2026-11-28-h100-timeline.log.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o rans_rounds rans-rounds.cu
// Variants (kMode): 0 the codec's step (a word stored in its round);
// 1 the state chain only (no ballot, no store); 2 as 0, words to shared
// memory; 3 both renormalisation paths computed, one selected; 4 the
// quotient from a double; 5 words put out after each 16 rounds; 6 as 5 with
// the quotient's correction by arithmetic; 7 as 5 without the stores;
// 8 no quotient correction (timing only); 9 no renormalisation (timing
// only); 10 as 5 with every ballot first, then the places, then the stores;
// 11 as 10 with a __syncwarp before the stores; 12 as 10 with every lane
// storing (a spare slot where it emits nothing): no branch.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <random>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
constexpr uint32_t kM = 256, kL = 1u << 16;
constexpr int kRounds = 128, kSeg = 16;

template <bool kOdd, int kMode>
__device__ __forceinline__ void Step(uint4 e, uint32_t f_even, uint32_t lt, uint16_t* words_end, uint32_t& x,
                                     uint32_t& emitted) {
  const uint32_t f = e.y;
  bool need = false;
  if (kOdd) {
    const uint32_t bound = (f * f_even << 16) - 1u;
    need = x > bound;
    if (kMode != 1) {
      const unsigned mask = __ballot_sync(0xffffffffu, need);
      const uint32_t k = __popc(mask);
      uint32_t word;
      asm("and.b32 %0, %1, 0xffff;" : "=r"(word) : "r"(x));
      if (need) words_end[static_cast<int32_t>(__popc(mask & lt)) - static_cast<int32_t>(emitted + k)] = word;
      emitted += k;
    } else {
      emitted += need;
    }
  }
  if (kMode == 3 && kOdd) {
    const uint32_t va = x, vb = x >> 16;
    const uint32_t qa = __umulhi(va, e.x), qb = __umulhi(vb, e.x);
    const uint32_t xa = va + e.w + qa * e.z + (va >= qa * f + f ? e.z : 0);
    const uint32_t xb = vb + e.w + qb * e.z + (vb >= qb * f + f ? e.z : 0);
    x = need ? xb : xa;
    return;
  }
  if (kMode == 4) {  // exact quotient in double
    const uint32_t v = need ? x >> 16 : x;
    const double r = __longlong_as_double(__double_as_longlong(1.0 / (double)f) + 1);
    const uint32_t q = (uint32_t)((double)v * r);
    x = v + e.w + q * e.z;
    return;
  }
  const uint32_t v = kMode == 9 ? x : need ? x >> 16 : x;
  const uint32_t q = __umulhi(v, e.x);
  if (kMode == 8) { x = v + e.w + q * e.z; return; }
  uint32_t x0, x1;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x0) : "r"(q), "r"(e.z), "r"(v + e.w));
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x1) : "r"(q), "r"(e.z), "r"(v + e.w + e.z));
  x = v >= q * f + f ? x1 : x0;
}

// kMode 0: as the codec (words to global). 1: chain only. 2: words to shared memory.
template <int kMode>
__global__ void __launch_bounds__(128, 1) Rounds(const uint8_t* sym, const uint32_t* freq, uint16_t* out, long long* cyc, uint32_t* res) {
  __shared__ uint4 tables[256];
  __shared__ uint8_t syms[4][kRounds * 32];
  __shared__ uint16_t sout[4][kRounds * 16 + 64];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    uint32_t cum = 0;
    for (int j = 0; j < i; ++j) cum += freq[j];
    const uint32_t f = freq[i];
    tables[i] = make_uint4(f ? 0xffffffffu / f : 0, f, kM - f, cum);
  }
  const uint32_t tile = blockIdx.x * 4 + warp;
  for (int i = lane; i < kRounds * 32; i += 32) syms[warp][i] = sym[tile * kRounds * 32 + i];
  __syncthreads();
  uint16_t* words_end = kMode == 2 ? sout[warp] + kRounds * 16 + 64 : out + (tile + 1) * (kRounds * 32 + 64);
  const uint32_t lt = (1u << lane) - 1;
  uint32_t x = kL | lane, emitted = 0;
  const long long t0 = clock64();
  for (int sg = kRounds / kSeg - 1; sg >= 0; --sg) {
    const uint8_t* st = syms[warp] + sg * kSeg * 32;
    uint4 en[kSeg];
#pragma unroll
    for (int r = 0; r < kSeg; ++r) en[r] = tables[st[r * 32 + lane]];
    if (kMode >= 5) {
      uint32_t w[kSeg / 2], nb = 0;
#pragma unroll
      for (int r = kSeg - 1; r >= 0; r -= 2) {
        const int k = (kSeg - 1 - r) / 2;
        const uint4 e = en[r];
        const uint32_t bound = (e.y * en[r - 1].y << 16) - 1u;
        const bool need = x > bound;
        w[k] = x;
        if (need) nb |= 1u << k;
        uint32_t v = need ? x >> 16 : x;
        for (int h = 0; h < 2; ++h) {
          const uint4 ee = h == 0 ? e : en[r - 1];
          if (h == 1) v = x;
          const uint32_t q = __umulhi(v, ee.x);
          if (kMode == 6) {
            const uint32_t d = v - q * ee.y - ee.y;  // < 0 (wrapped): q was exact
            const uint32_t x1 = v + ee.w + q * ee.z + ee.z;
            x = x1 - (d >> 31) * ee.z;
          } else {
            uint32_t x0, x1;
            asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x0) : "r"(q), "r"(ee.z), "r"(v + ee.w));
            asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x1) : "r"(q), "r"(ee.z), "r"(v + ee.w + ee.z));
            x = v >= q * ee.y + ee.y ? x1 : x0;
          }
        }
      }
      if (kMode == 10 || kMode == 11 || kMode == 12) {
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
        if (kMode == 11) __syncwarp();
#pragma unroll
        for (int k = 0; k < kSeg / 2; ++k) {
          if (kMode == 12) {
            words_end[(nb >> k) & 1 ? pos[k] : static_cast<int32_t>(lane) - (kRounds * 32 + 64)] = w[k];
          } else if ((nb >> k) & 1) {
            words_end[pos[k]] = w[k];
          }
        }
        continue;
      }
#pragma unroll
      for (int k = 0; k < kSeg / 2; ++k) {
        const unsigned mask = __ballot_sync(0xffffffffu, (nb >> k) & 1);
        const uint32_t c = __popc(mask);
        if (kMode != 7 && ((nb >> k) & 1)) words_end[static_cast<int32_t>(__popc(mask & lt)) - static_cast<int32_t>(emitted + c)] = w[k];
        emitted += c;
      }
      continue;
    }
#pragma unroll
    for (int r = kSeg - 1; r >= 0; r -= 2) {
      Step<true, kMode>(en[r], en[r - 1].y, lt, words_end, x, emitted);
      Step<false, kMode>(en[r - 1], 0, lt, words_end, x, emitted);
    }
  }
  const long long t1 = clock64();
  if (lane == 0) cyc[tile] = t1 - t0;
  res[tile * 32 + lane] = x ^ emitted;
  if (kMode == 2) out[tile * 64 + lane] = sout[warp][lane * 2 + (x & 1)];
}

__global__ void Lat(uint32_t* res, uint32_t k, long long* cyc) {
  uint32_t a = threadIdx.x + 12345, b = a;
  long long t0 = clock64();
#pragma unroll 100
  for (int i = 0; i < 1000; ++i) a = __umulhi(a, k + 0x9e3779b9u) + 7;
  long long t1 = clock64();
  b = a;
#pragma unroll 100
  for (int i = 0; i < 1000; ++i) asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(b) : "r"(k), "r"(k + 1));
  long long t2 = clock64();
  uint32_t c = b;
#pragma unroll 100
  for (int i = 0; i < 1000; ++i) c = c > k ? c - 3 : c + k;
  long long t3 = clock64();
  uint32_t d = c;
#pragma unroll 100
  for (int i = 0; i < 1000; ++i) asm volatile("add.u32 %0, %0, %1;" : "+r"(d) : "r"(k));
  long long t4 = clock64();
  uint32_t g = d;
#pragma unroll 100
  for (int i = 0; i < 1000; ++i) { uint32_t y; asm volatile("{.reg .pred p; setp.ge.u32 p, %1, %2; mad.lo.u32 %0, %1, 3, 1; @p mad.lo.u32 %0, %1, 5, 7;}" : "=r"(y) : "r"(g), "r"(k)); g = y; }
  long long t5 = clock64();
  uint32_t h = g;
#pragma unroll 100
  for (int i = 0; i < 1000; ++i) { h = __popc(__ballot_sync(0xffffffffu, h & 1)) + h; }
  long long t6 = clock64();
  res[threadIdx.x + 32] = g ^ h;
  if (threadIdx.x == 0) { cyc[4] = t5 - t4; cyc[5] = t6 - t5; }
  res[threadIdx.x] = a ^ b ^ c ^ d;
  if (threadIdx.x == 0) { cyc[0] = t1 - t0; cyc[1] = t2 - t1; cyc[2] = t3 - t2; cyc[3] = t4 - t3; }
}

int main() {
  const int tiles = 512;
  std::vector<uint32_t> freq(256, 0);
  // An exponent-like distribution: geometric around 120.
  int tot = 0;
  for (int s = 100; s < 127; ++s) { freq[s] = std::max(1, (int)(60.0 * std::pow(0.6, std::abs(s - 118)))); tot += freq[s]; }
  freq[118] += 256 - tot;
  std::vector<uint8_t> sym(tiles * kRounds * 32);
  std::mt19937 rng(1);
  std::vector<int> cdf;
  for (int s = 0; s < 256; ++s) for (uint32_t k = 0; k < freq[s]; ++k) cdf.push_back(s);
  for (auto& v : sym) v = cdf[rng() % 256];
  uint8_t* dsym; uint32_t* dfreq; uint16_t* dout; long long* dcyc; uint32_t* dres;
  cudaMalloc(&dsym, sym.size()); cudaMalloc(&dfreq, 1024); cudaMalloc(&dout, tiles * (kRounds * 32 + 64) * 2 + 4096);
  cudaMalloc(&dcyc, tiles * 8); cudaMalloc(&dres, tiles * 128);
  cudaMemcpy(dsym, sym.data(), sym.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dfreq, freq.data(), 1024, cudaMemcpyHostToDevice);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  auto run = [&](auto kern, const char* name) {
    std::vector<float> ms; std::vector<long long> cyc(tiles);
    for (int i = 0; i < 21; ++i) {
      cudaEventRecord(a); kern<<<tiles / 4, 128>>>(dsym, dfreq, dout, dcyc, dres); cudaEventRecord(b);
      cudaEventSynchronize(b); float t; cudaEventElapsedTime(&t, a, b); ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaMemcpy(cyc.data(), dcyc, tiles * 8, cudaMemcpyDeviceToHost);
    std::sort(cyc.begin(), cyc.end());
    printf("%-22s kernel %.2f us  loop cycles median %lld max %lld  = %.1f cycles/round\n", name, ms[10] * 1000,
           cyc[tiles / 2], cyc[tiles - 1], (double)cyc[tiles / 2] / kRounds);
  };
  run(Rounds<0>, "codec step (global)");
  run(Rounds<1>, "chain only");
  run(Rounds<2>, "words to shared");
  run(Rounds<3>, "speculate both (odd)");
  run(Rounds<4>, "double quotient");
  run(Rounds<0>, "codec step (global)");
  std::vector<uint16_t> o0(tiles * (kRounds * 32 + 64)), o5(o0.size());
  std::vector<uint32_t> r0(tiles * 32), r5(tiles * 32);
  auto grab = [&](auto kern, std::vector<uint16_t>& o, std::vector<uint32_t>& r) {
    cudaMemset(dout, 0, o.size() * 2); kern<<<tiles / 4, 128>>>(dsym, dfreq, dout, dcyc, dres);
    cudaMemcpy(o.data(), dout, o.size() * 2, cudaMemcpyDeviceToHost); cudaMemcpy(r.data(), dres, r.size() * 4, cudaMemcpyDeviceToHost);
  };
  grab(Rounds<0>, o0, r0);
  run(Rounds<5>, "deferred emission");
  grab(Rounds<5>, o5, r5);
  printf("deferred emission: words %s, states %s\n", o0 == o5 ? "equal" : "DIFFER", r0 == r5 ? "equal" : "DIFFER");
  run(Rounds<10>, "deferred, batched");
  grab(Rounds<10>, o5, r5);
  printf("deferred batched: words %s, states %s\n", o0 == o5 ? "equal" : "DIFFER", r0 == r5 ? "equal" : "DIFFER");
  run(Rounds<11>, "deferred, batched, sync");
  run(Rounds<12>, "deferred, batched, no branch");
  grab(Rounds<12>, o5, r5);
  for (int t = 0; t < tiles; ++t) for (int l = 0; l < 32; ++l) o5[t * (kRounds * 32 + 64) + l] = 0;
  printf("no branch: words %s, states %s\n", o0 == o5 ? "equal" : "DIFFER", r0 == r5 ? "equal" : "DIFFER");
  run(Rounds<7>, "deferred, no stores");
  run(Rounds<8>, "chain, no correction");
  run(Rounds<9>, "chain, no renorm");
  run(Rounds<6>, "deferred + arith corr");
  grab(Rounds<6>, o5, r5);
  printf("deferred + arith corr: words %s, states %s\n", o0 == o5 ? "equal" : "DIFFER", r0 == r5 ? "equal" : "DIFFER");
  Lat<<<1, 32>>>(dres, 3, dcyc);
  long long lc[6]; cudaMemcpy(lc, dcyc, 48, cudaMemcpyDeviceToHost);
  printf("setp -> @p mad chain %.2f, ballot+popc+add chain %.2f\n", lc[4] / 1000.0, lc[5] / 1000.0);
  printf("latency per op (1000-op chains): imad.hi %.2f imad %.2f isetp+sel %.2f iadd %.2f\n", lc[0] / 1000.0, lc[1] / 1000.0, lc[2] / 1000.0, lc[3] / 1000.0);
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
