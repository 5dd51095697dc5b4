#include "transport/pipeline/segments.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace kvferry::pipeline {

SegmentList::SegmentList(std::vector<Segment> segments) : segs_(std::move(segments)) {
  starts_.reserve(segs_.size());
  for (const auto& s : segs_) {
    starts_.push_back(total_);
    total_ += s.len;
  }
}

template <typename Fn>
void SegmentList::ForEachPiece(uint64_t off, size_t len, Fn fn) const {
  assert(off + len <= total_);
  // Last segment starting at or before off.
  size_t i = std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin() - 1;
  size_t done = 0;
  while (done < len) {
    const uint64_t in_seg = off + done - starts_[i];
    const size_t n = std::min<uint64_t>(segs_[i].len - in_seg, len - done);
    fn(segs_[i].data + in_seg, done, n);
    done += n;
    ++i;
  }
}

void SegmentList::Gather(uint64_t off, size_t len, uint8_t* dst, Kvsum64Builder* sum) const {
  if (len == 0) return;
  ForEachPiece(off, len, [&](const uint8_t* seg, size_t pos, size_t n) {
    std::memcpy(dst + pos, seg, n);
    if (sum != nullptr) sum->Update(pos + n);
  });
}

const uint8_t* SegmentList::Contiguous(uint64_t off, size_t len) const {
  if (len == 0) return nullptr;
  const uint8_t* start = nullptr;
  const uint8_t* next = nullptr;
  bool contiguous = true;
  ForEachPiece(off, len, [&](const uint8_t* seg, size_t, size_t n) {
    if (start == nullptr) {
      start = seg;
    } else if (seg != next) {
      contiguous = false;
    }
    next = seg + n;
  });
  return contiguous ? start : nullptr;
}

void SegmentList::Scatter(uint64_t off, size_t len, const uint8_t* src) const {
  if (len == 0) return;
  ForEachPiece(off, len, [&](uint8_t* seg, size_t pos, size_t n) { std::memcpy(seg, src + pos, n); });
}

std::vector<Segment> SegmentList::Pieces(uint64_t off, size_t len) const {
  std::vector<Segment> out;
  if (len == 0) return out;
  ForEachPiece(off, len, [&](uint8_t* seg, size_t, size_t n) {
    if (!out.empty() && out.back().data + out.back().len == seg) {
      out.back().len += n;
    } else {
      out.push_back({seg, n});
    }
  });
  return out;
}

}  // namespace kvferry::pipeline
