// The codec seam: lossless compression of one chunk of KV-cache elements
// (format: docs/codec-format.md). Implementations: kernels/cpu (reference,
// multithreaded, the bit-exact oracle); kernels/cuda (next) must produce the
// same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "kernels/codec_plan.h"

namespace kvferry::codec {

enum class DType : uint8_t { kBF16 = 1, kFP16 = 2, kFP32 = 3, kFP8E4M3 = 4, kFP8E5M2 = 5, kBytes = 6 };

struct DTypeInfo {
  uint32_t bytes;     // element size
  uint32_t exp_bits;  // E: entropy-coded symbol width
  uint32_t raw_bits;  // W: sign + mantissa, stored raw
};

// INVALID_ARGUMENT for values outside the enum.
absl::StatusOr<DTypeInfo> Info(DType dtype);
absl::StatusOr<DType> ParseDType(const char* name);  // "bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2", "bytes"
const char* DTypeName(DType dtype);

// KV block layout of the chunk: tokens x heads x head_dim elements per
// token-major block; channel = head * head_dim + dim. Zeros: no hint.
struct Layout {
  uint32_t tokens = 0, heads = 0, head_dim = 0;
  uint64_t channels() const { return uint64_t{heads} * head_dim; }
};

constexpr size_t kHeaderBytes = 64;
constexpr uint8_t kFormatVersion = plan::kFormatVersion;  // docs/codec-format.md
constexpr size_t kMaxTileSymbols = size_t{1} << plan::kMaxTileLog2;
constexpr uint32_t kProbBits = plan::kProbBits;
constexpr uint32_t kMaxTables = 16;

// An order-0 frequency table as a chunk stores it (docs/codec-format.md):
// frequencies of the 256 symbols, summing to 256 (8-bit probabilities).
struct FrequencyTable {
  uint16_t freq[256] = {0};
};

struct EncodeOptions {
  DType dtype = DType::kBF16;
  Layout layout;
  // With a layout hint, let the encoder code channel groups with their own
  // tables when that is smaller (KV-aware mode).
  bool channel_groups = true;
  // Worker threads; 0 picks min(hardware threads, 8).
  int threads = 0;
  // Split-send. When set, it is called once, on the encoding thread, as soon
  // as the raw plane is final at out + kHeaderBytes (raw_plane_bytes long)
  // and before any exponent is coded, with the encoder's estimate of the
  // chunk's size. Returning true takes the plane (e.g. puts it on the wire):
  // the encoder then never falls back to STORED, so the plane stays part of
  // the chunk, which may then be slightly larger than the input (see
  // MaxSplitEncodedBytes). Not called when there is no raw plane (opaque
  // bytes, empty or tiny chunks).
  std::function<bool(uint64_t raw_plane_bytes, uint64_t estimated_bytes)> on_raw_plane;
  // Symbols per tile, log2. 0 picks plan::TileLog2, as every kvferry encoder
  // does; 12, 13 or 14 force that size, which every decoder must accept
  // (tests use it to make chunks other encoders could write). Refused with
  // on_raw_plane where tiles would cover less than 8 KiB of input
  // (MaxSplitEncodedBytes counts on them never doing so).
  uint32_t tile_log2 = 0;
  // Table reuse: when set, the exponents are coded with this table instead
  // of one counted from the input (no counting pass; TableOf gives a coded
  // chunk's table), and the chunk stores it as its own. A tile holding a
  // symbol the table lacks is RAW. Implies order-0 (no channel groups); not
  // with on_raw_plane. The CUDA encoder's EncodeReusingTablesAsync writes
  // the same bytes.
  const FrequencyTable* table = nullptr;
};

// The order-0 table of a coded chunk (one table, not STORED), for
// EncodeOptions::table. Checks the chunk as Inspect does.
absl::StatusOr<FrequencyTable> TableOf(const void* chunk, size_t chunk_bytes);

// Largest chunk Encode can produce for `input_bytes` (the header + input).
constexpr size_t MaxEncodedBytes(size_t input_bytes) { return kHeaderBytes + input_bytes; }

// Largest chunk once on_raw_plane has taken the plane: the header, the input,
// the largest map and tables, and per tile its directory entry and padding.
// Encode needs this capacity whenever on_raw_plane is set.
constexpr size_t MaxSplitEncodedBytes(size_t input_bytes) { return plan::MaxSplitChunkBytes(input_bytes); }

// Encodes in[0, in_bytes) into out (capacity >= MaxEncodedBytes(in_bytes)).
// Returns the chunk size.
absl::StatusOr<size_t> Encode(const EncodeOptions& options, const void* in, size_t in_bytes, void* out,
                              size_t out_capacity);

struct ChunkInfo {
  DType dtype = DType::kBF16;
  uint64_t elements = 0;
  Layout layout;
  bool stored = false;
  bool channel_groups = false;
  uint32_t tables = 0;
  uint32_t tile_log2 = 0;  // symbols per tile, log2 (0 when stored)
  uint32_t tiles = 0;
  uint32_t raw_tiles = 0;
  uint64_t raw_plane_bytes = 0;
  uint64_t chunk_bytes = 0;     // header + payload
  uint64_t original_bytes = 0;  // elements x element size
  uint64_t checksum = 0;
};

// Parses and checks a chunk's header and directory (not its tiles).
absl::StatusOr<ChunkInfo> Inspect(const void* in, size_t in_bytes);

// Decodes a whole chunk into out (capacity >= the original size); verifies
// everything, including the kvsum64 of the result. Returns bytes written.
absl::StatusOr<size_t> Decode(const void* in, size_t in_bytes, void* out, size_t out_capacity, int threads = 0);

// Tests and benchmarks: turn the CPU's SIMD paths off (or back on) to check
// that they give the same results as the scalar code.
void SetSimdForTesting(bool enabled);

// Order-0 entropy bound of `in` as the codec sees it: bits of the exponent
// symbols at their empirical entropy plus the raw plane, in bytes.
absl::StatusOr<double> Order0BoundBytes(DType dtype, const void* in, size_t in_bytes);

}  // namespace kvferry::codec
