// A transfer's byte stream as a list of contiguous memory segments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/checksum.h"

namespace kvferry::pipeline {

struct Segment {
  uint8_t* data = nullptr;
  size_t len = 0;
};

class SegmentList {
 public:
  SegmentList() = default;
  explicit SegmentList(std::vector<Segment> segments);

  uint64_t total() const { return total_; }
  size_t size() const { return segs_.size(); }

  // Copies stream bytes [off, off+len) into dst; if `sum` is given, hashes the
  // copied bytes piece by piece while they are hot in cache.
  void Gather(uint64_t off, size_t len, uint8_t* dst, Kvsum64Builder* sum) const;
  // If stream bytes [off, off+len) are one contiguous range of memory, its
  // start; otherwise nullptr.
  const uint8_t* Contiguous(uint64_t off, size_t len) const;
  // Copies src into stream bytes [off, off+len).
  void Scatter(uint64_t off, size_t len, const uint8_t* src) const;
  // The memory ranges holding stream bytes [off, off+len), in order, with
  // adjacent ranges merged (for copies the caller issues itself, e.g. on a GPU).
  std::vector<Segment> Pieces(uint64_t off, size_t len) const;

 private:
  template <typename Fn>
  void ForEachPiece(uint64_t off, size_t len, Fn fn) const;

  std::vector<Segment> segs_;
  std::vector<uint64_t> starts_;  // stream offset of each segment
  uint64_t total_ = 0;
};

}  // namespace kvferry::pipeline
