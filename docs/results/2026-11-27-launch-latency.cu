// What a call's launches cost on an H100, event to event (median of 200):
// empty kernels launched one by one, with and without programmatic dependent
// launch, on an idle stream and queued behind a 2 ms host function; the same
// chains captured into a CUDA graph and launched whole; the graph's kernel
// parameters set before each launch; a shared-memory carveout of 100 on all.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -cudart static 2026-11-27-launch-latency.cu -o lat
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>
__device__ __forceinline__ void Wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void Go() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
struct P {
  void* a[8];
  unsigned long long b[4];
};
__global__ void __launch_bounds__(1024) K1(P p, int* out) {
  Wait();
  Go();
  if (threadIdx.x == 0 && p.b[0] == 7) out[0] = 1;
}
__global__ void __launch_bounds__(256, 4) K2(P p, int* out) {
  extern __shared__ unsigned char sm[];
  Wait();
  sm[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (sm[(threadIdx.x + 1) % 256] == 300 && p.b[0] == 7) out[1] = 1;
}
__global__ void K3(P p, int* out) {
  Wait();
  if (threadIdx.x == 0 && p.b[0] == 7) out[2] = 1;
}
template <typename... A>
void L(bool pdl, void (*k)(A...), dim3 g, dim3 b, size_t smem, cudaStream_t s, P p, int* o) {
  cudaLaunchAttribute at[1] = {};
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c = {};
  c.gridDim = g;
  c.blockDim = b;
  c.dynamicSmemBytes = smem;
  c.stream = s;
  c.attrs = at;
  c.numAttrs = pdl ? 1 : 0;
  cudaLaunchKernelEx(&c, k, p, o);
}
void CUDART_CB Hold(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }
int main() {
  cudaStream_t s;
  cudaStreamCreate(&s);
  int* o;
  cudaMalloc(&o, 64);
  P p = {};
  const size_t smem = 47 * 1024;
  cudaFuncSetAttribute(K2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  auto run = [&](const char* name, bool queued, auto&& call) {
    std::vector<float> v;
    for (int r = 0; r < 205; ++r) {
      if (queued) cudaLaunchHostFunc(s, Hold, nullptr);
      cudaEventRecord(a, s);
      call();
      cudaEventRecord(b, s);
      cudaEventSynchronize(b);
      float t;
      cudaEventElapsedTime(&t, a, b);
      if (r >= 5) v.push_back(t * 1000);
    }
    std::sort(v.begin(), v.end());
    printf("%-48s %s median %6.2f us  p10 %6.2f  p90 %6.2f\n", name, queued ? "queued" : "idle  ", v[v.size() / 2],
           v[v.size() / 10], v[v.size() * 9 / 10]);
  };
  for (int q = 0; q < 2; ++q) {
    const bool Q = q;
    run("empty", Q, [&] {});
    run("K1 (1 block x 1024) <<<>>>", Q, [&] { K1<<<1, 1024, 0, s>>>(p, o); });
    run("K1 LaunchKernelEx, no attr", Q, [&] { L(false, K1, 1, 1024, 0, s, p, o); });
    run("K1 LaunchKernelEx, PDL", Q, [&] { L(true, K1, 1, 1024, 0, s, p, o); });
    run("K1+K2 (512x256, 47K smem) PDL", Q, [&] {
      L(true, K1, 1, 1024, 0, s, p, o);
      L(true, K2, 512, 256, smem, s, p, o);
    });
    run("K1+K2+K3 PDL", Q, [&] {
      L(true, K1, 1, 1024, 0, s, p, o);
      L(true, K2, 512, 256, smem, s, p, o);
      L(true, K3, 1, 32, 0, s, p, o);
    });
    run("K1+K2+K3 no PDL", Q, [&] {
      L(false, K1, 1, 1024, 0, s, p, o);
      L(false, K2, 512, 256, smem, s, p, o);
      L(false, K3, 1, 32, 0, s, p, o);
    });
    run("K2 alone PDL", Q, [&] { L(true, K2, 512, 256, smem, s, p, o); });
  }
  // Graphs: the same chains captured (PDL launches become programmatic edges).
  auto capture = [&](auto&& call) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    call();
    if (cudaStreamEndCapture(s, &g) != cudaSuccess) printf("capture failed\n");
    if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess) printf("instantiate failed\n");
    return e;
  };
  cudaGraphExec_t g1 = capture([&] { L(true, K1, 1, 1024, 0, s, p, o); });
  cudaGraphExec_t g3 = capture([&] {
    L(true, K1, 1, 1024, 0, s, p, o);
    L(true, K2, 512, 256, smem, s, p, o);
    L(true, K3, 1, 32, 0, s, p, o);
  });
  cudaGraphExec_t g3n = capture([&] {
    L(false, K1, 1, 1024, 0, s, p, o);
    L(false, K2, 512, 256, smem, s, p, o);
    L(false, K3, 1, 32, 0, s, p, o);
  });
  cudaGraphUpload(g1, s);
  cudaGraphUpload(g3, s);
  cudaGraphUpload(g3n, s);
  for (int q = 0; q < 2; ++q) {
    const bool Q = q;
    run("graph K1", Q, [&] { cudaGraphLaunch(g1, s); });
    run("graph K1+K2+K3 (PDL captured)", Q, [&] { cudaGraphLaunch(g3, s); });
    run("graph K1+K2+K3 (no PDL)", Q, [&] { cudaGraphLaunch(g3n, s); });
    run("again: K1+K2+K3 PDL launches", Q, [&] {
      L(true, K1, 1, 1024, 0, s, p, o);
      L(true, K2, 512, 256, smem, s, p, o);
      L(true, K3, 1, 32, 0, s, p, o);
    });
  }
  // A graph's kernel parameters changed before each launch (what a call with new arguments would need).
  {
    cudaGraph_t g;
    cudaGraphExec_t e;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    L(true, K1, 1, 1024, 0, s, p, o);
    L(true, K2, 512, 256, smem, s, p, o);
    L(true, K3, 1, 32, 0, s, p, o);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&e, g, 0);
    size_t n = 0;
    cudaGraphGetNodes(g, nullptr, &n);
    std::vector<cudaGraphNode_t> nodes(n);
    cudaGraphGetNodes(g, nodes.data(), &n);
    std::vector<cudaKernelNodeParams> kp(n);
    for (size_t i = 0; i < n; ++i) cudaGraphKernelNodeGetParams(nodes[i], &kp[i]);
    for (int q = 0; q < 2; ++q) {
      run("graph K1+K2+K3, params set each call", q, [&] {
        p.b[1]++;
        for (size_t i = 0; i < n; ++i) {
          void* args[2] = {&p, &o};
          kp[i].kernelParams = args;
          cudaGraphExecKernelNodeSetParams(e, nodes[i], &kp[i]);
        }
        cudaGraphLaunch(e, s);
      });
    }
  }
  cudaFuncSetAttribute(K1, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  cudaFuncSetAttribute(K3, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  cudaFuncSetAttribute(K2, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  for (int q = 0; q < 2; ++q) {
    const bool Q = q;
    run("carveout 100: K1+K2+K3 PDL", Q, [&] {
      L(true, K1, 1, 1024, 0, s, p, o);
      L(true, K2, 512, 256, smem, s, p, o);
      L(true, K3, 1, 32, 0, s, p, o);
    });
    run("carveout 100: K1+K2 PDL", Q, [&] {
      L(true, K1, 1, 1024, 0, s, p, o);
      L(true, K2, 512, 256, smem, s, p, o);
    });
  }
  return 0;
}
