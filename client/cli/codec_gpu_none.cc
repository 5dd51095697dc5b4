// Builds without nvcc: the CUDA codec is not there.
#include "client/cli/codec_gpu.h"

namespace kvferry::cli {

absl::StatusOr<size_t> GpuEncode(const codec::EncodeOptions&, const uint8_t*, size_t, uint8_t*, size_t, double*, int) {
  return absl::UnimplementedError("this kvferry was built without CUDA (no nvcc at build time); use --device=cpu");
}

absl::StatusOr<size_t> GpuDecode(const uint8_t*, size_t, uint8_t*, size_t, double*, int) {
  return absl::UnimplementedError("this kvferry was built without CUDA (no nvcc at build time); use --device=cpu");
}

absl::StatusOr<std::unique_ptr<GpuBuffer>> GpuBuffer::Create(int, size_t) {
  return absl::UnimplementedError("this kvferry was built without CUDA (no nvcc at build time): no GPU memory");
}
GpuBuffer::~GpuBuffer() = default;
absl::Status GpuBuffer::CopyIn(const uint8_t*, size_t) { return absl::UnimplementedError("no CUDA"); }
absl::Status GpuBuffer::CopyOut(uint8_t*, size_t) const { return absl::UnimplementedError("no CUDA"); }
absl::Status GpuBuffer::Zero() { return absl::UnimplementedError("no CUDA"); }

}  // namespace kvferry::cli
