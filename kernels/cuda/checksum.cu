#include "kernels/checksum_core.h"
#include "kernels/cuda/checksum_cuda.h"
#include "kernels/cuda/kvsum64.cuh"

namespace kvferry::cuda {
namespace {

using namespace kvferry::checksum;  // NOLINT

constexpr int kThreads = 256;  // 8 warps, one 4 KiB checksum block each

__global__ void __launch_bounds__(kThreads) Kvsum64Blocks(const uint8_t* data, uint64_t n, unsigned long long* sum) {
  __shared__ uint64_t key[kWordsPerBlock];
  for (uint32_t k = threadIdx.x; k < kWordsPerBlock; k += blockDim.x) key[k] = Key(k);
  __syncthreads();
  const uint64_t block = blockIdx.x * static_cast<uint64_t>(kThreads / 32) + threadIdx.x / 32;
  const uint64_t nblocks = (n + kBlockBytes - 1) / kBlockBytes;
  const ContiguousBytes src{data, reinterpret_cast<uintptr_t>(data) % 8 == 0};
  Kvsum64WarpBlockFrom(src, n, block, key, block < nblocks, sum);
}

__global__ void Kvsum64Finish(unsigned long long* sum, uint64_t n) { *sum = Finish(*sum, n); }

}  // namespace

cudaError_t Kvsum64Async(const void* data, size_t n, uint64_t* out, cudaStream_t stream) {
  auto* sum = reinterpret_cast<unsigned long long*>(out);
  cudaError_t err = cudaMemsetAsync(sum, 0, sizeof(*sum), stream);
  if (err != cudaSuccess) return err;
  const uint64_t nblocks = (n + kBlockBytes - 1) / kBlockBytes;
  if (nblocks > 0) {
    const unsigned grid = static_cast<unsigned>((nblocks + kThreads / 32 - 1) / (kThreads / 32));
    Kvsum64Blocks<<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(data), n, sum);
  }
  Kvsum64Finish<<<1, 1, 0, stream>>>(sum, n);
  return cudaGetLastError();
}

}  // namespace kvferry::cuda
