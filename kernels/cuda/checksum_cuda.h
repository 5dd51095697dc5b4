// kvsum64 on the GPU: same result as kvferry::Kvsum64 for the same bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvferry::cuda {

// Computes kvsum64 of n bytes of device memory `data` into *out (device memory),
// stream-ordered on `stream`; no allocation and no synchronisation.
cudaError_t Kvsum64Async(const void* data, size_t n, uint64_t* out, cudaStream_t stream);

}  // namespace kvferry::cuda
