// Test helpers for the pipeline engine: a job's result as a future, and a
// raw sender that puts hand-made chunk messages on a transport.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/chunk.h"
#include "transport/pipeline/engine.h"
#include "transport/transport.h"

namespace kvferry::pipeline {

// A job's `done` callback and the status it got.
struct Result {
  std::promise<absl::Status> p;
  std::future<absl::Status> f = p.get_future();
  DoneCallback cb() {
    return [this](absl::Status s) { p.set_value(std::move(s)); };
  }
  absl::Status Get() {
    if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      return absl::DeadlineExceededError("test: job never ended");
    }
    return f.get();
  }
};

class RawSender {
 public:
  RawSender(std::unique_ptr<transport::Transport> t, const std::string& peer) : t_(std::move(t)) {
    auto ep = t_->Connect(peer);
    EXPECT_TRUE(ep.ok()) << ep.status();
    ep_ = std::move(ep).value();
  }
  // Sends one chunk as its two messages (header, payload) for transfer `id`.
  void Send(uint64_t id, const std::vector<uint8_t>& header, const std::vector<uint8_t>& payload) {
    ASSERT_TRUE(ep_->SubmitSend(transport::HeaderTag(id), header.data(), header.size(), 1).ok());
    ASSERT_TRUE(ep_->SubmitSend(transport::PayloadTag(id), payload.data(), payload.size(), 2).ok());
    // Until both sends complete, bounded by time, not by a count of progress
    // calls: under a sanitizer on a busy host a count runs out too early.
    std::vector<transport::Completion> c;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (c.size() < 2 && absl::Now() < deadline) {
      if (t_->Progress(&c) == 0) t_->Wait(absl::Milliseconds(1));
    }
    ASSERT_EQ(c.size(), 2u);
    for (const auto& done : c) EXPECT_TRUE(done.status.ok()) << done.status;
  }

 private:
  std::unique_ptr<transport::Transport> t_;
  std::unique_ptr<transport::Endpoint> ep_;
};

// Once the receiver has verified two chunks, cancels transfer `id` on both
// engines: both jobs end CANCELLED and every staging slot is free again.
inline void CancelMidTransferAndCheckSlots(Engine& tx, Engine& rx, uint64_t id, const TransferCounters& rc, Result& sr,
                                           Result& rr) {
  while (rc.chunks_done.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  tx.Cancel(Direction::kSend, id, absl::CancelledError("by test"));
  rx.Cancel(Direction::kRecv, id, absl::CancelledError("by test"));
  EXPECT_EQ(sr.Get().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(rr.Get().code(), absl::StatusCode::kCancelled);
  auto ts = tx.stats(), rs = rx.stats();
  EXPECT_EQ(ts.send_slots_free, ts.send_slots);
  EXPECT_EQ(rs.recv_slots_free, rs.recv_slots);
  EXPECT_EQ(ts.active_sends + rs.active_recvs, 0u);
}

inline std::vector<uint8_t> Header(const transport::ChunkHeader& h) {
  std::vector<uint8_t> m(transport::kChunkHeaderBytes);
  transport::EncodeChunkHeader(h, m.data());
  return m;
}

}  // namespace kvferry::pipeline
