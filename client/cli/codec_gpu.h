// `kvferry codec --device=cuda`: one chunk through the CUDA codec
// (kernels/cuda). Builds without CUDA answer UNIMPLEMENTED.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/codec.h"

namespace kvferry::cli {

// Encodes in[0, n) on the GPU into out (capacity >= MaxEncodedBytes(n)); the
// bytes equal the CPU encoder's. If `seconds` is set, also times `reps` more
// encodes of the device-resident input (CUDA events; median).
absl::StatusOr<size_t> GpuEncode(const codec::EncodeOptions& o, const uint8_t* in, size_t n, uint8_t* out, size_t cap,
                                 double* seconds = nullptr, int reps = 5);

// Decodes one chunk on the GPU into out (capacity >= its original size),
// verified by its kvsum64. `seconds` as above.
absl::StatusOr<size_t> GpuDecode(const uint8_t* in, size_t n, uint8_t* out, size_t cap, double* seconds = nullptr,
                                 int reps = 5);

}  // namespace kvferry::cli
