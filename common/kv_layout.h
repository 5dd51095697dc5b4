// KV pool geometry shared by the daemon and the SDK: element sizes, segment
// and region sizes with overflow and limit checks, segment addressing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvferry/v1/common.pb.h"

namespace kvferry {

// Bytes per element; 0 for DTYPE_UNSPECIFIED or unknown values.
uint32_t DTypeSize(v1::DType dtype);

// Limits on registrations (documented in docs/architecture.md).
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxDim = 1u << 16;  // block_tokens, num_heads, head_dim
constexpr uint64_t kMaxSegmentBytes = 1ull << 30;
constexpr uint64_t kMaxRegionBytes = 1ull << 44;  // 16 TiB
constexpr uint32_t kMaxBlocks = 1u << 24;

struct Geometry {
  uint32_t layers = 0, planes = 0, num_blocks = 0;
  uint64_t segment_bytes = 0;
  uint64_t region_bytes = 0;

  // Byte offset of (layer, plane, block) from the pool base.
  uint64_t SegmentOffset(uint32_t layer, uint32_t plane, uint32_t block) const {
    return ((static_cast<uint64_t>(layer) * planes + plane) * num_blocks + block) * segment_bytes;
  }
  // Transfer stream order: layer-major, then plane, then the listed blocks.
  std::vector<uint64_t> StreamOffsets(const std::vector<uint32_t>& blocks) const;
};

// Checks the layout and the block count; INVALID_ARGUMENT with the field named.
absl::StatusOr<Geometry> MakeGeometry(const v1::KvLayout& layout, uint32_t num_blocks);

// Block ids must be non-empty, unique and < num_blocks.
absl::Status ValidateBlockIds(const std::vector<uint32_t>& ids, uint32_t num_blocks);

// True if two layouts describe the same bytes per segment and order.
bool SameLayout(const v1::KvLayout& a, const v1::KvLayout& b);

std::string LayoutString(const v1::KvLayout& l);

}  // namespace kvferry
