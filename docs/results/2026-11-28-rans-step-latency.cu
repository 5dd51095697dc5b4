// Dependent-chain latency, in cycles an iteration (clock64, one warp, best of 5 launches), of the
// instructions on the encoder's rANS state chain and of a pair's step in several forms: the
// codec's (renormalisation as a shift predicated on the compare, then two exact steps:
// umulhi, mad, shr, mad), a double-precision quotient, both candidate high words formed before
// the compare is known, and the shift by a selected amount (16 or 0).
// Results in docs/performance.md ("A small call's Tiles code: less of it to fetch", 2026-11-28),
// log 2026-11-28-h200-rounds.log (runs 188 and 191).
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o lat 2026-11-28-rans-step-latency.cu
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
constexpr int kN = 4096;
__device__ __forceinline__ uint32_t step_cur(uint32_t x, uint4 e) {  // exact: umulhi, mad, shr, mad
  const uint32_t h = __umulhi(x, e.x);
  uint32_t a, nx;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(a) : "r"(x), "r"(e.y), "r"(h));
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(nx) : "r"(a >> 8), "r"(e.z), "r"(x + e.w));
  return nx;
}
__device__ __forceinline__ uint32_t step_f64(uint32_t x, double inv, uint32_t mf, uint32_t cum) {
  const uint32_t q = __double2uint_rz(__uint2double_rn(x) * inv);
  return q * mf + x + cum;
}
template <int kV>
__global__ void Chain(const uint4* tab, const double* inv, uint32_t* out, long long* cyc) {
  const uint32_t lane = threadIdx.x;
  uint4 e[4];
  double iv[4];
  for (int k = 0; k < 4; ++k) { e[k] = tab[(lane + k) % 8]; iv[k] = inv[(lane + k) % 8]; }
  uint32_t x = (1u << 16) | lane, y = lane * 7 + 1;
  double d = lane + 1.5;
  __syncwarp();
  const long long t0 = clock64();
#pragma unroll 16
  for (int i = 0; i < kN; ++i) {
    const uint4 en = e[i & 3];
    if (kV == 0) { asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(y) : "r"(en.x), "r"(en.y)); }
    if (kV == 1) { asm volatile("mul.hi.u32 %0, %0, %1;" : "+r"(y) : "r"(en.x | 1)); y |= 0; }
    if (kV == 2) { asm volatile("shr.b32 %0, %0, 1;" : "+r"(y)); asm volatile("or.b32 %0, %0, 0x80000000;" : "+r"(y)); }
    if (kV == 3) { asm volatile("add.u32 %0, %0, %1;" : "+r"(y) : "r"(en.x)); }
    if (kV == 4) { d = fma(d, 1.0000001, 0.5); }
    if (kV == 5) { y = __double2uint_rz(__uint2double_rn(y) * 0.75) + 12345; }
    if (kV == 6) {  // current pair form: renorm compare + select, two exact steps
      const uint4 e2 = e[(i + 1) & 3];
      const uint32_t bound = (((256u - en.z) * (256u - e2.z)) << 16) - 1u;
      x = x > bound ? x >> 16 : x;
      x = step_cur(x, en);
      x = step_cur(x, e2);
    }
    if (kV == 7) {  // f64 quotient pair
      const uint4 e2 = e[(i + 1) & 3];
      const uint32_t bound = (((256u - en.z) * (256u - e2.z)) << 16) - 1u;
      x = x > bound ? x >> 16 : x;
      x = step_f64(x, iv[i & 3], en.z, en.w);
      x = step_f64(x, iv[(i + 1) & 3], e2.z, e2.w);
    }
    if (kV == 9) {  // pair: both first quotients' high words at once, the renorm selects v and h
      const uint4 e2 = e[(i + 1) & 3];
      const uint32_t bound = ((256u - en.z) * (256u - e2.z) << 16) - 1u;
      const bool need = x > bound;
      const uint32_t xs = x >> 16;
      const uint32_t hA = __umulhi(x, en.x), hB = __umulhi(xs, en.x);
      uint32_t mk, v, h;
      asm("set.gt.u32.u32 %0, %1, %2;" : "=r"(mk) : "r"(x), "r"(bound));
      asm("lop3.b32 %0, %1, %2, %3, 0xe4;" : "=r"(v) : "r"(mk), "r"(xs), "r"(x));  // mk ? xs : x
      asm("lop3.b32 %0, %1, %2, %3, 0xe4;" : "=r"(h) : "r"(mk), "r"(hB), "r"(hA));
      (void)need;
      uint32_t a, nx;
      asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(a) : "r"(v), "r"(en.y), "r"(h));
      asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(nx) : "r"(a >> 8), "r"(en.z), "r"(v + en.w));
      x = step_cur(nx, e2);
    }
    if (kV == 10) {  // pair: renorm as a shift by a selected amount
      const uint4 e2 = e[(i + 1) & 3];
      const uint32_t bound = ((256u - en.z) * (256u - e2.z) << 16) - 1u;
      const uint32_t sh = x > bound ? 16 : 0;
      x = x >> sh;
      x = step_cur(x, en);
      x = step_cur(x, e2);
    }
    if (kV == 11) {  // one exact step alone (no renorm): the chain of umulhi, mad, shr, mad
      x = step_cur(x, en);
      x = x & 0x3fffffff;
    }
    if (kV == 8) {  // steps only, no renorm
      x = step_cur(x, en);
      x = step_cur(x, e[(i + 1) & 3]);
      x = x > (1u << 30) ? x >> 16 : x;  // keep in range
    }
  }
  const long long t1 = clock64();
  out[lane] = x ^ y ^ static_cast<uint32_t>(d);
  if (lane == 0) cyc[0] = t1 - t0;
}
int main() {
  uint4 h[8];
  double hi[8];
  const uint32_t fs[8] = {3, 17, 100, 200, 255, 64, 9, 128};
  uint32_t cum = 0;
  for (int k = 0; k < 8; ++k) {
    const uint32_t f = fs[k];
    const uint64_t m = ((uint64_t{1} << 40) + f - 1) / f;
    h[k] = make_uint4(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32), 256 - f, cum % 256);
    hi[k] = (1.0 / f) * (1 + 1e-15);
    cum += f;
  }
  uint4* dt; double* di; uint32_t* dout; long long* dc;
  cudaMalloc(&dt, sizeof h); cudaMalloc(&di, sizeof hi); cudaMalloc(&dout, 128); cudaMalloc(&dc, 8);
  cudaMemcpy(dt, h, sizeof h, cudaMemcpyHostToDevice); cudaMemcpy(di, hi, sizeof hi, cudaMemcpyHostToDevice);
  const char* names[] = {"IMAD chain", "IMAD.HI chain", "SHF+LOP chain (2 ops)", "IADD chain", "DFMA chain", "I2F.F64,DMUL,F2I,IADD chain",
                         "pair: renorm + 2 exact steps", "pair: renorm + 2 f64 steps", "pair: 2 exact steps, cheap renorm", "pair: both high words, select", "pair: shift by selected amount", "one step + AND"};
  void (*ks[])(const uint4*, const double*, uint32_t*, long long*) = {Chain<0>, Chain<1>, Chain<2>, Chain<3>, Chain<4>, Chain<5>, Chain<6>, Chain<7>, Chain<8>, Chain<9>, Chain<10>, Chain<11>};
  for (int v = 0; v < 12; ++v) {
    long long best = 1LL << 60;
    for (int r = 0; r < 5; ++r) {
      ks[v]<<<1, 32>>>(dt, di, dout, dc);
      long long c; cudaMemcpy(&c, dc, 8, cudaMemcpyDeviceToHost);
      best = c < best ? c : best;
    }
    std::printf("%-36s %7.2f cycles an iteration\n", names[v], static_cast<double>(best) / kN);
  }
  return cudaGetLastError() != cudaSuccess;
}
