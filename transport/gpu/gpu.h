// GPU memory for the data plane: workers' KV pools opened by CUDA IPC handle,
// pinned staging, and the per-chunk work the engine does on GPU pools
// (gather, encode, decode, scatter). Built with the CUDA toolkit when it is
// present (gpu_cuda.cc); otherwise every entry point returns UNIMPLEMENTED
// (gpu_none.cc), and the daemon serves host pools only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/codec.h"

namespace kvferry::gpu {

// Whether this build has CUDA (it may still find no device at run time).
bool BuiltWithCuda();

constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

// "0000:65:00.0" (PCI bus id, as nvidia-smi prints it; the same in every
// process whatever CUDA_VISIBLE_DEVICES says) or a device ordinal ("0").
absl::StatusOr<int> ResolveDevice(absl::string_view device);

// A worker's device allocation opened in this process by its CUDA IPC handle.
// base() is where the handle's allocation starts; size() is its length, so
// that callers can bound-check offsets against it. Closed on destruction.
class IpcMapping {
 public:
  static absl::StatusOr<std::unique_ptr<IpcMapping>> Open(absl::string_view handle, int device);
  ~IpcMapping();
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }

 private:
  IpcMapping() = default;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  int device_ = -1;
};

// Page-locks host memory so copies to and from the GPU run asynchronously at
// full speed. Unpinned on destruction.
class PinnedRange {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedRange>> Pin(void* data, size_t bytes);
  ~PinnedRange();
  PinnedRange(const PinnedRange&) = delete;
  PinnedRange& operator=(const PinnedRange&) = delete;

 private:
  PinnedRange() = default;
  void* data_ = nullptr;
};

// Device memory of the data plane's own (direct transfers' staging slots),
// allocated once on `device`; freed on destruction.
class DeviceBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int device, uint64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  DeviceBuffer() = default;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  int device_ = -1;
};

// A range of device memory.
struct DeviceRange {
  uint8_t* data = nullptr;
  uint64_t len = 0;
};

// Chunk work on one device with its own stream and preallocated buffers. Each
// call enqueues its copies and kernels and waits for that stream only (never
// a device-wide sync, never an allocation); one worker serves one thread.
class ChunkWorker {
 public:
  static absl::StatusOr<std::unique_ptr<ChunkWorker>> Create(int device, uint64_t max_chunk_bytes);
  ~ChunkWorker();
  ChunkWorker(const ChunkWorker&) = delete;
  ChunkWorker& operator=(const ChunkWorker&) = delete;

  int device() const { return device_; }
  // Device memory this worker holds (buffers and codec workspaces).
  uint64_t device_bytes() const;

  // Copies the device ranges, concatenated, into host memory.
  absl::Status ToHost(const std::vector<DeviceRange>& src, uint8_t* host);
  // Copies host memory into the device ranges, in order.
  absl::Status FromHost(const uint8_t* host, const std::vector<DeviceRange>& dst);
  // Encodes the device ranges (concatenated, `len` bytes) with the CUDA codec
  // (the same bytes as the CPU codec) and copies the chunk into host `out`
  // (capacity >= codec::MaxEncodedBytes(len)). Returns the chunk size; a
  // chunk that is not smaller than `len` is not copied (send the raw bytes).
  // With options.on_raw_plane (split-send; capacity >= MaxSplitEncodedBytes):
  // the raw plane reaches out + 64 while the exponents are still being coded
  // and the hook is called then, on this thread; if it takes the plane, the
  // chunk is copied whatever its size (it is never STORED).
  absl::StatusOr<uint64_t> Encode(const codec::EncodeOptions& options, const std::vector<DeviceRange>& src,
                                  uint64_t len, uint8_t* out);
  // Decodes the codec chunk at host `in` into a device buffer; only when the
  // chunk decoded to exactly `raw_len` bytes whose kvsum64 matches its header
  // does it copy them into the device ranges. DATA_LOSS otherwise, with
  // nothing written.
  absl::Status Decode(const uint8_t* in, uint64_t in_len, const std::vector<DeviceRange>& dst, uint64_t raw_len);

  // Direct transfers (a transport that carries GPU memory): the chunk lives
  // in device memory `dev` of this worker's GPU instead of host staging.
  // Gathers the device ranges, concatenated, into `dev`.
  absl::Status Gather(const std::vector<DeviceRange>& src, uint8_t* dev);
  // Encode, writing the chunk to `dev` (capacity >= codec::MaxEncodedBytes(len));
  // returns its size, which is >= len when the chunk did not shrink (then send
  // the raw bytes).
  absl::StatusOr<uint64_t> EncodeInto(const codec::EncodeOptions& options, const std::vector<DeviceRange>& src,
                                      uint64_t len, uint8_t* dev);
  // kvsum64 of `len` bytes at `dev`.
  absl::StatusOr<uint64_t> Checksum(const uint8_t* dev, uint64_t len);
  // Copies host bytes to `dev`.
  absl::Status CopyIn(const uint8_t* host, uint64_t len, uint8_t* dev);
  // Decode for a chunk already in device memory, with the same checks and
  // guarantee (nothing written unless verified).
  absl::Status DecodeFrom(const uint8_t* dev, uint64_t in_len, const std::vector<DeviceRange>& dst, uint64_t raw_len);
  // Copies `dev`, in order, into the device ranges.
  absl::Status Scatter(const uint8_t* dev, const std::vector<DeviceRange>& dst);

 private:
  struct Impl;
  explicit ChunkWorker(std::unique_ptr<Impl> impl, int device);
  std::unique_ptr<Impl> impl_;
  int device_;
};

}  // namespace kvferry::gpu
