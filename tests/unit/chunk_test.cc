#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "transport/chunk.h"

namespace kvferry::transport {
namespace {

std::vector<uint8_t> Message(const ChunkHeader& h, size_t payload) {
  std::vector<uint8_t> m(kChunkHeaderBytes + payload, 0xAB);
  EncodeChunkHeader(h, m.data());
  return m;
}

TEST(ChunkHeader, RoundTrips) {
  ChunkHeader h{0x1122334455667788ull, 3, 9, 3 * 4096, 100, 0xdeadbeefcafef00dull};
  auto m = Message(h, 100);
  auto p = ParseChunkHeader(m.data(), m.size());
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
  auto good = Message(h, 16);
  EXPECT_TRUE(ParseChunkHeader(good.data(), good.size()).ok());

  for (size_t n = 0; n < kChunkHeaderBytes; ++n) {
    EXPECT_EQ(ParseChunkHeader(good.data(), n).status().code(), absl::StatusCode::kDataLoss);
  }
  EXPECT_FALSE(ParseChunkHeader(nullptr, 100).ok());

  auto bad = good;
  bad[0] ^= 1;  // magic
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size()).ok());
  bad = good;
  bad[4] = 2;  // version
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size()).ok());
  bad = good;
  bad[6] = 1;  // flags
  EXPECT_FALSE(ParseChunkHeader(bad.data(), bad.size()).ok());

  auto zero_id = Message(ChunkHeader{0, 0, 1, 0, 16, 0}, 16);
  EXPECT_FALSE(ParseChunkHeader(zero_id.data(), zero_id.size()).ok());
  auto seq_past = Message(ChunkHeader{7, 1, 1, 0, 16, 0}, 16);
  EXPECT_FALSE(ParseChunkHeader(seq_past.data(), seq_past.size()).ok());
  // Length disagreeing with what arrived, both ways.
  EXPECT_FALSE(ParseChunkHeader(good.data(), good.size() - 1).ok());
  auto longer = Message(h, 17);
  EXPECT_FALSE(ParseChunkHeader(longer.data(), longer.size()).ok());
  auto huge = Message(ChunkHeader{7, 0, 1, 0, ~0ull, 0}, 16);
  EXPECT_FALSE(ParseChunkHeader(huge.data(), huge.size()).ok());
}

}  // namespace
}  // namespace kvferry::transport
