// `kvferry codec --device=cuda`: one chunk through the CUDA codec
// (kernels/cuda). Builds without CUDA answer UNIMPLEMENTED.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

// Device memory shared by CUDA IPC, for `kvferry bench --memory=gpu`: the
// bench plays the GPU worker that owns the KV cache.
class GpuBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<GpuBuffer>> Create(int device, size_t bytes);
  ~GpuBuffer();
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  const std::string& ipc_handle() const { return handle_; }  // cudaIpcMemHandle_t bytes
  const std::string& pci_bus_id() const { return bus_id_; }
  absl::Status CopyIn(const uint8_t* host, size_t n);
  absl::Status CopyOut(uint8_t* host, size_t n) const;
  absl::Status Zero();

 private:
  GpuBuffer() = default;
  int device_ = 0;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  std::string handle_, bus_id_;
};

}  // namespace kvferry::cli
