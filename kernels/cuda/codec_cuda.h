// CUDA encoder and decoder for kvferry codec chunks (docs/codec-format.md).
// Both work on a batch of chunks in device memory per call, stream-ordered,
// with no allocation and no synchronisation per call (workspaces are sized at
// creation). The encoder produces the same bytes as the CPU reference
// (kernels/cpu/codec.cc); the decoder accepts any valid chunk and gives a
// chunk that fails any check, including the kvsum64 of its decoded bytes, a
// non-zero status. Uncompressed data may be one buffer or a list of equal
// blocks (a paged KV cache): the encoder gathers from the blocks and the
// decoder scatters into them, with no staging copy.
//
// A call's kernels are launched as one CUDA graph, recorded by the first
// call with the same arguments (device pointers, count, flags; at most 16
// such graphs a coder, the least recently used dropped) and replayed by the
// later ones: callers that keep their descriptor arrays pay the recording
// once (kernels/cuda/call_graphs.h). Calls on a stream that is being
// captured launch their kernels into that capture instead.
// KVFERRY_CUDA_GRAPHS=0 in the environment launches every call's kernels one
// by one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace kvferry::codec::cuda {

class CallGraphs;
// Call graphs a coder holds at most (CallGraphs::kMaxGraphs).
constexpr size_t CallGraphsHeld = 16;

// Uncompressed bytes in device memory: `data` (one buffer), or, when `blocks`
// is set, the concatenation of `count` blocks of `block_bytes` each (a device
// array of block pointers). Pointers are 16-byte aligned; block_bytes is a
// multiple of 64 below 2^32.
struct DeviceBlocks {
  uint8_t* data = nullptr;
  uint8_t* const* blocks = nullptr;
  uint32_t count = 0;
  uint64_t block_bytes = 0;
};

struct DeviceChunk {
  const uint8_t* data = nullptr;  // the encoded chunk (device memory, any address)
  uint64_t bytes = 0;
  DeviceBlocks out;  // destination
  uint64_t out_capacity = 0;
};

struct EncodeChunk {
  DeviceBlocks in;  // source
  uint64_t bytes = 0;  // input bytes, a whole number of elements
  uint8_t dtype = 1;   // codec::DType
  uint8_t channel_groups = 1;  // KV-aware mode when a layout is given
  uint32_t tokens = 0, heads = 0, head_dim = 0;  // layout hint (0: none)
  // The chunk: device memory, at any address, >= 64 + bytes.
  uint8_t* out = nullptr;
  uint64_t out_capacity = 0;
  // 0: never STORED once coding has started, unless there is no raw plane
  // (split-send, where the raw plane may already be on the wire):
  // out_capacity >= codec::MaxSplitEncodedBytes. The bytes equal the CPU
  // encoder's when its on_raw_plane takes the plane.
  uint8_t allow_stored = 1;
};

// Split-send: EncodeAsync records `planned` on its stream once every chunk's
// raw plane is final (at out + 64) and its tables are chosen, before any
// exponent is coded, and writes each chunk's estimated size
// (codec::plan::EstimatedChunkBytes; 0 when the chunk will be STORED or
// failed) into the device array `estimates`.
struct SplitPoint {
  cudaEvent_t planned = nullptr;
  uint64_t* estimates = nullptr;
};

// Per-chunk result codes written by DecodeAsync (0 = OK).
enum DecodeStatus : int32_t {
  kOk = 0,
  kBadHeader = 1,
  kTooLarge = 2,  // more elements or tiles than the decoder was sized for
  kOutputTooSmall = 3,
  kBadSection = 4,  // tables, map, directory or sizes inconsistent
  kBadTile = 5,     // a tile out of place, its rANS stream or raw bits inconsistent
  kChecksum = 6,    // decoded bytes do not match the header's kvsum64
  kBadInput = 7,    // encoder: bad dtype, size, capacity, layout or block list
  kNoTable = 8,     // encoder, table reuse: the chunk's slot holds no order-0 table to reuse
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
  uint64_t workspace_bytes() const { return workspace_bytes_; }
  // Call graphs held (see the top of this file).
  size_t graphs() const;

 private:
  Decoder() = default;
  uint64_t workspace_bytes_ = 0;
  int max_chunks_ = 0;
  uint64_t max_chunk_bytes_ = 0;
  uint32_t max_tiles_ = 0;
  int sms_ = 1;       // of the device the decoder was created on
  int resident_ = 1;  // Decode blocks resident at once on it
  void* workspace_ = nullptr;
  std::unique_ptr<CallGraphs> graphs_;
};

// Encodes a batch of chunks per call.
class Encoder {
 public:
  // Sized for up to `max_chunks` per call, each of at most `max_chunk_bytes`
  // input bytes. Allocates its workspace (about 3 bytes per input byte) once.
  static absl::StatusOr<std::unique_ptr<Encoder>> Create(int max_chunks, uint64_t max_chunk_bytes);
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // chunks: device array of `count` EncodeChunk; sizes: device array of
  // `count` uint64 (chunk bytes written); status: device array of `count`
  // int32 (DecodeStatus codes; 0 = OK). Returns launch errors only.
  // channel_groups = false promises that no chunk of the call asks for
  // KV-aware mode (channel_groups set, with a layout it could use): the call
  // then skips the two kernels that rank and group channels, and a chunk
  // that does ask fails with kBadInput rather than being coded otherwise
  // than the CPU would code it. one_pass_only = true (with channel_groups
  // false and no split point, for an encoder sized for one-pass chunks, else
  // cudaErrorInvalidValue) promises that every chunk takes the one-pass path:
  // bf16 without channel groups, at least plan::kSampleMinElements elements,
  // bytes a multiple of 4096, out + 64 8-byte aligned. The call then skips
  // the Tiles kernel of the other chunks (about 3 us at 64 MiB on an H100);
  // a chunk that does not fails with kBadInput. dtype (a codec::DType
  // code, else 0; above kBytes: cudaErrorInvalidValue) promises that every
  // chunk of the call is of that dtype: a call of few tiles then runs a
  // Tiles kernel that holds that dtype's code alone, which is faster (on an
  // H200, one 4 MiB chunk 0.6-0.9 us for bf16, 0.5-1.4 us for fp16 and fp8;
  // docs/performance.md); a chunk of another dtype fails with kBadInput.
  cudaError_t EncodeAsync(const EncodeChunk* chunks, int count, uint64_t* sizes, int32_t* status, cudaStream_t stream,
                          const SplitPoint* split = nullptr, bool channel_groups = true, bool one_pass_only = false,
                          uint8_t dtype = 0);

  // Table reuse: as EncodeAsync, but chunk k of the call is coded with the
  // order-0 table that chunk k of this encoder's last EncodeAsync with a
  // chunk k chose,
  // stored in the chunk as its own, instead of counting its symbols and
  // choosing one. A tile holding a symbol the table lacks is RAW. The call
  // then runs three kernels, one of them a single pass over the input (raw
  // plane, checksum and coding together), against four or more. The bytes
  // equal the CPU's with EncodeOptions::table set to that table
  // (codec::TableOf of that earlier chunk). Each request must be bf16 in
  // whole 4 KiB blocks (bytes a multiple of 4096, > 0), with out + 64 8-byte
  // aligned and allow_stored set, else it fails with kBadInput; a chunk asking
  // for channel groups is coded order-0. A slot whose last EncodeAsync chose
  // channel-group tables, stored or failed the chunk, or that has had none,
  // fails with kNoTable. Reuse calls leave the slots' tables as they are.
  cudaError_t EncodeReusingTablesAsync(const EncodeChunk* chunks, int count, uint64_t* sizes, int32_t* status,
                                       cudaStream_t stream);
  uint64_t workspace_bytes() const { return workspace_bytes_; }
  // Call graphs held (see the top of this file).
  size_t graphs() const;

 private:
  Encoder() = default;
  uint64_t workspace_bytes_ = 0;
  int max_chunks_ = 0;
  uint64_t max_chunk_bytes_ = 0;
  uint32_t max_tiles_ = 0;
  int sms_ = 1;  // of the device the encoder was created on
  uint64_t l2_bytes_ = 0;  // its L2 cache
  void* workspace_ = nullptr;
  std::unique_ptr<CallGraphs> graphs_;
};

}  // namespace kvferry::codec::cuda
