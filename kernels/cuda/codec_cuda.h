// CUDA decoder for kvferry codec chunks (docs/codec-format.md): decodes a batch
// of chunks that are in device memory, stream-ordered, with no allocation and
// no synchronisation per call (the workspace is sized at creation). Output
// equals the CPU reference's for every chunk; a chunk that fails any check,
// including the kvsum64 of its decoded bytes, gets a non-zero status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace kvferry::codec::cuda {

struct DeviceChunk {
  const uint8_t* data = nullptr;  // the encoded chunk (device memory)
  uint64_t bytes = 0;
  uint8_t* out = nullptr;  // destination (device memory)
  uint64_t out_capacity = 0;
};

// Per-chunk result codes written by DecodeAsync (0 = OK).
enum DecodeStatus : int32_t {
  kOk = 0,
  kBadHeader = 1,
  kTooLarge = 2,  // more elements or tiles than the decoder was sized for
  kOutputTooSmall = 3,
  kBadSection = 4,  // tables, map, directory or sizes inconsistent
  kBadTile = 5,     // rANS stream or raw tile inconsistent
  kChecksum = 6,    // decoded bytes do not match the header's kvsum64
};
absl::Status ToStatus(int32_t code);

class Decoder {
 public:
  // Sized for up to `max_chunks` per call, each of at most `max_chunk_bytes`
  // decoded bytes. Allocates its workspace once.
  static absl::StatusOr<std::unique_ptr<Decoder>> Create(int max_chunks, uint64_t max_chunk_bytes);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // chunks: device array of `count` DeviceChunk; status: device array of
  // `count` int32 (DecodeStatus). Returns launch errors only.
  cudaError_t DecodeAsync(const DeviceChunk* chunks, int count, int32_t* status, cudaStream_t stream);

 private:
  Decoder() = default;
  int max_chunks_ = 0;
  uint64_t max_chunk_bytes_ = 0;
  uint32_t max_tiles_ = 0;
  void* workspace_ = nullptr;
};

}  // namespace kvferry::codec::cuda
