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
  uint64_t S = 0, D = 0, m = 0;
  if (active) {
    const uint64_t start = block * kBlockBytes;
    m = min(static_cast<uint64_t>(kBlockBytes), n - start);
    const uint8_t* p = data + start;
    const uint32_t words = static_cast<uint32_t>(m / 8);
    const bool aligned = (reinterpret_cast<uintptr_t>(p) % 8) == 0;
    for (uint32_t j = lane; j < words; j += kLanes) {
      uint64_t w;
      if (aligned) {
        w = reinterpret_cast<const uint64_t*>(p)[j];
      } else {
        w = 0;
        for (int k = 0; k < 8; ++k) w |= static_cast<uint64_t>(p[8 * j + k]) << (8 * k);
      }
      S += Product(w, Key(j));
      D += w;
    }
    const uint64_t rem = m % 8;
    if (rem != 0 && static_cast<uint32_t>(lane) == words % kLanes) {
      const uint64_t t = TailWord(p + 8 * static_cast<uint64_t>(words), rem);
      S += Product(t, Key(words));
      D += t;
    }
  }
  // Lane l needs S of lane l and D of lane l ^ 1; then the first thread of the
  // group gathers all 8 accumulators.
  const unsigned mask = 0xffffffffu;
  const uint64_t acc = Seed(block, lane) + S + __shfl_xor_sync(mask, D, 1);
  uint64_t lanes[kLanes];
  const int base = (threadIdx.x % 32) & ~(kLanes - 1);
  for (int l = 0; l < kLanes; ++l) lanes[l] = __shfl_sync(mask, acc, base + l);
  if (active && lane == 0) atomicAdd(sum, static_cast<unsigned long long>(MergeLanes(lanes, m)));
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
