// What a kernel boundary costs on an H100, event to event: chains of empty
// kernels launched with programmatic dependent launch, and one cooperative
// kernel with grid barriers (cooperative_groups, and a hand-written one).
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 2026-11-25-kernel-chain.cu -o chain
#include <cooperative_groups.h>
#include <cstdio>
#include <vector>
#include <algorithm>
namespace cg = cooperative_groups;
__device__ unsigned sink;
__global__ void Empty(int x) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (x == 12345 && threadIdx.x == 0) sink = blockIdx.x;
}
__global__ void Coop(int syncs) {
  cg::grid_group g = cg::this_grid();
  for (int i = 0; i < syncs; ++i) g.sync();
  if (syncs == 12345 && threadIdx.x == 0) sink = blockIdx.x;
}
__device__ unsigned bar_count, bar_gen;
__global__ void MyBar(int syncs) {
  for (int i = 0; i < syncs; ++i) {
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned gen = *(volatile unsigned*)&bar_gen;
      __threadfence();
      if (atomicAdd(&bar_count, 1) == gridDim.x - 1) {
        bar_count = 0;
        __threadfence();
        atomicAdd(&bar_gen, 1);
      } else {
        while (*(volatile unsigned*)&bar_gen == gen) {}
      }
      __threadfence();
    }
    __syncthreads();
  }
}
template <typename F> float Time(cudaStream_t s, F f) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<float> v;
  for (int r = 0; r < 50; ++r) {
    cudaEventRecord(a, s); f(); cudaEventRecord(b, s); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 10) v.push_back(ms * 1000);
  }
  std::sort(v.begin(), v.end()); return v[v.size() / 2];
}
int main() {
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto launch = [&](int blocks, int threads) {
    cudaLaunchAttribute attr[1] = {}; attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {}; cfg.gridDim = blocks; cfg.blockDim = threads; cfg.stream = s; cfg.attrs = attr; cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, Empty, 0);
  };
  for (int k : {1, 2, 3, 5}) for (int blocks : {1, 256}) {
    printf("empty PDL chain of %d kernels x %d blocks: %.2f us\n", k, blocks, Time(s, [&] { for (int i = 0; i < k; ++i) launch(blocks, 256); }));
  }
  for (int bpsm : {1, 2}) for (int syncs : {0, 1, 4}) {
    int blocks = sms * bpsm;
    printf("cooperative %d blocks, %d grid syncs: %.2f us\n", blocks, syncs, Time(s, [&] {
      void* args[] = {&syncs}; cudaLaunchCooperativeKernel((void*)Coop, blocks, 256, args, 0, s); }));
    printf("own barrier %d blocks, %d syncs: %.2f us\n", blocks, syncs, Time(s, [&] {
      MyBar<<<blocks, 256, 0, s>>>(syncs); }));
  }
  printf("err %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
