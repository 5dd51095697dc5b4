// Builds without nvcc: the CUDA codec is not there.
#include "client/cli/codec_gpu.h"

namespace kvferry::cli {

absl::StatusOr<size_t> GpuEncode(const codec::EncodeOptions&, const uint8_t*, size_t, uint8_t*, size_t, double*, int) {
  return absl::UnimplementedError("this kvferry was built without CUDA (no nvcc at build time); use --device=cpu");
}

absl::StatusOr<size_t> GpuDecode(const uint8_t*, size_t, uint8_t*, size_t, double*, int) {
  return absl::UnimplementedError("this kvferry was built without CUDA (no nvcc at build time); use --device=cpu");
}

}  // namespace kvferry::cli
