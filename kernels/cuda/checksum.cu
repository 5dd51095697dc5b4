#include "kernels/checksum_core.h"
#include "kernels/cuda/checksum_cuda.h"

namespace kvferry::cuda {
namespace {

using namespace kvferry::checksum;  // NOLINT

constexpr int kThreads = 256;  // 32 checksum blocks per CUDA block

// 8 consecutive threads own one 4 KiB checksum block, one lane each.
__global__ void Kvsum64Blocks(const uint8_t* data, uint64_t n, unsigned long long* sum) {
  const uint64_t gtid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t block = gtid / kLanes;
  const int lane = static_cast<int>(gtid % kLanes);
  const uint64_t nblocks = (n + kBlockBytes - 1) / kBlockBytes;
  const bool active = block < nblocks;
  uint64_t acc = Seed(block, lane);
  uint64_t m = 0;
  if (active) {
    const uint64_t start = block * kBlockBytes;
    m = min(static_cast<uint64_t>(kBlockBytes), n - start);
    const uint8_t* p = data + start;
    const uint64_t words = m / 8;
    const bool aligned = (reinterpret_cast<uintptr_t>(p) % 8) == 0;
    for (uint64_t j = lane; j < words; j += kLanes) {
      uint64_t w;
      if (aligned) {
        w = reinterpret_cast<const uint64_t*>(p)[j];
      } else {
        w = 0;
        for (int k = 0; k < 8; ++k) w |= static_cast<uint64_t>(p[8 * j + k]) << (8 * k);
      }
      acc = Round(acc, w);
    }
    const uint64_t rem = m % 8;
    if (rem != 0 && static_cast<uint64_t>(lane) == words % kLanes) {
      acc = Round(acc, TailWord(p + 8 * words, rem));
    }
  }
  // Gather the 8 lanes of this checksum block into its first thread.
  uint64_t lanes[kLanes];
  const unsigned mask = 0xffffffffu;
  const int base = (threadIdx.x % 32) & ~(kLanes - 1);
  for (int l = 0; l < kLanes; ++l) lanes[l] = __shfl_sync(mask, acc, base + l);
  if (active && lane == 0) atomicAdd(sum, static_cast<unsigned long long>(MergeLanes(lanes, m)));
}

__global__ void Kvsum64Finish(unsigned long long* sum, uint64_t n) {
  *sum = Finish(*sum, n);
}

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
