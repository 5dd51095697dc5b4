#include "common/kv_layout.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"

namespace kvferry {

uint32_t DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_BF16:
    case v1::DTYPE_FP16:
      return 2;
    case v1::DTYPE_FP32:
      return 4;
    case v1::DTYPE_FP8_E4M3:
    case v1::DTYPE_FP8_E5M2:
    case v1::DTYPE_BYTES:
      return 1;
    default:
      return 0;
  }
}

absl::StatusOr<Geometry> MakeGeometry(const v1::KvLayout& l, uint32_t num_blocks) {
  auto bad = [](const char* field, uint64_t v, uint64_t lo, uint64_t hi) {
    return absl::InvalidArgumentError(absl::StrFormat("%s = %d not in [%d, %d]", field, v, lo, hi));
  };
  if (l.num_layers() < 1 || l.num_layers() > kMaxLayers) return bad("layout.num_layers", l.num_layers(), 1, kMaxLayers);
  if (l.kv_planes() < 1 || l.kv_planes() > 2) return bad("layout.kv_planes", l.kv_planes(), 1, 2);
  if (l.block_tokens() < 1 || l.block_tokens() > kMaxDim)
    return bad("layout.block_tokens", l.block_tokens(), 1, kMaxDim);
  if (l.num_heads() < 1 || l.num_heads() > kMaxDim) return bad("layout.num_heads", l.num_heads(), 1, kMaxDim);
  if (l.head_dim() < 1 || l.head_dim() > kMaxDim) return bad("layout.head_dim", l.head_dim(), 1, kMaxDim);
  if (num_blocks < 1 || num_blocks > kMaxBlocks) return bad("num_blocks", num_blocks, 1, kMaxBlocks);
  const uint32_t es = DTypeSize(l.dtype());
  if (es == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("layout.dtype %d is not a supported dtype", l.dtype()));
  }
  // Each factor is < 2^16 or small, so these products cannot overflow 64 bits
  // before the limit checks below.
  Geometry g;
  g.layers = l.num_layers();
  g.planes = l.kv_planes();
  g.num_blocks = num_blocks;
  g.segment_bytes = uint64_t{l.block_tokens()} * l.num_heads() * l.head_dim() * es;
  if (g.segment_bytes > kMaxSegmentBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("segment of %d bytes exceeds the %d-byte limit", g.segment_bytes, kMaxSegmentBytes));
  }
  const uint64_t segments = uint64_t{g.layers} * g.planes * num_blocks;  // < 2^37
  if (segments > kMaxRegionBytes / g.segment_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat("pool region exceeds %d bytes", kMaxRegionBytes));
  }
  g.region_bytes = segments * g.segment_bytes;
  return g;
}

std::vector<uint64_t> Geometry::StreamOffsets(const std::vector<uint32_t>& blocks) const {
  std::vector<uint64_t> out;
  out.reserve(uint64_t{layers} * planes * blocks.size());
  for (uint32_t l = 0; l < layers; ++l) {
    for (uint32_t p = 0; p < planes; ++p) {
      for (uint32_t b : blocks) out.push_back(SegmentOffset(l, p, b));
    }
  }
  return out;
}

absl::Status ValidateBlockIds(const std::vector<uint32_t>& ids, uint32_t num_blocks) {
  if (ids.empty()) return absl::InvalidArgumentError("block_ids is empty");
  if (ids.size() > num_blocks) {
    return absl::InvalidArgumentError(absl::StrFormat("%d block ids for a pool of %d blocks", ids.size(), num_blocks));
  }
  absl::flat_hash_set<uint32_t> seen;
  seen.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= num_blocks) {
      return absl::OutOfRangeError(
          absl::StrFormat("block_ids[%d] = %d out of range (pool has %d blocks)", i, ids[i], num_blocks));
    }
    if (!seen.insert(ids[i]).second) {
      return absl::InvalidArgumentError(absl::StrFormat("block_ids[%d] = %d is duplicated", i, ids[i]));
    }
  }
  return absl::OkStatus();
}

bool SameLayout(const v1::KvLayout& a, const v1::KvLayout& b) {
  return a.num_layers() == b.num_layers() && a.kv_planes() == b.kv_planes() && a.block_tokens() == b.block_tokens() &&
         a.num_heads() == b.num_heads() && a.head_dim() == b.head_dim() && a.dtype() == b.dtype();
}

std::string LayoutString(const v1::KvLayout& l) {
  return absl::StrFormat("%d layers x %d planes x %d tokens x %d heads x %d dims, %s", l.num_layers(), l.kv_planes(),
                         l.block_tokens(), l.num_heads(), l.head_dim(), v1::DType_Name(l.dtype()));
}

}  // namespace kvferry
