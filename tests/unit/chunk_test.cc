#include "transport/chunk.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kvferry::transport {
namespace {

std::vector<uint8_t> Header(const ChunkHeader& h) {
  std::vector<uint8_t> m(kChunkHeaderBytes, 0xAB);
  EncodeChunkHeader(h, m.data());
  return m;
}

TEST(ChunkHeader, RoundTrips) {
  ChunkHeader h{0x1122334455667788ull, 3, 9, 3 * 4096, 100, 0xdeadbeefcafef00dull};
  auto m = Header(h);
  auto p = ParseChunkHeader(m.data(), m.size(), 100);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->transfer_id, h.transfer_id);
  EXPECT_EQ(p->seq, 3u);
  EXPECT_EQ(p->chunk_count, 9u);
  EXPECT_EQ(p->offset, h.offset);
  EXPECT_EQ(p->length, 100u);
  EXPECT_EQ(p->checksum, h.checksum);
}

TEST(ChunkHeader, RejectsMalformed) {
  ChunkHeader h{7, 0, 1, 0, 16, 0};
  auto good = Header(h);
  EXPECT_TRUE(ParseChunkHeader(good.data(), good.size(), 16).ok());

  for (size_t n = 0; n < kChunkHeaderBytes; ++n) {
    EXPECT_EQ(ParseChunkHeader(good.data(), n, 16).status().code(), absl::StatusCode::kDataLoss);
  }
  auto longer = good;
  longer.push_back(0);
  EXPECT_FALSE(ParseChunkHeader(longer.data(), longer.size(), 16).ok());
  EXPECT_FALSE(ParseChunkHeader(nullptr, kChunkHeaderBytes, 16).ok());

  auto bad = good;
  bad[0] ^= 1;  // magic
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size(), 16).ok());
  bad = good;
  bad[4] = 1;  // version 1: the header and payload messages meant something else
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size(), 16).ok());
  bad = good;
  bad[6] = 4;  // an undefined flag
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size(), 16).ok());
  bad = good;
  bad[6] = kChunkSplit;  // SPLIT without ENCODED
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size(), 16).ok());
  bad = good;
  bad[7] = 0x80;
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size(), 16).ok());
  bad = good;
  bad[6] = kChunkEncoded;  // the one defined flag round-trips
  auto encoded = ParseChunkHeader(bad.data(), bad.size(), 16);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(encoded->flags, kChunkEncoded);

  auto zero_id = Header(ChunkHeader{0, 0, 1, 0, 16, 0});
  EXPECT_FALSE(ParseChunkHeader(zero_id.data(), zero_id.size(), 16).ok());
  auto tagged_id = Header(ChunkHeader{PayloadTag(7), 0, 1, 0, 16, 0});
  EXPECT_FALSE(ParseChunkHeader(tagged_id.data(), tagged_id.size(), 16).ok());
  auto seq_past = Header(ChunkHeader{7, 1, 1, 0, 16, 0});
  EXPECT_FALSE(ParseChunkHeader(seq_past.data(), seq_past.size(), 16).ok());
  // Length disagreeing with the payload that arrived, both ways.
  EXPECT_FALSE(ParseChunkHeader(good.data(), good.size(), 15).ok());
  EXPECT_FALSE(ParseChunkHeader(good.data(), good.size(), 17).ok());
  auto huge = Header(ChunkHeader{7, 0, 1, 0, ~0ull, 0});
  EXPECT_FALSE(ParseChunkHeader(huge.data(), huge.size(), 16).ok());
}

// A split chunk's header message carries the codec chunk's tail: its length
// counts payload and tail, and the tail must hold at least a codec header.
TEST(ChunkHeader, SplitChunksCountTheirTail) {
  const uint16_t split = kChunkEncoded | kChunkSplit;
  auto m = Header(ChunkHeader{7, 0, 1, 0, 1000 + 100, 0, split});
  m.resize(kChunkHeaderBytes + 100, 0);
  auto p = ParseChunkHeader(m.data(), m.size(), 1000);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->flags, split);
  EXPECT_EQ(p->length, 1100u);
  EXPECT_FALSE(ParseChunkHeader(m.data(), m.size(), 999).ok());
  EXPECT_FALSE(ParseChunkHeader(m.data(), m.size(), 1001).ok());
  EXPECT_FALSE(ParseChunkHeader(m.data(), m.size() - 1, 1000).ok());
  // Tail shorter than a codec header.
  auto shorter = Header(ChunkHeader{7, 0, 1, 0, 1000 + 63, 0, split});
  shorter.resize(kChunkHeaderBytes + 63, 0);
  EXPECT_FALSE(ParseChunkHeader(shorter.data(), shorter.size(), 1000).ok());
  // No tail at all.
  auto none = Header(ChunkHeader{7, 0, 1, 0, 1000, 0, split});
  EXPECT_FALSE(ParseChunkHeader(none.data(), none.size(), 1000).ok());
  // A payload size that would wrap the sum.
  auto wrap = Header(ChunkHeader{7, 0, 1, 0, 99, 0, split});
  wrap.resize(kChunkHeaderBytes + 100, 0);
  EXPECT_FALSE(ParseChunkHeader(wrap.data(), wrap.size(), ~0ull).ok());
}

}  // namespace
}  // namespace kvferry::transport
