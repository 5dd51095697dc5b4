// Integration tests: real kvferryd processes on port 0, talking gRPC to each
// other and moving chunks over UCX (TCP on loopback).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <thread>

#include "absl/time/clock.h"
#include "common/shm.h"
#include "kvferry/v1/peer.grpc.pb.h"
#include "tests/util/daemons.h"

namespace kvferry::testing {
namespace {

using client::HostPool;

class DaemonPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prefill_ = Daemon::Start("prefill");
    decode_ = Daemon::Start("decode");
    ASSERT_NE(prefill_, nullptr);
    ASSERT_NE(decode_, nullptr);
  }

  std::unique_ptr<HostPool> Pool(Daemon* d, const std::string& name, uint32_t blocks, uint32_t seed) {
    auto p = d->client->CreateHostPool(name, SmallLayout(), blocks);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    if (seed != 0) {
      FillRandom((*p)->base(), (*p)->bytes(), seed);
    } else {
      std::memset((*p)->base(), 0, (*p)->bytes());
    }
    return std::move(p).value();
  }

  // The daemons must still answer after whatever a test did to them.
  void TearDown() override {
    if (prefill_ && decode_) {
      EXPECT_TRUE(prefill_->client->Status().ok());
      EXPECT_TRUE(decode_->client->Status().ok());
    }
  }

  std::unique_ptr<Daemon> prefill_, decode_;
};

TEST_F(DaemonPairTest, PullMovesBlocksBitExactIntoOtherBlockIds) {
  auto src = Pool(prefill_.get(), "src", 32, 1);
  auto dst = Pool(decode_.get(), "dst", 32, 0);
  const std::vector<uint32_t> from = {1, 5, 9, 30, 2};
  const std::vector<uint32_t> to = {0, 31, 7, 8, 3};
  auto ticket = prefill_->client->Publish(src->id(), from);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_EQ(ticket->block_count(), 5u);
  auto id = decode_->client->Pull(*ticket, dst->id(), to);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<v1::TransferState> seen;
  auto last = decode_->client->Watch(*id, [&](const v1::TransferStatus& s) { seen.push_back(s.state()); });
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->state(), v1::TRANSFER_STATE_DONE) << last->error();
  EXPECT_EQ(last->bytes_done(), 5 * src->geometry().segment_bytes * 8);
  EXPECT_EQ(last->total_bytes(), last->bytes_done());
  for (size_t i = 0; i < from.size(); ++i) EXPECT_TRUE(SameBlock(*src, from[i], *dst, to[i])) << i;
  // Nothing else was written.
  std::vector<uint8_t> zero(src->geometry().segment_bytes, 0);
  for (uint32_t b : {2u, 4u, 30u}) {
    EXPECT_EQ(std::memcmp(dst->segment(0, 0, b), zero.data(), zero.size()), 0) << b;
  }
  auto st = decode_->client->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->transfers_done(), 1u);
  EXPECT_EQ(st->bytes_received(), last->bytes_done());
  EXPECT_EQ(st->recv_slots_free(), st->recv_slots());
  EXPECT_FALSE(st->gpu_direct());  // --gpu_direct is off by default
  // A delivered ticket cannot be pulled again. The sender ends the lease
  // when its send job completes, which may come just after the receiver has
  // seen the transfer DONE: wait (bounded) for the lease to be gone.
  for (int i = 0; i < 500; ++i) {
    auto ps = prefill_->client->Status();
    ASSERT_TRUE(ps.ok()) << ps.status();
    if (ps->active_leases() == 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  auto again = decode_->client->Pull(*ticket, dst->id(), to);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kNotFound) << again.status();
}

// Two daemon processes, KV-like bf16 blocks, each compression mode: the
// blocks arrive bit-exact and the transfer status carries the metrics. The
// sender runs split-send.
TEST(DaemonCompression, RawCompressedAndAdaptivePullsAreBitExactWithMetrics) {
  auto prefill = Daemon::Start("prefill", {"--chunk_bytes=65536", "--codec_threads=2", "--split_send"});
  auto decode = Daemon::Start("decode", {"--chunk_bytes=65536", "--codec_threads=2"});
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  auto src = prefill->client->CreateHostPool("src", SmallLayout(), 64);
  auto dst = decode->client->CreateHostPool("dst", SmallLayout(), 64);
  ASSERT_TRUE(src.ok() && dst.ok());
  cli::FillKvLike(**src, 3);
  std::vector<uint32_t> blocks(64);
  std::iota(blocks.begin(), blocks.end(), 0);
  for (v1::Compression mode : {v1::COMPRESSION_COMPRESSED, v1::COMPRESSION_ADAPTIVE, v1::COMPRESSION_RAW}) {
    std::memset((*dst)->base(), 0, (*dst)->bytes());
    auto ticket = prefill->client->Publish((*src)->id(), blocks);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    auto id = decode->client->Pull(*ticket, (*dst)->id(), blocks, absl::Seconds(30), mode);
    ASSERT_TRUE(id.ok()) << id.status();
    auto last = decode->client->Watch(*id);
    ASSERT_TRUE(last.ok()) << last.status();
    ASSERT_EQ(last->state(), v1::TRANSFER_STATE_DONE) << last->error();
    for (uint32_t b : blocks) ASSERT_TRUE(SameBlock(**src, b, **dst, b)) << v1::Compression_Name(mode) << " " << b;
    EXPECT_EQ(last->compression(), mode);
    EXPECT_EQ(last->chunks_total(), 32u);  // 2 MiB in 64 KiB chunks
    EXPECT_GT(last->first_payload_us(), 0u);
    if (mode == v1::COMPRESSION_COMPRESSED) {
      EXPECT_EQ(last->chunks_encoded(), last->chunks_total());
      EXPECT_LT(last->wire_bytes() * 1.1, last->bytes_done());
      EXPECT_GT(last->decode_us(), 0u);
      // The sender's figures arrive when its call returns.
      absl::StatusOr<v1::TransferStatus> s = last;
      for (int i = 0; i < 200 && s.ok() && s->encode_us() == 0; ++i) {
        absl::SleepFor(absl::Milliseconds(10));
        s = decode->client->GetTransfer(*id);
      }
      ASSERT_TRUE(s.ok());
      EXPECT_GT(s->encode_us(), 0u);
      EXPECT_GE(s->sender_chunks_split(), 1u);  // the first chunk's raw plane left early: the link was idle
      EXPECT_GT(s->sender_first_payload_us(), 0u);
    } else if (mode == v1::COMPRESSION_RAW) {
      EXPECT_EQ(last->chunks_encoded(), 0u);
      EXPECT_EQ(last->wire_bytes(), last->bytes_done());
    }
  }
  auto st = decode->client->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->recv_slots_free(), st->recv_slots());
}

TEST_F(DaemonPairTest, ManyConcurrentPullsAllArriveIntact) {
  auto src = Pool(prefill_.get(), "src", 64, 2);
  auto dst = Pool(decode_.get(), "dst", 64, 0);
  std::vector<uint64_t> ids;
  for (uint32_t r = 0; r < 8; ++r) {
    std::vector<uint32_t> from, to;
    for (uint32_t k = 0; k < 8; ++k) {
      from.push_back(r * 8 + k);
      to.push_back(63 - (r * 8 + k));
    }
    auto t = prefill_->client->Publish(src->id(), from);
    ASSERT_TRUE(t.ok());
    auto id = decode_->client->Pull(*t, dst->id(), to);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  for (uint64_t id : ids) {
    auto last = decode_->client->Watch(id);
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(last->state(), v1::TRANSFER_STATE_DONE) << last->error();
  }
  for (uint32_t b = 0; b < 64; ++b) EXPECT_TRUE(SameBlock(*src, b, *dst, 63 - b)) << b;
}

TEST_F(DaemonPairTest, BadRegistrationsGetClearErrors) {
  auto& cl = *decode_->client;
  const std::string shm_name =
      "/kvferry-test-" + std::to_string(getpid()) + "-" + std::to_string(absl::ToUnixNanos(absl::Now()));
  auto seg = ShmSegment::Create(shm_name, 1 << 20);
  ASSERT_TRUE(seg.ok());
  auto req = [&](const std::string& name, uint64_t offset, uint32_t blocks) {
    v1::RegisterPoolRequest r;
    r.set_name(name);
    r.set_memory_kind(v1::MEMORY_KIND_HOST_SHM);
    r.set_shm_name(shm_name);
    r.set_offset_bytes(offset);
    r.set_num_blocks(blocks);
    *r.mutable_layout() = SmallLayout();  // 32 KiB per block
    return r;
  };
  auto code = [&](const v1::RegisterPoolRequest& r) { return cl.RegisterPool(r).status().code(); };

  EXPECT_TRUE(cl.RegisterPool(req("a", 0, 8)).ok());                              // [0, 256K)
  EXPECT_EQ(code(req("b", 128 << 10, 8)), absl::StatusCode::kAlreadyExists);      // overlaps a
  EXPECT_TRUE(cl.RegisterPool(req("c", 256 << 10, 8)).ok());                      // adjacent: fine
  EXPECT_EQ(code(req("a", 512 << 10, 1)), absl::StatusCode::kAlreadyExists);      // duplicate name
  EXPECT_EQ(code(req("d", 512 << 10, 64)), absl::StatusCode::kOutOfRange);        // past the segment
  EXPECT_EQ(code(req("e", (1 << 20) + 4096, 1)), absl::StatusCode::kOutOfRange);  // offset past the end
  EXPECT_EQ(code(req("f", 100, 1)), absl::StatusCode::kInvalidArgument);          // misaligned
  EXPECT_EQ(code(req("g", 0, 0)), absl::StatusCode::kInvalidArgument);            // no blocks
  EXPECT_EQ(code(req("bad name!", 768 << 10, 1)), absl::StatusCode::kInvalidArgument);
  auto r = req("h", 768 << 10, 1);
  r.set_shm_name("/kvferry-no-such-segment");
  EXPECT_EQ(code(r), absl::StatusCode::kNotFound);
  r.set_shm_name("../etc/passwd");
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = req("h", 768 << 10, 1);
  r.mutable_layout()->set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = req("h", 768 << 10, 1);
  r.mutable_layout()->set_kv_planes(3);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = req("h", 768 << 10, 1);
  r.mutable_layout()->set_head_dim(1u << 31);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = req("h", 768 << 10, 1);
  r.set_memory_kind(v1::MEMORY_KIND_UNSPECIFIED);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  // A GPU pool with a handle that is no live allocation: refused, by a daemon
  // built without CUDA, on a host without a GPU, or by the driver.
  r.set_memory_kind(v1::MEMORY_KIND_CUDA_IPC);
  r.set_cuda_ipc_handle(std::string(64, '\x5a'));
  r.set_gpu_device("0");
  {
    auto gpu = cl.RegisterPool(r);
    const auto c = gpu.status().code();
    EXPECT_TRUE(c == absl::StatusCode::kUnimplemented || c == absl::StatusCode::kFailedPrecondition ||
                c == absl::StatusCode::kInvalidArgument)
        << gpu.status();
    EXPECT_NE(gpu.status().message().find("CUDA"), absl::string_view::npos) << gpu.status();
  }
  // A pool in use by a lease cannot be unregistered; after release it can.
  auto st = cl.Status();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->pools_size(), 2);
  const uint64_t a = st->pools(0).pool_id();
  auto t = cl.Publish(a, {0});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(cl.UnregisterPool(a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(cl.ReleaseLease(t->transfer_key()).ok());
  EXPECT_TRUE(cl.UnregisterPool(a).ok());
  EXPECT_EQ(cl.UnregisterPool(a).code(), absl::StatusCode::kNotFound);
}

TEST_F(DaemonPairTest, BadPublishAndPullRequestsGetClearErrors) {
  auto src = Pool(prefill_.get(), "src", 16, 3);
  auto dst = Pool(decode_.get(), "dst", 16, 0);
  auto& p = *prefill_->client;
  auto& d = *decode_->client;
  EXPECT_EQ(p.Publish(999, {0}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(p.Publish(src->id(), {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Publish(src->id(), {16}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(p.Publish(src->id(), {3, 4, 3}).status().code(), absl::StatusCode::kInvalidArgument);

  auto t = p.Publish(src->id(), {0, 1});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(d.Pull(*t, 999, {0, 1}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.Pull(*t, dst->id(), {0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.Pull(*t, dst->id(), {0, 16}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(d.Pull(*t, dst->id(), {2, 2}).status().code(), absl::StatusCode::kInvalidArgument);

  v1::Ticket forged = *t;
  forged.set_transfer_key(std::string(32, 'a'));
  EXPECT_EQ(d.Pull(forged, dst->id(), {0, 1}).status().code(), absl::StatusCode::kNotFound);
  forged.set_transfer_key("not-hex");
  EXPECT_EQ(d.Pull(forged, dst->id(), {0, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  v1::Ticket lying = *t;  // claims 3 blocks; the lease has 2
  lying.set_block_count(3);
  EXPECT_EQ(d.Pull(lying, dst->id(), {0, 1, 2}).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::Ticket other_layout = *t;
  other_layout.mutable_layout()->set_head_dim(128);
  EXPECT_EQ(d.Pull(other_layout, dst->id(), {0, 1}).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::Ticket nowhere = *t;
  nowhere.set_peer_address("127.0.0.1:1");
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(d.Pull(nowhere, dst->id(), {0, 1}, absl::Seconds(2)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(6));

  auto expiring = p.Publish(src->id(), {5}, absl::Milliseconds(50));
  ASSERT_TRUE(expiring.ok());
  absl::SleepFor(absl::Milliseconds(400));  // the daemon sweeps every 100 ms
  auto late = d.Pull(*expiring, dst->id(), {5});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition) << late.status();
  EXPECT_NE(late.status().message().find("expired"), std::string::npos) << late.status();

  // After all that, the original ticket still works.
  auto id = d.Pull(*t, dst->id(), {8, 9});
  ASSERT_TRUE(id.ok()) << id.status();
  auto last = d.Watch(*id);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->state(), v1::TRANSFER_STATE_DONE) << last->error();
  EXPECT_TRUE(SameBlock(*src, 0, *dst, 8));
  EXPECT_TRUE(SameBlock(*src, 1, *dst, 9));
  EXPECT_EQ(d.GetTransfer(12345).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.Cancel(12345).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DaemonPairTest, DaemonCanPullFromItself) {
  auto a = Pool(decode_.get(), "a", 8, 7);
  auto b = Pool(decode_.get(), "b", 8, 0);
  auto t = decode_->client->Publish(a->id(), {0, 1, 2});
  ASSERT_TRUE(t.ok());
  auto id = decode_->client->Pull(*t, b->id(), {5, 6, 7});
  ASSERT_TRUE(id.ok()) << id.status();
  auto last = decode_->client->Watch(*id);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->state(), v1::TRANSFER_STATE_DONE) << last->error();
  for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(SameBlock(*a, i, *b, 5 + i));
}

// The peer API is reachable by anyone who can reach the port: bad StartSend
// requests are refused, and a refused or failed send leaves the lease usable.
TEST_F(DaemonPairTest, PeerApiRejectsBadStartSend) {
  auto src = Pool(prefill_.get(), "src", 8, 8);
  auto dst = Pool(decode_.get(), "dst", 8, 0);
  auto t = prefill_->client->Publish(src->id(), {0, 1});
  ASSERT_TRUE(t.ok());
  auto stub = v1::Peer::NewStub(grpc::CreateChannel(prefill_->address, grpc::InsecureChannelCredentials()));
  auto call = [&](const std::function<void(v1::StartSendRequest*)>& mutate) {
    v1::StartSendRequest req;
    req.set_transfer_key(t->transfer_key());
    req.set_transfer_id(77);
    req.set_receiver_address("junk");
    req.set_block_count(2);
    req.set_segment_bytes(t->segment_bytes());
    *req.mutable_layout() = t->layout();
    req.set_chunk_bytes(65536);
    req.set_transport("ucx");
    mutate(&req);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StartSendResponse resp;
    return stub->StartSend(&ctx, req, &resp).error_code();
  };
  EXPECT_EQ(call([](auto*) {}), grpc::StatusCode::UNAVAILABLE);  // receiver address is not a UCX address
  EXPECT_EQ(call([](auto* r) { r->set_transfer_id(0); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call([](auto* r) { r->set_transfer_id(1ull << 63); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call([](auto* r) { r->set_chunk_bytes(0); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call([](auto* r) { r->set_chunk_bytes(1ull << 40); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call([](auto* r) { r->set_transport("carrier-pigeon"); }), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(call([](auto* r) { r->set_block_count(3); }), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(call([](auto* r) { r->set_transfer_key("zz"); }), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(call([](auto* r) { r->set_transfer_key(std::string(32, 'f')); }), grpc::StatusCode::NOT_FOUND);
  auto ps = prefill_->client->Status();
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->send_slots_free(), ps->send_slots());
  // None of that consumed the lease.
  auto id = decode_->client->Pull(*t, dst->id(), {3, 4});
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(decode_->client->Watch(*id)->state(), v1::TRANSFER_STATE_DONE);
  EXPECT_TRUE(SameBlock(*src, 0, *dst, 3));
}

TEST_F(DaemonPairTest, HealthServiceReportsServing) {
  auto ch = grpc::CreateChannel(decode_->address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::CompletionQueue cq;
  grpc::Slice empty("");
  grpc::ByteBuffer req(&empty, 1), resp;  // HealthCheckRequest{service: ""} serialises to nothing
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", req, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&resp, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(resp.Dump(&slices).ok());
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status: SERVING
}

// Slow daemons (one 64 KiB chunk in flight) so that a transfer is still
// running when the test interferes with it.
class SlowPairTest : public DaemonPairTest {
 protected:
  void SetUp() override {
    const std::vector<std::string> slow = {"--chunk_bytes=65536", "--window=1", "--staging_mib=1"};
    prefill_ = Daemon::Start("prefill", slow);
    decode_ = Daemon::Start("decode", slow);
    ASSERT_NE(prefill_, nullptr);
    ASSERT_NE(decode_, nullptr);
  }
  static std::vector<uint32_t> FirstBlocks(uint32_t n) {
    std::vector<uint32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  // Waits until the transfer has moved at least one chunk.
  void WaitRunning(uint64_t id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);  // sanitizers on a busy host are slow
    while (absl::Now() < deadline) {
      auto s = decode_->client->GetTransfer(id);
      ASSERT_TRUE(s.ok());
      if (s->chunks_done() > 0) return;
      absl::SleepFor(absl::Milliseconds(1));
    }
    FAIL() << "transfer never started";
  }
};

TEST_F(SlowPairTest, KilledSenderFailsTheTransferWithAReason) {
  auto src = Pool(prefill_.get(), "src", 2048, 4);  // 64 MiB
  auto dst = Pool(decode_.get(), "dst", 2048, 0);
  const std::vector<uint32_t> all = FirstBlocks(2048);
  auto t = prefill_->client->Publish(src->id(), all);
  ASSERT_TRUE(t.ok());
  auto id = decode_->client->Pull(*t, dst->id(), all, absl::Seconds(30));
  ASSERT_TRUE(id.ok());
  WaitRunning(*id);
  const absl::Time killed = absl::Now();
  prefill_->process.Kill();
  auto last = decode_->client->Watch(*id);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->state(), v1::TRANSFER_STATE_FAILED);
  EXPECT_NE(last->error().find("sender"), std::string::npos) << last->error();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10)) << "failure must not wait for the 30 s deadline";
  auto st = decode_->client->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->recv_slots_free(), st->recv_slots());
  prefill_.reset();
}

TEST_F(SlowPairTest, CancelEndsTheTransferAndTheTicketStaysUsable) {
  auto src = Pool(prefill_.get(), "src", 1024, 5);  // 32 MiB
  auto dst = Pool(decode_.get(), "dst", 1024, 0);
  const std::vector<uint32_t> all = FirstBlocks(1024);
  auto t = prefill_->client->Publish(src->id(), all);
  ASSERT_TRUE(t.ok());
  auto id = decode_->client->Pull(*t, dst->id(), all);
  ASSERT_TRUE(id.ok());
  WaitRunning(*id);
  auto c = decode_->client->Cancel(*id);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->state(), v1::TRANSFER_STATE_CANCELLED);
  auto last = decode_->client->Watch(*id);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->state(), v1::TRANSFER_STATE_CANCELLED);
  // Cancelling again keeps the state.
  EXPECT_EQ(decode_->client->Cancel(*id)->state(), v1::TRANSFER_STATE_CANCELLED);
  // Both sides release their staging; the lease is not consumed.
  for (const absl::Time deadline = absl::Now() + absl::Seconds(20); absl::Now() < deadline;) {
    auto ps = prefill_->client->Status();
    auto ds = decode_->client->Status();
    ASSERT_TRUE(ps.ok() && ds.ok());
    // The sender learns of the cancel a little later than the receiver.
    if (ps->active_sends() == 0 && ps->send_slots_free() == ps->send_slots() &&
        ds->recv_slots_free() == ds->recv_slots() && ds->active_transfers() == 0) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  auto ps = prefill_->client->Status();
  auto ds = decode_->client->Status();
  EXPECT_EQ(ps->active_sends(), 0u) << prefill_->LogTail();
  EXPECT_EQ(ps->send_slots_free(), ps->send_slots()) << prefill_->LogTail();
  EXPECT_EQ(ds->recv_slots_free(), ds->recv_slots()) << decode_->LogTail();
  EXPECT_EQ(ds->active_transfers(), 0u);
  std::vector<uint32_t> some = {0, 1, 2, 3};
  auto small = prefill_->client->Publish(src->id(), some);
  ASSERT_TRUE(small.ok());
  auto id2 = decode_->client->Pull(*small, dst->id(), some);
  ASSERT_TRUE(id2.ok()) << id2.status();
  EXPECT_EQ(decode_->client->Watch(*id2)->state(), v1::TRANSFER_STATE_DONE);
  auto retry = decode_->client->Pull(*t, dst->id(), all);
  ASSERT_TRUE(retry.ok()) << "a cancelled pull must leave the lease usable: " << retry.status();
  EXPECT_TRUE(decode_->client->Cancel(*retry).ok());
}

TEST_F(SlowPairTest, DeadlineExpiresATransferThatIsTooSlow) {
  auto src = Pool(prefill_.get(), "src", 2048, 6);
  auto dst = Pool(decode_.get(), "dst", 2048, 0);
  const std::vector<uint32_t> all = FirstBlocks(2048);
  auto t = prefill_->client->Publish(src->id(), all);
  ASSERT_TRUE(t.ok());
  const absl::Time t0 = absl::Now();
  auto id = decode_->client->Pull(*t, dst->id(), all, absl::Milliseconds(30));
  if (!id.ok()) {  // on a loaded host the 30 ms can pass during the publisher check, which then fails the pull
    EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded) << id.status();
    return;
  }
  auto last = decode_->client->Watch(*id);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->state(), v1::TRANSFER_STATE_EXPIRED) << last->error();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

}  // namespace
}  // namespace kvferry::testing
