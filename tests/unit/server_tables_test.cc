// Unit tests of the daemon's tables: pools (real shm segments), leases,
// transfers. The gRPC services around them are covered by the integration tests.
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shm.h"
#include "server/leases.h"
#include "server/pool_registry.h"
#include "server/transfers.h"

namespace kvferry::server {
namespace {

v1::RegisterPoolRequest PoolReq(const std::string& name, const std::string& shm, uint64_t offset, uint32_t blocks) {
  v1::RegisterPoolRequest r;
  r.set_name(name);
  r.set_memory_kind(v1::MEMORY_KIND_HOST_SHM);
  r.set_shm_name(shm);
  r.set_offset_bytes(offset);
  r.set_num_blocks(blocks);
  auto* l = r.mutable_layout();
  l->set_num_layers(2);
  l->set_kv_planes(2);
  l->set_block_tokens(16);
  l->set_num_heads(1);
  l->set_head_dim(64);
  l->set_dtype(v1::DTYPE_BF16);  // 2 KiB segments, 8 KiB per block
  return r;
}

std::string ShmName() { return absl::StrCat("/kvferry-unit-", getpid(), "-", absl::ToUnixNanos(absl::Now())); }

TEST(PoolRegistry, RegistersMapsAndRefusesOverlapsAndInUseRemoval) {
  const std::string shm = ShmName();
  auto seg = ShmSegment::Create(shm, 64 << 10);
  ASSERT_TRUE(seg.ok());
  PoolRegistry reg;
  auto a = reg.Register(PoolReq("a", shm, 0, 4));  // [0, 32K)
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->geometry.segment_bytes, 2048u);
  EXPECT_EQ((*a)->geometry.region_bytes, 32768u);
  // The daemon's mapping sees the worker's writes (same segment).
  (*seg)->data()[100] = 0x5a;
  EXPECT_EQ((*a)->base[100], 0x5a);
  EXPECT_EQ(reg.Register(PoolReq("b", shm, 16 << 10, 4)).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(reg.Register(PoolReq("b", shm, 32 << 10, 4)).ok());  // adjacent
  EXPECT_EQ(reg.Register(PoolReq("c", shm, 64 << 10, 1)).status().code(), absl::StatusCode::kOutOfRange);
  // Segments list the blocks' bytes in (layer, plane, block) order.
  auto segs = (*a)->Segments({3, 1});
  EXPECT_EQ(segs.total(), 2u * 2 * 2 * 2048);
  EXPECT_EQ(segs.size(), 8u);
  const uint64_t id = (*a)->id;
  EXPECT_EQ(reg.Unregister(id).code(), absl::StatusCode::kFailedPrecondition);  // `a` still held here
  a->reset();
  EXPECT_TRUE(reg.Unregister(id).ok());
  EXPECT_EQ(reg.Get(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.List().size(), 1u);
}

TEST(LeaseTable, ClaimUnclaimDeliverExpire) {
  LeaseTable t;
  auto l = t.Create(nullptr, {1, 2}, absl::Seconds(10));
  EXPECT_EQ(l->key.size(), 32u);
  EXPECT_NE(t.Create(nullptr, {1}, absl::Seconds(10))->key, l->key);
  ASSERT_TRUE(t.Claim(l->key).ok());
  EXPECT_EQ(t.Claim(l->key).status().code(), absl::StatusCode::kFailedPrecondition);  // one send at a time
  EXPECT_EQ(t.Release(l->key).code(), absl::StatusCode::kFailedPrecondition);         // being sent
  t.Unclaim(l->key, /*delivered=*/false);
  ASSERT_TRUE(t.Claim(l->key).ok());  // retry after a failed send
  t.Unclaim(l->key, /*delivered=*/true);
  EXPECT_EQ(t.Claim(l->key).status().code(), absl::StatusCode::kNotFound);  // delivered: gone

  auto short_lived = t.Create(nullptr, {3}, absl::Milliseconds(1));
  auto claimed = t.Create(nullptr, {4}, absl::Milliseconds(1));
  ASSERT_TRUE(t.Claim(claimed->key).ok());
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(t.Sweep(absl::Now()), 1u);  // the claimed one is being sent: it stays
  auto late = t.Peek(short_lived->key);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(late.status().message().find("expired"), std::string::npos);
  EXPECT_EQ(t.Peek(std::string(32, '0')).status().code(), absl::StatusCode::kNotFound);
}

TEST(TransferTable, EveryTransferEndsOnceWithTheRightState) {
  TransferTable t;
  struct Case {
    absl::Status outcome;
    v1::TransferState state;
  } cases[] = {{absl::OkStatus(), v1::TRANSFER_STATE_DONE},
               {absl::CancelledError("x"), v1::TRANSFER_STATE_CANCELLED},
               {absl::DeadlineExceededError("x"), v1::TRANSFER_STATE_EXPIRED},
               {absl::DataLossError("checksum"), v1::TRANSFER_STATE_FAILED},
               {absl::UnavailableError("peer"), v1::TRANSFER_STATE_FAILED}};
  for (const auto& c : cases) {
    auto r = t.Create(nullptr, "peer:1", 100);
    EXPECT_NE(r->id, 0u);
    EXPECT_EQ(r->id >> 63, 0u);  // 63-bit ids: the top bit tags payload messages
    EXPECT_EQ(t.Get(r->id)->state(), v1::TRANSFER_STATE_PENDING);
    t.SetRunning(r->id);
    EXPECT_EQ(t.Get(r->id)->state(), v1::TRANSFER_STATE_RUNNING);
    int cancelled_peer = 0;
    t.SetCancelPeer(r->id, [&] { ++cancelled_peer; });
    EXPECT_TRUE(t.Finish(r->id, c.outcome));
    EXPECT_FALSE(t.Finish(r->id, absl::OkStatus()));  // the first outcome wins
    auto s = t.Get(r->id);
    EXPECT_EQ(s->state(), c.state);
    EXPECT_EQ(s->error().empty(), c.outcome.ok());
    EXPECT_EQ(cancelled_peer, c.outcome.ok() ? 0 : 1) << "a failed receive tells the sender to stop";
  }
  auto c = t.counts();
  EXPECT_EQ(c.done, 1u);
  EXPECT_EQ(c.failed, 4u);
  EXPECT_EQ(c.active, 0u);
  EXPECT_EQ(t.Get(42).status().code(), absl::StatusCode::kNotFound);
}

TEST(TransferTable, WaitChangeWakesOnStateChange) {
  TransferTable t;
  auto r = t.Create(nullptr, "p", 1);
  auto before = t.Get(r->id);
  std::thread finisher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    t.Finish(r->id, absl::OkStatus());
  });
  const absl::Time t0 = absl::Now();
  auto after = t.WaitChange(r->id, *before, absl::Seconds(10));
  finisher.join();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state(), v1::TRANSFER_STATE_DONE);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  // Without a change it returns after the timeout, unchanged.
  auto same = t.WaitChange(r->id, *after, absl::Milliseconds(30));
  EXPECT_EQ(same->state(), v1::TRANSFER_STATE_DONE);
  t.Prune(absl::ZeroDuration(), 0);
  EXPECT_EQ(t.Get(r->id).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvferry::server
