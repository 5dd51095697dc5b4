// Conformance tests of the pipeline engine over every Transport implementation
// (in-process loopback and UCX over TCP on loopback).
#include "transport/pipeline/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/mutex.h"
#include "kernels/checksum.h"
#include "kernels/codec.h"
#include "tests/util/engine_util.h"
#include "tests/util/kv_like.h"
#include "transport/chunk.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/ucx/ucx_transport.h"

namespace kvferry::pipeline {
namespace {

using transport::Transport;

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Transport> NewTransport() {
    if (GetParam() == "loopback") {
      if (!fabric_) fabric_ = transport::NewLoopbackFabric();
      auto t = transport::CreateLoopbackTransport(fabric_);
      EXPECT_TRUE(t.ok()) << t.status();
      return std::move(t).value();
    }
    auto t = transport::CreateUcxTransport({});
    EXPECT_TRUE(t.ok()) << t.status();
    return std::move(t).value();
  }
  std::unique_ptr<Engine> NewEngine(EngineOptions o = {}) {
    auto e = Engine::Create(NewTransport(), o);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(e).value();
  }

  std::shared_ptr<transport::LoopbackFabric> fabric_;
};

// Cuts `buf` into segments of `seg` bytes, in a scrambled order.
SegmentList Scrambled(std::vector<uint8_t>& buf, size_t seg, uint32_t seed) {
  std::vector<Segment> s;
  for (size_t off = 0; off < buf.size(); off += seg) s.push_back({buf.data() + off, std::min(seg, buf.size() - off)});
  std::shuffle(s.begin(), s.end(), std::mt19937(seed));
  return SegmentList(s);
}

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST_P(EngineTest, MovesBytesExactlyAcrossSizesAndLayouts) {
  EngineOptions o;
  o.chunk_bytes = 64 << 10;
  o.staging_bytes = 3 * (o.chunk_bytes + 64);  // fewer slots than the window
  o.window = 4;
  auto tx = NewEngine(o);
  auto rx = NewEngine(o);
  uint64_t id = 100;
  for (size_t total : {size_t{1}, size_t{4095}, size_t{64 << 10}, size_t{(64 << 10) + 1}, size_t{1 << 20} + 333}) {
    for (size_t seg : {size_t{1000}, size_t{32 << 10}}) {
      ++id;
      auto src = Pattern(total, static_cast<uint32_t>(id));
      std::vector<uint8_t> dst(total, 0);
      // Same scramble on both sides: segment i of the sender maps to segment i of the receiver.
      SegmentList s = Scrambled(src, seg, 7), d = Scrambled(dst, seg, 7);
      auto counters = std::make_shared<TransferCounters>();
      Result rr, sr;
      ASSERT_TRUE(rx->StartRecv({id, d, o.chunk_bytes, absl::Now() + absl::Seconds(10), counters, rr.cb()}).ok());
      ASSERT_TRUE(
          tx->StartSend({id, rx->address(), s, o.chunk_bytes, absl::Now() + absl::Seconds(10), nullptr, sr.cb()}).ok());
      EXPECT_TRUE(rr.Get().ok()) << total << "/" << seg;
      EXPECT_TRUE(sr.Get().ok());
      EXPECT_EQ(src, dst) << "total " << total << " seg " << seg;
      EXPECT_EQ(counters->bytes_done.load(), total);
      EXPECT_EQ(counters->chunks_done.load(), counters->chunks_total.load());
    }
  }
  auto st = rx->stats();
  EXPECT_EQ(st.recv_slots_free, st.recv_slots);
}

TEST_P(EngineTest, EmptyTransferEndsAtOnce) {
  auto rx = NewEngine();
  Result r;
  ASSERT_TRUE(
      rx->StartRecv({5, SegmentList(std::vector<Segment>{}), 4096, absl::InfiniteFuture(), nullptr, r.cb()}).ok());
  EXPECT_TRUE(r.Get().ok());
}

TEST_P(EngineTest, RejectsBadSpecs) {
  EngineOptions o;
  o.chunk_bytes = 64 << 10;
  auto e = NewEngine(o);
  std::vector<uint8_t> buf(100);
  SegmentList s({{buf.data(), buf.size()}});
  Result r;
  EXPECT_EQ(e->StartRecv({0, s, 4096, absl::InfiniteFuture(), nullptr, r.cb()}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->StartRecv({1, s, (64 << 10) + 1, absl::InfiniteFuture(), nullptr, r.cb()}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->StartRecv({1, s, 4096, absl::InfiniteFuture(), nullptr, nullptr}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(e->StartRecv({1, s, 4096, absl::Now() + absl::Milliseconds(200), nullptr, r.cb()}).ok());
  Result r2;
  EXPECT_EQ(e->StartRecv({1, s, 4096, absl::InfiniteFuture(), nullptr, r2.cb()}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(r.Get().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(Engine::Create(NewTransport(), EngineOptions{1 << 20, 1000, 4}).ok());
  EXPECT_FALSE(Engine::Create(NewTransport(), EngineOptions{1 << 20, 8 << 20, 0}).ok());
}

// Sends hand-made messages to a receiver through a bare transport.

TEST_P(EngineTest, CorruptOrMalformedChunksFailTheTransferAndWriteNothing) {
  auto rx = NewEngine(EngineOptions{64 << 10, 1 << 20, 4});
  const auto payload = Pattern(4096, 9);
  const uint64_t good_sum = Kvsum64(payload.data(), payload.size());
  struct Case {
    const char* name;
    transport::ChunkHeader h;
    bool flip_payload;
  } cases[] = {
      {"wrong checksum", {11, 0, 2, 0, 4096, good_sum ^ 1}, false},
      {"flipped payload bit", {12, 0, 2, 0, 4096, good_sum}, true},
      {"wrong chunk count", {13, 0, 3, 0, 4096, good_sum}, false},
      {"wrong offset", {14, 1, 2, 0, 4096, good_sum}, false},
      {"wrong transfer id", {999, 0, 2, 0, 4096, good_sum}, false},
  };
  for (const auto& c : cases) {
    const uint64_t id = c.h.transfer_id == 999 ? 15 : c.h.transfer_id;
    std::vector<uint8_t> dst(8192, 0);
    Result r;
    ASSERT_TRUE(rx->StartRecv({id, SegmentList({{dst.data(), dst.size()}}), 4096, absl::Now() + absl::Seconds(10),
                               nullptr, r.cb()})
                    .ok());
    auto p = payload;
    if (c.flip_payload) p[100] ^= 0x10;
    RawSender(NewTransport(), rx->address()).Send(id, Header(c.h), p);
    absl::Status st = r.Get();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << c.name << ": " << st;
    EXPECT_EQ(dst, std::vector<uint8_t>(8192, 0)) << c.name << ": unverified bytes reached the destination";
  }
  // Garbage headers of the right size, and headers or payloads of the wrong size.
  struct Raw {
    const char* name;
    std::vector<uint8_t> header, payload;
  } raws[] = {
      {"junk header", std::vector<uint8_t>(transport::kChunkHeaderBytes, 0xff), payload},
      {"short header", std::vector<uint8_t>(10, 1), payload},
      {"long header", std::vector<uint8_t>(200, 0), payload},
      {"payload larger than a chunk", Header({20, 0, 1, 0, 4096, good_sum}), std::vector<uint8_t>(100000, 0)},
  };
  uint64_t id = 20;
  for (const auto& r : raws) {
    ++id;
    std::vector<uint8_t> dst(4096, 0);
    Result res;
    ASSERT_TRUE(rx->StartRecv({id, SegmentList({{dst.data(), dst.size()}}), 4096, absl::Now() + absl::Seconds(10),
                               nullptr, res.cb()})
                    .ok());
    RawSender(NewTransport(), rx->address()).Send(id, r.header, r.payload);
    absl::Status st = res.Get();
    EXPECT_FALSE(st.ok()) << r.name;
    EXPECT_NE(st.code(), absl::StatusCode::kDeadlineExceeded) << r.name << ": should fail at once";
    EXPECT_EQ(dst, std::vector<uint8_t>(4096, 0)) << r.name;
  }
  auto st = rx->stats();
  EXPECT_EQ(st.recv_slots_free, st.recv_slots);
}

TEST_P(EngineTest, CancelAndDeadlineEndJobsAndFreeStaging) {
  auto rx = NewEngine(EngineOptions{64 << 10, 1 << 20, 8});
  std::vector<uint8_t> dst(1 << 20);
  Result cancelled, expired;
  ASSERT_TRUE(rx->StartRecv({31, SegmentList({{dst.data(), dst.size()}}), 64 << 10, absl::InfiniteFuture(), nullptr,
                             cancelled.cb()})
                  .ok());
  ASSERT_TRUE(rx->StartRecv({32, SegmentList({{dst.data(), dst.size()}}), 64 << 10,
                             absl::Now() + absl::Milliseconds(100), nullptr, expired.cb()})
                  .ok());
  rx->Cancel(Direction::kRecv, 31, absl::CancelledError("by test"));
  EXPECT_EQ(cancelled.Get().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(expired.Get().code(), absl::StatusCode::kDeadlineExceeded);
  auto st = rx->stats();
  EXPECT_EQ(st.recv_slots_free, st.recv_slots);
  EXPECT_EQ(st.active_recvs, 0u);
}

// A transport that cancels the receives posted on it by itself when told to,
// as UCX does to a rendezvous from a sender that died.
class SelfCancellingTransport final : public Transport {
 public:
  explicit SelfCancellingTransport(std::unique_ptr<Transport> t) : t_(std::move(t)) {}
  const transport::Capabilities& capabilities() const override { return t_->capabilities(); }
  std::string address() const override { return t_->address(); }
  absl::StatusOr<std::unique_ptr<transport::Endpoint>> Connect(const std::string& peer) override {
    return t_->Connect(peer);
  }
  absl::Status SubmitRecv(uint64_t tag, void* buf, size_t capacity, uint64_t cookie, bool device) override {
    {
      MutexLock l(&mu_);
      posted_.push_back(cookie);
    }
    return t_->SubmitRecv(tag, buf, capacity, cookie, device);
  }
  void CancelRecv(uint64_t cookie) override { t_->CancelRecv(cookie); }
  size_t Progress(std::vector<transport::Completion>* out) override {
    if (cancel_.exchange(false)) {
      std::vector<uint64_t> posted;
      {
        MutexLock l(&mu_);
        posted.swap(posted_);
      }
      for (uint64_t c : posted) t_->CancelRecv(c);
    }
    return t_->Progress(out);
  }
  void Wait(absl::Duration timeout) override { t_->Wait(timeout); }
  void Wake() override { t_->Wake(); }

  size_t posted() {
    MutexLock l(&mu_);
    return posted_.size();
  }
  void CancelAllPosted() {
    cancel_ = true;
    t_->Wake();
  }

 private:
  std::unique_ptr<Transport> t_;
  std::atomic<bool> cancel_{false};
  Mutex mu_;
  std::vector<uint64_t> posted_ ABSL_GUARDED_BY(mu_);
};

// A receive the transport cancelled on its own (not through Cancel) fails
// the transfer as the sender's loss, not as a cancel by the user.
TEST_P(EngineTest, ReceivesTheTransportCancelsFailAsTheSendersLoss) {
  auto owned = std::make_unique<SelfCancellingTransport>(NewTransport());
  SelfCancellingTransport* t = owned.get();
  auto rx = Engine::Create(std::move(owned), EngineOptions{64 << 10, 1 << 20, 8});
  ASSERT_TRUE(rx.ok()) << rx.status();
  std::vector<uint8_t> dst(1 << 20);
  Result r;
  ASSERT_TRUE((*rx)->StartRecv({33, SegmentList({{dst.data(), dst.size()}}), 64 << 10, absl::InfiniteFuture(),
                                nullptr, r.cb()})
                  .ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (t->posted() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_GT(t->posted(), 0u) << "the engine posted no receive";
  t->CancelAllPosted();
  const absl::Status st = r.Get();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("sender"), std::string::npos) << st;
  auto stats = (*rx)->stats();
  EXPECT_EQ(stats.recv_slots_free, stats.recv_slots);
}

TEST_P(EngineTest, SenderToMissingReceiverFails) {
  auto tx = NewEngine();
  std::vector<uint8_t> src(1 << 20, 1);
  Result r;
  std::string addr = GetParam() == "loopback" ? "loopback:none" : std::string("junk-address");
  auto st = tx->StartSend(
      {41, addr, SegmentList({{src.data(), src.size()}}), 1 << 20, absl::Now() + absl::Seconds(2), nullptr, r.cb()});
  if (st.ok()) {
    EXPECT_FALSE(r.Get().ok());
  }
}

CodecSpec Bf16(Compression mode) {
  CodecSpec c;
  c.mode = mode;
  c.dtype = codec::DType::kBF16;
  c.layout = {16, 2, 64};
  return c;
}

// Compressed, adaptive and raw transfers deliver the exact bytes, through
// scrambled segments (gather/scatter) and contiguous ones; KV-like chunks
// travel encoded and smaller; a last chunk with half an element goes raw.
TEST_P(EngineTest, CompressedAndAdaptiveTransfersAreBitExact) {
  EngineOptions o;
  o.split_send = true;
  o.chunk_bytes = 64 << 10;
  o.staging_bytes = 8 << 20;
  o.window = 4;
  auto tx = NewEngine(o);
  auto rx = NewEngine(o);
  uint64_t id = 200;
  for (Compression mode : {Compression::kCompressed, Compression::kAdaptive, Compression::kRaw}) {
    for (size_t total : {size_t{4096}, size_t{1 << 20}, size_t{(1 << 20) + 333}}) {
      for (size_t seg : {size_t{0}, size_t{6144}}) {
        ++id;
        auto src = testing::KvLike(codec::DType::kBF16, (total + 1) / 2, 128, static_cast<uint32_t>(id));
        src.resize(total);
        std::vector<uint8_t> dst(total, 0);
        SegmentList s = seg ? Scrambled(src, seg, 3) : SegmentList({{src.data(), src.size()}});
        SegmentList d = seg ? Scrambled(dst, seg, 3) : SegmentList({{dst.data(), dst.size()}});
        auto rc = std::make_shared<TransferCounters>(), sc = std::make_shared<TransferCounters>();
        Result rr, sr;
        const auto deadline = absl::Now() + absl::Seconds(20);
        ASSERT_TRUE(rx->StartRecv({id, d, o.chunk_bytes, deadline, rc, rr.cb()}).ok());
        ASSERT_TRUE(tx->StartSend({id, rx->address(), s, o.chunk_bytes, deadline, sc, sr.cb(), Bf16(mode)}).ok());
        const std::string what =
            std::string(CompressionName(mode)) + " " + std::to_string(total) + "/" + std::to_string(seg);
        ASSERT_TRUE(rr.Get().ok()) << what;
        ASSERT_TRUE(sr.Get().ok()) << what;
        EXPECT_EQ(src, dst) << what;
        EXPECT_EQ(rc->bytes_done.load(), total) << what;
        EXPECT_EQ(sc->bytes_done.load(), total) << what;
        EXPECT_EQ(rc->wire_bytes.load(), sc->wire_bytes.load()) << what;
        EXPECT_EQ(rc->chunks_encoded.load(), sc->chunks_encoded.load()) << what;
        const uint32_t chunks = rc->chunks_total.load();
        if (mode == Compression::kRaw) {
          EXPECT_EQ(sc->chunks_encoded.load(), 0u) << what;
          EXPECT_EQ(sc->wire_bytes.load(), total) << what;
        } else if (mode == Compression::kCompressed) {
          if (seg == 0) {
            EXPECT_EQ(sc->chunks_encoded.load(), total % 2 ? chunks - 1 : chunks) << what;
            // Split-send: the first chunk's raw plane left before its
            // exponents were coded (the link was idle then).
            EXPECT_GE(sc->chunks_split.load(), 1u) << what;
            EXPECT_LT(sc->wire_bytes.load() * 1.2, total) << what;  // bf16 KV-like data shrinks ~1.4x
          } else {
            // After the odd-sized last segment the scrambled stream is off by
            // one byte: those chunks may not shrink and go raw.
            EXPECT_GE(sc->chunks_encoded.load(), chunks / 2) << what;
            EXPECT_LT(sc->wire_bytes.load(), total) << what;
          }
          EXPECT_GT(sc->codec_ns.load(), 0u) << what;
          EXPECT_GT(rc->codec_ns.load(), 0u) << what;
        }
      }
    }
  }
  auto ts = tx->stats(), rs = rx->stats();
  EXPECT_EQ(ts.send_slots_free, ts.send_slots);
  EXPECT_EQ(rs.recv_slots_free, rs.recv_slots);
  // ~1.4x on whole KV-like chunks; the running ratio also counts the small
  // and off-by-one-byte chunks, which shrink less or not at all.
  EXPECT_GT(ts.codec_ratio, 1.15);
  // The receiver measured its decoders (what it tells senders with a pull);
  // host memory's raw chunks take no codec thread. The sender decoded nothing.
  EXPECT_GT(rx->receive_rates(-1).decode_bps, 0.0);
  EXPECT_EQ(rx->receive_rates(-1).raw_bps, 0.0);
  EXPECT_EQ(tx->receive_rates(-1).decode_bps, 0.0);
}

TEST_P(EngineTest, IncompressibleChunksGoRaw) {
  EngineOptions o;
  o.chunk_bytes = 64 << 10;
  auto tx = NewEngine(o);
  auto rx = NewEngine(o);
  auto src = Pattern(1 << 20, 5);
  std::vector<uint8_t> dst(src.size(), 0);
  auto sc = std::make_shared<TransferCounters>();
  Result rr, sr;
  ASSERT_TRUE(rx->StartRecv({301, SegmentList({{dst.data(), dst.size()}}), o.chunk_bytes, absl::InfiniteFuture(),
                             nullptr, rr.cb()})
                  .ok());
  ASSERT_TRUE(tx->StartSend({301, rx->address(), SegmentList({{src.data(), src.size()}}), o.chunk_bytes,
                             absl::InfiniteFuture(), sc, sr.cb(), Bf16(Compression::kCompressed)})
                  .ok());
  ASSERT_TRUE(rr.Get().ok());
  ASSERT_TRUE(sr.Get().ok());
  EXPECT_EQ(src, dst);
  EXPECT_EQ(sc->chunks_encoded.load(), 0u);
  EXPECT_EQ(sc->chunks_split.load(), 0u);  // the codec expected no gain: the raw plane never left early
  EXPECT_EQ(sc->wire_bytes.load(), src.size());
}

// With split-send off, encoded chunks travel whole, and are the same bytes.
TEST_P(EngineTest, SplitSendCanBeTurnedOff) {
  for (bool split : {true, false}) {
    EngineOptions o;
    o.chunk_bytes = 256 << 10;
    o.split_send = split;
    auto tx = NewEngine(o);
    auto rx = NewEngine(o);
    auto src = testing::KvLike(codec::DType::kBF16, 1 << 20, 128, 11);
    std::vector<uint8_t> dst(src.size(), 0);
    auto sc = std::make_shared<TransferCounters>(), rc = std::make_shared<TransferCounters>();
    Result rr, sr;
    const uint64_t id = split ? 311 : 312;
    ASSERT_TRUE(
        rx->StartRecv({id, SegmentList({{dst.data(), dst.size()}}), o.chunk_bytes, absl::InfiniteFuture(), rc, rr.cb()})
            .ok());
    ASSERT_TRUE(tx->StartSend({id, rx->address(), SegmentList({{src.data(), src.size()}}), o.chunk_bytes,
                               absl::InfiniteFuture(), sc, sr.cb(), Bf16(Compression::kCompressed)})
                    .ok());
    ASSERT_TRUE(rr.Get().ok());
    ASSERT_TRUE(sr.Get().ok());
    EXPECT_EQ(src, dst);
    EXPECT_EQ(sc->chunks_encoded.load(), sc->chunks_total.load());
    if (split) {
      EXPECT_GE(sc->chunks_split.load(), 1u);  // at least the first: the link was idle
    } else {
      EXPECT_EQ(sc->chunks_split.load(), 0u);
    }
    EXPECT_EQ(rc->wire_bytes.load(), sc->wire_bytes.load());
    EXPECT_LT(sc->wire_bytes.load() * 1.2, src.size());
  }
}

// A split chunk from a hand-made sender: the receiver joins the raw plane
// (payload message) and the tail (after the 48-byte header) into the codec
// chunk, and checks it like any other before anything is written.
TEST_P(EngineTest, SplitChunksAreJoinedAndVerified) {
  auto rx = NewEngine(EngineOptions{64 << 10, 4 << 20, 4});
  const size_t kRaw = 64 << 10;
  const auto raw = testing::KvLike(codec::DType::kBF16, kRaw / 2, 64, 3);
  std::vector<uint8_t> enc(codec::MaxEncodedBytes(raw.size()));
  auto n = codec::Encode(codec::EncodeOptions{}, raw.data(), raw.size(), enc.data(), enc.size());
  ASSERT_TRUE(n.ok()) << n.status();
  enc.resize(*n);
  auto info = codec::Inspect(enc.data(), enc.size());
  ASSERT_TRUE(info.ok());
  ASSERT_FALSE(info->stored);
  const size_t plane = info->raw_plane_bytes;
  const uint16_t kSplit = transport::kChunkEncoded | transport::kChunkSplit;
  // Lead: the raw plane; header message: header, codec header, the rest.
  auto messages = [&](const std::vector<uint8_t>& chunk, uint64_t id, uint64_t sum, size_t lead) {
    std::vector<uint8_t> payload(chunk.begin() + 64, chunk.begin() + 64 + lead);
    std::vector<uint8_t> header = Header({id, 0, 1, 0, chunk.size(), sum, kSplit});
    header.insert(header.end(), chunk.begin(), chunk.begin() + 64);
    header.insert(header.end(), chunk.begin() + 64 + lead, chunk.end());
    return std::make_pair(header, payload);
  };
  const uint64_t sum = Kvsum64(enc.data(), enc.size());
  auto bad_tail = enc;
  bad_tail[enc.size() - 5] ^= 0x21;
  auto bad_plane = enc;
  bad_plane[64 + 100] ^= 0x01;
  struct Case {
    const char* name;
    std::vector<uint8_t> chunk;
    uint64_t sum;
    size_t lead;
    absl::StatusCode want;
  } cases[] = {
      {"intact", enc, sum, plane, absl::StatusCode::kOk},
      // The receiver only joins bytes: where the sender cut them is its business.
      {"cut elsewhere", enc, sum, plane - 7, absl::StatusCode::kOk},
      {"tail flipped on the wire", bad_tail, sum, plane, absl::StatusCode::kDataLoss},
      {"raw plane flipped on the wire", bad_plane, sum, plane, absl::StatusCode::kDataLoss},
      {"corrupt chunk with a matching checksum", bad_tail, Kvsum64(bad_tail.data(), bad_tail.size()), plane,
       absl::StatusCode::kDataLoss},
  };
  uint64_t id = 450;
  for (const auto& c : cases) {
    ++id;
    std::vector<uint8_t> dst(kRaw, 0);
    Result r;
    ASSERT_TRUE(rx->StartRecv({id, SegmentList({{dst.data(), dst.size()}}), kRaw, absl::Now() + absl::Seconds(10),
                               nullptr, r.cb()})
                    .ok());
    auto [header, payload] = messages(c.chunk, id, c.sum, c.lead);
    RawSender(NewTransport(), rx->address()).Send(id, header, payload);
    absl::Status st = r.Get();
    EXPECT_EQ(st.code(), c.want) << c.name << ": " << st;
    EXPECT_EQ(dst, c.want == absl::StatusCode::kOk ? raw : std::vector<uint8_t>(kRaw, 0)) << c.name;
  }
  // A split chunk longer than the codec's bound for the range is refused
  // before anything is joined.
  {
    std::vector<uint8_t> dst(4096, 0);
    Result r;
    ASSERT_TRUE(rx->StartRecv({470, SegmentList({{dst.data(), dst.size()}}), 4096, absl::Now() + absl::Seconds(10),
                               nullptr, r.cb()})
                    .ok());
    std::vector<uint8_t> big(codec::MaxSplitEncodedBytes(4096) + 1, 0);
    auto [header, payload] = messages(big, 470, Kvsum64(big.data(), big.size()), 1000);
    RawSender(NewTransport(), rx->address()).Send(470, header, payload);
    EXPECT_EQ(r.Get().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(dst, std::vector<uint8_t>(4096, 0));
  }
  auto st = rx->stats();
  EXPECT_EQ(st.recv_slots_free, st.recv_slots);
}

// A chunk sent twice fails the transfer, also when its second copy arrives
// while the first is still with a codec thread: counted twice, it would end
// the transfer "complete" with another chunk never received.
TEST_P(EngineTest, DuplicateChunksFailTheTransferEvenWhileTheFirstIsDecoding) {
  auto rx = NewEngine(EngineOptions{64 << 10, 4 << 20, 4});
  const auto raw = testing::KvLike(codec::DType::kBF16, 2048, 64, 2);  // 4096 bytes
  std::vector<uint8_t> enc(codec::MaxEncodedBytes(raw.size()));
  enc.resize(codec::Encode(codec::EncodeOptions{}, raw.data(), raw.size(), enc.data(), enc.size()).value());
  ASSERT_LT(enc.size(), raw.size());
  for (uint64_t id : {450, 451, 452}) {  // a few times: the second copy meets the first at different stages
    std::vector<uint8_t> dst(8192, 0);
    Result r;
    ASSERT_TRUE(rx->StartRecv({id, SegmentList({{dst.data(), dst.size()}}), 4096, absl::Now() + absl::Seconds(10),
                               nullptr, r.cb()})
                    .ok());
    RawSender tx(NewTransport(), rx->address());
    const auto header = Header({id, 0, 2, 0, enc.size(), Kvsum64(enc.data(), enc.size()), transport::kChunkEncoded});
    tx.Send(id, header, enc);
    tx.Send(id, header, enc);
    const absl::Status st = r.Get();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find("duplicate chunk 0"), absl::string_view::npos) << st;
  }
  auto st = rx->stats();
  EXPECT_EQ(st.recv_slots_free, st.recv_slots);
}

// Encoded chunks are checked twice: the kvsum64 of the bytes as sent before
// anything is decoded, and the codec's own kvsum64 of the decoded bytes
// before anything is written. Either failing fails the transfer with
// DATA_LOSS and leaves the destination untouched.
TEST_P(EngineTest, CorruptEncodedChunksFailAndWriteNothing) {
  auto rx = NewEngine(EngineOptions{64 << 10, 4 << 20, 4});
  const auto raw = testing::KvLike(codec::DType::kBF16, 2048, 64, 1);  // 4096 bytes
  codec::EncodeOptions eo;
  std::vector<uint8_t> enc(codec::MaxEncodedBytes(raw.size()));
  auto n = codec::Encode(eo, raw.data(), raw.size(), enc.data(), enc.size());
  ASSERT_TRUE(n.ok()) << n.status();
  enc.resize(*n);
  ASSERT_LT(enc.size(), raw.size());
  auto bad_inside = enc;
  bad_inside[enc.size() - 7] ^= 0x5a;  // in the coded tiles
  const uint64_t sum = Kvsum64(enc.data(), enc.size());
  struct Case {
    const char* name;
    std::vector<uint8_t> payload;
    uint64_t sum;
    uint64_t length;
  } cases[] = {
      {"payload flipped on the wire", bad_inside, sum, enc.size()},
      {"corrupt codec chunk with a matching wire checksum", bad_inside, Kvsum64(bad_inside.data(), bad_inside.size()),
       enc.size()},
      {"encoded chunk as long as the raw range", std::vector<uint8_t>(4096, 0),
       Kvsum64(std::vector<uint8_t>(4096, 0).data(), 4096), 4096},
  };
  uint64_t id = 400;
  for (const auto& c : cases) {
    ++id;
    std::vector<uint8_t> dst(4096, 0);
    Result r;
    ASSERT_TRUE(rx->StartRecv({id, SegmentList({{dst.data(), dst.size()}}), 4096, absl::Now() + absl::Seconds(10),
                               nullptr, r.cb()})
                    .ok());
    transport::ChunkHeader h{id, 0, 1, 0, c.length, c.sum, transport::kChunkEncoded};
    RawSender(NewTransport(), rx->address()).Send(id, Header(h), c.payload);
    absl::Status st = r.Get();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << c.name << ": " << st;
    EXPECT_EQ(dst, std::vector<uint8_t>(4096, 0)) << c.name << ": unverified bytes reached the destination";
  }
  // The intact chunk decodes.
  std::vector<uint8_t> dst(4096, 0);
  Result r;
  ASSERT_TRUE(rx->StartRecv({499, SegmentList({{dst.data(), dst.size()}}), 4096, absl::Now() + absl::Seconds(10),
                             nullptr, r.cb()})
                  .ok());
  RawSender(NewTransport(), rx->address())
      .Send(499, Header({499, 0, 1, 0, enc.size(), sum, transport::kChunkEncoded}), enc);
  EXPECT_TRUE(r.Get().ok());
  EXPECT_EQ(dst, raw);
  auto st = rx->stats();
  EXPECT_EQ(st.recv_slots_free, st.recv_slots);

  // A data plane without codec threads refuses encoded chunks and compressed sends.
  auto plain = NewEngine(EngineOptions{64 << 10, 4 << 20, 4, 0});
  std::vector<uint8_t> dst2(4096, 0);
  Result r2;
  ASSERT_TRUE(plain
                  ->StartRecv({500, SegmentList({{dst2.data(), dst2.size()}}), 4096, absl::Now() + absl::Seconds(10),
                               nullptr, r2.cb()})
                  .ok());
  RawSender(NewTransport(), plain->address())
      .Send(500, Header({500, 0, 1, 0, enc.size(), sum, transport::kChunkEncoded}), enc);
  EXPECT_EQ(r2.Get().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(dst2, std::vector<uint8_t>(4096, 0));
  Result r3;
  EXPECT_EQ(plain
                ->StartSend({501, rx->address(), SegmentList({{dst2.data(), dst2.size()}}), 4096,
                             absl::InfiniteFuture(), nullptr, r3.cb(), Bf16(Compression::kCompressed)})
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

// Cancelling compressed transfers while chunks are with the codec threads or
// on the wire ends both jobs and returns every staging slot.
TEST_P(EngineTest, CancelMidPipelineReleasesEveryStagingSlot) {
  EngineOptions o;
  o.chunk_bytes = 256 << 10;
  o.staging_bytes = 4 << 20;
  o.window = 8;
  auto tx = NewEngine(o);
  auto rx = NewEngine(o);
  auto src = testing::KvLike(codec::DType::kBF16, 16 << 20, 128, 2);  // 32 MiB
  std::vector<uint8_t> dst(src.size(), 0);
  Result rr, sr;
  auto rc = std::make_shared<TransferCounters>();
  ASSERT_TRUE(
      rx->StartRecv({601, SegmentList({{dst.data(), dst.size()}}), o.chunk_bytes, absl::InfiniteFuture(), rc, rr.cb()})
          .ok());
  ASSERT_TRUE(tx->StartSend({601, rx->address(), Scrambled(src, 1 << 20, 9), o.chunk_bytes, absl::InfiniteFuture(),
                             nullptr, sr.cb(), Bf16(Compression::kCompressed)})
                  .ok());
  CancelMidTransferAndCheckSlots(*tx, *rx, 601, *rc, sr, rr);
}

double Fraction(double encode, double link, double ratio, double raw = 0, double decode = 0, double recv_raw = 0) {
  AdaptiveRates r;
  r.encode_bps = encode;
  r.link_bps = link;
  r.ratio = ratio;
  r.raw_bps = raw;
  r.decode_bps = decode;
  r.recv_raw_bps = recv_raw;
  return AdaptiveCompressedFraction(r);
}

TEST(Adaptive, CompressesTheFractionThatBalancesCodecAndLink) {
  // Codec far faster than the link: compress everything.
  EXPECT_DOUBLE_EQ(Fraction(10e9, 0.1e9, 1.4), 1.0);
  // Codec far slower than the link: nothing.
  EXPECT_EQ(Fraction(0.1e9, 10e9, 1.4), 0.0);
  // Data that does not shrink: nothing.
  EXPECT_EQ(Fraction(10e9, 0.1e9, 1.0), 0.0);
  // Codec as fast as the link at ratio 1.4: f = 1 / (2 - 1 / 1.4), and both
  // resources then take the same time per byte.
  const double c = 1e9, l = 1e9, r = 1.4;
  const double f = Fraction(c, l, r);
  EXPECT_NEAR(f, 1 / (2 - 1 / r), 1e-12);
  EXPECT_NEAR(f / c, (f / r + 1 - f) / l, 1e-18);
  // A small predicted gain (a 2-thread CPU codec next to a fast loopback link)
  // is not worth it.
  EXPECT_EQ(Fraction(1.4e9, 3.6e9, 1.45), 0.0);
  // Garbage estimates do not produce NaN.
  EXPECT_GE(Fraction(0, 0, 0), 0.0);
  EXPECT_GE(Fraction(1e9, 1e9, 1.4, std::nan(""), -1, std::numeric_limits<double>::infinity()), 0.0);
  // Raw chunks that cost the workers nothing: the same as no raw rate.
  EXPECT_NEAR(Fraction(c, l, r, 1e30), f, 1e-12);
}

TEST(Adaptive, CountsRawChunksOnSharedWorkers) {
  // Workers that already limit raw chunks (a GPU link faster than gather and
  // checksum): compressing would only slow them down.
  EXPECT_EQ(Fraction(5e9, 7e9, 1.45, 6e9), 0.0);
  // Raw chunks cost the workers a little: compress less than if they were
  // free, and balance workers and link.
  const double g = Fraction(1e9, 1e9, 1.45, 20e9);
  EXPECT_GT(g, 0.0);
  EXPECT_LT(g, Fraction(1e9, 1e9, 1.45));
  EXPECT_NEAR(g / 1e9 + (1 - g) / 20e9, (g / 1.45 + 1 - g) / 1e9, 1e-18);
}

TEST(Adaptive, LetsASlowReceiverLimitCompression) {
  // An encoder far faster than the link alone would compress everything.
  EXPECT_DOUBLE_EQ(Fraction(10e9, 1e9, 1.45), 1.0);
  // A receiver that decodes at 1.2x the link's rate: balance its decoder with
  // the link instead.
  const double e = Fraction(10e9, 1e9, 1.45, 0, 1.2e9);
  EXPECT_GT(e, 0.0);
  EXPECT_LT(e, 1.0);
  EXPECT_NEAR(e / 1.2e9, (e / 1.45 + 1 - e) / 1e9, 1e-18);
  // The receiver's raw writes share its workers too (GPU pools): less.
  const double g = Fraction(10e9, 1e9, 1.45, 0, 1.2e9, 10e9);
  EXPECT_LT(g, e);
  EXPECT_NEAR(g / 1.2e9 + (1 - g) / 10e9, (g / 1.45 + 1 - g) / 1e9, 1e-18);
  // A receiver that decodes at half the link's rate: the best mix gains less
  // than the margin, so nothing is compressed.
  EXPECT_EQ(Fraction(10e9, 1e9, 1.45, 0, 0.4e9), 0.0);
  // A receiver whose raw writes already limit it gains nothing from compression.
  EXPECT_EQ(Fraction(10e9, 7e9, 1.45, 0, 5e9, 6e9), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Transports, EngineTest, ::testing::Values("loopback", "ucx"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvferry::pipeline
