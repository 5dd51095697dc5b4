// What a small call's three-kernel chain costs against one cooperative kernel
// with two grid-wide waits, each launched as a CUDA graph from an idle stream
// (event to event, median of 200 after 20 warm-up calls); also plain launches.
// Each phase: every block adds to 256 counters, then (after the boundary or
// wait) reads them all. Results: docs/results/2026-11-28-h100-small-call-chain.log
// (run 82). Build:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o coop_mb 2026-11-28-coop-vs-chain.cu
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>
namespace cg = cooperative_groups;

__device__ __forceinline__ void Wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ void Phase(unsigned long long* a, unsigned long long* b, unsigned long long* out) {
  if (threadIdx.x < 64) atomicAdd(&a[(threadIdx.x * 4 + blockIdx.x) % 256], 1ull);
  (void)b;
  (void)out;
}
__device__ void Read(const unsigned long long* a, unsigned long long* out) {
  unsigned long long s = 0;
  for (int k = threadIdx.x; k < 256; k += blockDim.x) s += a[k];
  if (s == 12345) out[blockIdx.x] = s;
}

__global__ void K1(unsigned long long* h, unsigned long long* out) { Wait(); Phase(h, nullptr, out); }
__global__ void K2(unsigned long long* h, unsigned long long* out) { Wait(); Read(h, out); Phase(h + 256, nullptr, out); }
__global__ void K3(unsigned long long* h, unsigned long long* out) { Wait(); Read(h + 256, out); }

__global__ void Coop(unsigned long long* h, unsigned long long* out) {
  cg::grid_group g = cg::this_grid();
  Phase(h, nullptr, out);
  g.sync();
  Read(h, out);
  Phase(h + 256, nullptr, out);
  g.sync();
  Read(h + 256, out);
}

// A grid-wide wait of our own: a counter a wait, every block adds 1 and spins
// until the count reaches the grid (a co-resident grid only).
__device__ void GridWait(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    while (atomicAdd(counter, 0u) < target) __nanosleep(32);
    __threadfence();
  }
  __syncthreads();
}
__global__ void Own(unsigned long long* h, unsigned long long* out, unsigned* counters, unsigned gen) {
  Phase(h, nullptr, out);
  GridWait(&counters[0], gen * gridDim.x);
  Read(h, out);
  Phase(h + 256, nullptr, out);
  GridWait(&counters[1], gen * gridDim.x);
  Read(h + 256, out);
}

template <typename F>
float Median(F&& launch, cudaStream_t s) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < 220; ++i) {
    cudaEventRecord(a, s);
    launch(i);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 20) t.push_back(ms * 1000);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  const int blocks = 128, threads = 128;
  unsigned long long *h, *out;
  unsigned* counters;
  cudaMalloc(&h, 512 * 8);
  cudaMalloc(&out, blocks * 8);
  cudaMalloc(&counters, 8);
  cudaMemset(counters, 0, 8);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto launch = [&](void* fn, void** args, bool coop, bool pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = blocks;
    cfg.blockDim = threads;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    int n = 0;
    if (coop) at[n].id = cudaLaunchAttributeCooperative, at[n++].val.cooperative = 1;
    if (pdl) at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization, at[n++].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = n;
    return cudaLaunchKernelExC(&cfg, fn, args);
  };
  auto graph_of = [&](auto&& body) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    const cudaError_t r = body();
    cudaStreamEndCapture(s, &g);
    if (r != cudaSuccess) printf("capture launch: %s\n", cudaGetErrorString(r));
    const cudaError_t ri = cudaGraphInstantiate(&e, g, 0);
    if (ri != cudaSuccess) printf("instantiate: %s\n", cudaGetErrorString(ri));
    return e;
  };
  void* args2[] = {&h, &out};
  cudaGraphExec_t chain = graph_of([&] {
    cudaError_t r = launch(reinterpret_cast<void*>(K1), args2, false, true);
    if (r == cudaSuccess) r = launch(reinterpret_cast<void*>(K2), args2, false, true);
    if (r == cudaSuccess) r = launch(reinterpret_cast<void*>(K3), args2, false, true);
    return r;
  });
  cudaGraphExec_t coop = graph_of([&] { return launch(reinterpret_cast<void*>(Coop), args2, true, false); });
  cudaGraphExec_t coop_pdl = graph_of([&] { return launch(reinterpret_cast<void*>(Coop), args2, true, true); });
  cudaGraphExec_t one = graph_of([&] { return launch(reinterpret_cast<void*>(K1), args2, false, false); });
  printf("one kernel, graph:            %.2f us\n", Median([&](int) { cudaGraphLaunch(one, s); }, s));
  printf("chain of 3 (PDL), graph:      %.2f us\n", Median([&](int) { cudaGraphLaunch(chain, s); }, s));
  printf("cooperative, graph:           %.2f us\n", Median([&](int) { cudaGraphLaunch(coop, s); }, s));
  printf("cooperative + PDL attr, graph: %.2f us\n", Median([&](int) { cudaGraphLaunch(coop_pdl, s); }, s));
  unsigned gen = 0;
  printf("one kernel, plain launch:     %.2f us\n", Median([&](int) { K1<<<blocks, threads, 0, s>>>(h, out); }, s));
  printf("own waits, plain launches:    %.2f us\n", Median([&](int) { ++gen; Own<<<blocks, threads, 0, s>>>(h, out, counters, gen); }, s));
  printf("cooperative, plain launch:    %.2f us\n", Median([&](int) { launch(reinterpret_cast<void*>(Coop), args2, true, false); }, s));
  printf("last error: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
