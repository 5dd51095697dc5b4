// kvsum64 on the GPU equals kvsum64 on the CPU, byte for byte, for every size
// class and alignment; prints GPU throughput. Needs a CUDA device: without one
// the test reports itself skipped (it runs on the GPU host, see docs/performance.md).
#include "kernels/cuda/checksum_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/checksum.h"

namespace kvferry {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

class CudaChecksum : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaChecksum, MatchesCpuForAllSizesAndAlignments) {
  const size_t max = (8 << 20) + 64;
  std::vector<uint8_t> host(max);
  std::mt19937_64 rng(42);
  for (auto& b : host) b = static_cast<uint8_t>(rng());
  uint8_t* dev = nullptr;
  uint64_t* out = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dev), max));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(uint64_t)));
  CUDA_OK(cudaMemcpy(dev, host.data(), max, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  for (size_t off : {size_t{0}, size_t{3}, size_t{8}}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{63}, size_t{4095}, size_t{4096}, size_t{4097},
                     size_t{12345}, size_t{1} << 20, size_t{8} << 20}) {
      CUDA_OK(cuda::Kvsum64Async(dev + off, n, out, s));
      uint64_t got = 0;
      CUDA_OK(cudaMemcpyAsync(&got, out, 8, cudaMemcpyDeviceToHost, s));
      CUDA_OK(cudaStreamSynchronize(s));
      EXPECT_EQ(got, Kvsum64(host.data() + off, n)) << "off " << off << " n " << n;
    }
  }
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFree(dev));
  CUDA_OK(cudaFree(out));
}

TEST_F(CudaChecksum, Throughput) {
  for (size_t n : {size_t{4} << 20, size_t{64} << 20, size_t{256} << 20}) {
    uint8_t* dev = nullptr;
    uint64_t* out = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dev), n));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&out), 8));
    CUDA_OK(cudaMemset(dev, 0x5a, n));
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    for (int i = 0; i < 5; ++i) CUDA_OK(cuda::Kvsum64Async(dev, n, out, nullptr));
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) {
      CUDA_OK(cudaEventRecord(a));
      CUDA_OK(cuda::Kvsum64Async(dev, n, out, nullptr));
      CUDA_OK(cudaEventRecord(b));
      CUDA_OK(cudaEventSynchronize(b));
      float t = 0;
      CUDA_OK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("kvsum64 cuda %6zu MiB: median %.3f ms, %.1f GB/s\n", n >> 20, ms[ms.size() / 2],
                n / 1e6 / ms[ms.size() / 2]);
    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaFree(out));
  }
}

}  // namespace
}  // namespace kvferry
