#include "kernels/checksum_core.h"
#include "kernels/cuda/checksum_cuda.h"
#include "kernels/cuda/kvsum64.cuh"

namespace kvferry::cuda {
namespace {

using namespace kvferry::checksum;  // NOLINT

constexpr int kThreads = 256;  // 32 checksum blocks per CUDA block

// 8 consecutive threads own one 4 KiB checksum block, one lane each.
__global__ void Kvsum64Blocks(const uint8_t* data, uint64_t n, unsigned long long* sum) {
  const uint64_t gtid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t block = gtid / kLanes;
  const uint64_t nblocks = (n + kBlockBytes - 1) / kBlockBytes;
  Kvsum64AddBlockDigest(data, n, block, static_cast<int>(gtid % kLanes), block < nblocks, sum);
}

__global__ void Kvsum64Finish(unsigned long long* sum, uint64_t n) { *sum = Finish(*sum, n); }

}  // namespace

cudaError_t Kvsum64Async(const void* data, size_t n, uint64_t* out, cudaStream_t stream) {
  auto* sum = reinterpret_cast<unsigned long long*>(out);
  cudaError_t err = cudaMemsetAsync(sum, 0, sizeof(*sum), stream);
  if (err != cudaSuccess) return err;
  const uint64_t nblocks = (n + kBlockBytes - 1) / kBlockBytes;
  if (nblocks > 0) {
    const uint64_t threads = nblocks * kLanes;
    const unsigned grid = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
    Kvsum64Blocks<<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(data), n, sum);
  }
  Kvsum64Finish<<<1, 1, 0, stream>>>(sum, n);
  return cudaGetLastError();
}

}  // namespace kvferry::cuda
