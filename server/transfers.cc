#include "server/transfers.h"

#include <sys/random.h>

#include <vector>

#include "absl/strings/str_format.h"

namespace kvferry::server {

bool IsTerminal(v1::TransferState s) {
  return s == v1::TRANSFER_STATE_DONE || s == v1::TRANSFER_STATE_FAILED || s == v1::TRANSFER_STATE_CANCELLED ||
         s == v1::TRANSFER_STATE_EXPIRED;
}

namespace {
uint64_t RandomId() {
  uint64_t v = 0;
  while (v == 0) {  // 63-bit ids: the top bit tags payload messages on the wire
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = 0;
    v &= ~(1ull << 63);
  }
  return v;
}
}  // namespace

std::shared_ptr<TransferTable::Record> TransferTable::Create(std::shared_ptr<Pool> pool, std::string peer,
                                                             uint64_t total_bytes) {
  auto r = std::make_shared<Record>();
  r->pool = std::move(pool);
  r->peer = std::move(peer);
  r->total_bytes = total_bytes;
  r->started = absl::Now();
  MutexLock l(&mu_);
  do {
    r->id = RandomId();
  } while (records_.contains(r->id));
  records_[r->id] = r;
  return r;
}

void TransferTable::SetSenderMetrics(uint64_t id, const v1::StartSendResponse& sender) {
  MutexLock l(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return;
  it->second->sender_encode_us = sender.encode_us();
  it->second->sender_stalls = sender.stalls();
  it->second->sender_chunks_split = sender.chunks_split();
  it->second->sender_first_payload_us = sender.first_payload_us();
}

void TransferTable::SetRunning(uint64_t id) {
  MutexLock l(&mu_);
  auto it = records_.find(id);
  if (it != records_.end() && it->second->state == v1::TRANSFER_STATE_PENDING) {
    it->second->state = v1::TRANSFER_STATE_RUNNING;
  }
}

void TransferTable::SetCancelPeer(uint64_t id, std::function<void()> fn) {
  MutexLock l(&mu_);
  auto it = records_.find(id);
  if (it != records_.end() && !IsTerminal(it->second->state)) it->second->cancel_peer = std::move(fn);
}

bool TransferTable::Finish(uint64_t id, const absl::Status& outcome) {
  std::function<void()> cancel_peer;
  {
    MutexLock l(&mu_);
    auto it = records_.find(id);
    if (it == records_.end() || IsTerminal(it->second->state)) return false;
    Record& r = *it->second;
    switch (outcome.code()) {
      case absl::StatusCode::kOk:
        r.state = v1::TRANSFER_STATE_DONE;
        ++done_;
        bytes_received_ += r.total_bytes;
        break;
      case absl::StatusCode::kCancelled:
        r.state = v1::TRANSFER_STATE_CANCELLED;
        ++failed_;
        break;
      case absl::StatusCode::kDeadlineExceeded:
        r.state = v1::TRANSFER_STATE_EXPIRED;
        ++failed_;
        break;
      default:
        r.state = v1::TRANSFER_STATE_FAILED;
        ++failed_;
    }
    r.error = outcome.ok() ? "" : outcome.ToString();
    r.ended = absl::Now();
    r.pool.reset();
    cancel_peer = std::move(r.cancel_peer);
    r.cancel_peer = nullptr;
  }
  // A receiver that stopped early tells the sender to stop too.
  if (!outcome.ok() && cancel_peer) cancel_peer();
  return true;
}

v1::TransferStatus TransferTable::ToProto(const Record& r) const {
  v1::TransferStatus s;
  s.set_transfer_id(r.id);
  s.set_state(r.state);
  s.set_error(r.error);
  s.set_total_bytes(r.total_bytes);
  s.set_bytes_done(r.counters->bytes_done.load(std::memory_order_relaxed));
  s.set_chunks_total(r.counters->chunks_total.load(std::memory_order_relaxed));
  s.set_chunks_done(r.counters->chunks_done.load(std::memory_order_relaxed));
  const absl::Time end = IsTerminal(r.state) ? r.ended : absl::Now();
  s.set_elapsed_us(static_cast<uint64_t>(absl::ToInt64Microseconds(end - r.started)));
  s.set_peer_address(r.peer);
  s.set_compression(CompressionToProto(r.compression));
  const auto& c = *r.counters;
  s.set_wire_bytes(c.wire_bytes.load(std::memory_order_relaxed));
  s.set_chunks_encoded(c.chunks_encoded.load(std::memory_order_relaxed));
  s.set_decode_us(c.codec_ns.load(std::memory_order_relaxed) / 1000);
  s.set_first_payload_us(c.first_payload_ns.load(std::memory_order_relaxed) / 1000);
  s.set_receiver_stalls(c.stalls.load(std::memory_order_relaxed));
  s.set_encode_us(r.sender_encode_us);
  s.set_sender_stalls(r.sender_stalls);
  s.set_sender_chunks_split(static_cast<uint32_t>(r.sender_chunks_split));
  s.set_sender_first_payload_us(r.sender_first_payload_us);
  return s;
}

absl::StatusOr<v1::TransferStatus> TransferTable::Get(uint64_t id) const {
  MutexLock l(&mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return absl::NotFoundError(absl::StrFormat("no transfer %016x", id));
  return ToProto(*it->second);
}

absl::StatusOr<v1::TransferStatus> TransferTable::WaitChange(uint64_t id, const v1::TransferStatus& last,
                                                             absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  MutexLock l(&mu_);
  for (;;) {
    auto it = records_.find(id);
    if (it == records_.end()) return absl::NotFoundError(absl::StrFormat("no transfer %016x", id));
    const Record& r = *it->second;
    const bool changed =
        r.state != last.state() || r.counters->chunks_done.load(std::memory_order_relaxed) != last.chunks_done();
    if (changed || absl::Now() >= until) return ToProto(r);
    // Progress counters are updated without this lock: re-check every 20 ms.
    auto state_changed = [&r, &last]() { return r.state != last.state(); };
    mu_.AwaitWithTimeout(state_changed, std::min(absl::Milliseconds(20), until - absl::Now()));
  }
}

void TransferTable::Prune(absl::Duration age, size_t keep) {
  MutexLock l(&mu_);
  const absl::Time cutoff = absl::Now() - age;
  std::vector<std::pair<absl::Time, uint64_t>> ended;
  for (auto it = records_.begin(); it != records_.end();) {
    if (IsTerminal(it->second->state) && it->second->ended < cutoff) {
      records_.erase(it++);
    } else {
      if (IsTerminal(it->second->state)) ended.push_back({it->second->ended, it->first});
      ++it;
    }
  }
  if (ended.size() > keep) {
    std::sort(ended.begin(), ended.end());
    for (size_t i = 0; i < ended.size() - keep; ++i) records_.erase(ended[i].second);
  }
}

TransferTable::Counts TransferTable::counts() const {
  MutexLock l(&mu_);
  Counts c;
  for (const auto& [id, r] : records_) c.active += IsTerminal(r->state) ? 0 : 1;
  c.done = done_;
  c.failed = failed_;
  c.bytes_received = bytes_received_;
  return c;
}

v1::Compression CompressionToProto(pipeline::Compression c) {
  switch (c) {
    case pipeline::Compression::kRaw:
      return v1::COMPRESSION_RAW;
    case pipeline::Compression::kCompressed:
      return v1::COMPRESSION_COMPRESSED;
    case pipeline::Compression::kAdaptive:
      return v1::COMPRESSION_ADAPTIVE;
  }
  return v1::COMPRESSION_RAW;
}

absl::StatusOr<pipeline::Compression> CompressionFromProto(v1::Compression c, pipeline::Compression fallback) {
  switch (c) {
    case v1::COMPRESSION_DEFAULT:
      return fallback;
    case v1::COMPRESSION_RAW:
      return pipeline::Compression::kRaw;
    case v1::COMPRESSION_COMPRESSED:
      return pipeline::Compression::kCompressed;
    case v1::COMPRESSION_ADAPTIVE:
      return pipeline::Compression::kAdaptive;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("unknown compression %d", static_cast<int>(c)));
  }
}

}  // namespace kvferry::server
