#include "transport/pipeline/engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/mutex.h"
#include "kernels/checksum.h"
#include "transport/chunk.h"

namespace kvferry::pipeline {
namespace {

using transport::ChunkHeader;
using transport::Completion;
using transport::kChunkHeaderBytes;

// cookie = job key << 25 | slot << 1 | part (0: header message, 1: payload).
constexpr int kSlotBits = 24;
constexpr int kCookieShift = kSlotBits + 1;
constexpr uint64_t kSlotMask = (1ull << kSlotBits) - 1;
// Payloads start here in a staging slot (the header sits at offset 0).
constexpr size_t kPayloadOffset = 64;
// How long a failed send job waits for its in-flight sends before it aborts
// the endpoint they are on.
constexpr absl::Duration kSendDrainGrace = absl::Seconds(1);

// Fixed set of equally sized staging buffers, allocated and touched up front.
class StagingPool {
 public:
  StagingPool() = default;
  ~StagingPool() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  absl::Status Init(size_t slot_bytes, size_t count) {
    slot_bytes_ = (slot_bytes + 4095) & ~size_t{4095};
    bytes_ = slot_bytes_ * count;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrFormat("cannot map %d bytes of staging", bytes_));
    }
    base_ = static_cast<uint8_t*>(p);
    for (size_t i = count; i > 0; --i) free_.push_back(static_cast<int>(i - 1));
    count_ = count;
    return absl::OkStatus();
  }
  bool empty() const { return free_.empty(); }
  int Take() {
    int s = free_.back();
    free_.pop_back();
    return s;
  }
  void Give(int s) { free_.push_back(s); }
  uint8_t* ptr(int s) const { return base_ + static_cast<size_t>(s) * slot_bytes_; }
  size_t count() const { return count_; }
  size_t free_count() const { return free_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* base_ = nullptr;
  size_t slot_bytes_ = 0, bytes_ = 0, count_ = 0;
  std::vector<int> free_;
};

struct Job {
  Direction dir;
  uint64_t key = 0;  // engine-unique, high bits of cookies
  uint64_t id = 0;
  SegmentList segs;
  uint64_t chunk_bytes = 0;
  uint32_t chunk_count = 0;
  absl::Time deadline;
  std::shared_ptr<TransferCounters> counters;
  DoneCallback done;
  std::string peer_address;                 // send only
  std::shared_ptr<transport::Endpoint> ep;  // send only; shared per peer
  absl::Time failed_at = absl::InfiniteFuture();
  uint32_t next_seq = 0;   // send: next chunk to gather; recv: receives posted so far
  uint32_t completed = 0;  // chunks sent / verified
  // A chunk in flight: its two messages (header, payload) complete separately.
  struct Slot {
    uint32_t seq = 0;
    int pending = 2;
    size_t header_len = 0, payload_len = 0;
    absl::Status status;
  };
  absl::flat_hash_map<int, Slot> inflight;
  std::vector<bool> received;  // recv only
  bool ending = false;
  absl::Status result;

  uint64_t ChunkLen(uint32_t seq) const {
    const uint64_t off = static_cast<uint64_t>(seq) * chunk_bytes;
    return std::min(chunk_bytes, segs.total() - off);
  }
};

uint32_t ChunkCount(uint64_t total, uint64_t chunk) { return static_cast<uint32_t>((total + chunk - 1) / chunk); }

}  // namespace

class Engine::Impl {
 public:
  Impl(std::unique_ptr<transport::Transport> t, EngineOptions o)
      : transport_(std::move(t)), options_(o), address_(transport_->address()) {}

  absl::Status Init() {
    if (options_.chunk_bytes < 4096 || options_.chunk_bytes > (1ull << 30)) {
      return absl::InvalidArgumentError("chunk_bytes must be in [4 KiB, 1 GiB]");
    }
    if (options_.window == 0 || options_.window > 1024) {
      return absl::InvalidArgumentError("window must be in [1, 1024]");
    }
    const uint64_t slot = kPayloadOffset + options_.chunk_bytes;
    const uint64_t slots = options_.staging_bytes / slot;
    if (slots < 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("staging_bytes %d holds no chunk of %d bytes", options_.staging_bytes, options_.chunk_bytes));
    }
    if (slots > kSlotMask) return absl::InvalidArgumentError("too many staging slots");
    auto st = send_pool_.Init(slot, slots);
    if (!st.ok()) return st;
    st = recv_pool_.Init(slot, slots);
    if (!st.ok()) return st;
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  ~Impl() { Shutdown(); }

  void Shutdown() {
    {
      MutexLock l(&mu_);
      stop_ = true;
      posted_.store(true, std::memory_order_release);
    }
    transport_->Wake();
    if (thread_.joinable()) thread_.join();
  }

  std::string address() const { return address_; }
  const transport::Capabilities& capabilities() const { return transport_->capabilities(); }
  const EngineOptions& options() const { return options_; }

  absl::Status Validate(uint64_t id, const SegmentList& segs, uint64_t chunk_bytes, const DoneCallback& done) {
    if (id == 0 || (id & transport::kPayloadTagBit) != 0) {
      return absl::InvalidArgumentError("transfer id must be in (0, 2^63)");
    }
    if (!done) return absl::InvalidArgumentError("missing done callback");
    if (chunk_bytes == 0 || chunk_bytes > options_.chunk_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat("chunk_bytes %d not in [1, %d] (this daemon's --chunk_bytes)",
                                                        chunk_bytes, options_.chunk_bytes));
    }
    if (ChunkCount(segs.total(), chunk_bytes) > (1u << 31)) {
      return absl::InvalidArgumentError("transfer has too many chunks");
    }
    return absl::OkStatus();
  }

  absl::Status Start(Direction dir, uint64_t id, SegmentList segs, uint64_t chunk_bytes, absl::Time deadline,
                     std::shared_ptr<TransferCounters> counters, DoneCallback done, std::string peer) {
    auto st = Validate(id, segs, chunk_bytes, done);
    if (!st.ok()) return st;
    auto job = std::make_unique<Job>();
    job->dir = dir;
    job->id = id;
    job->segs = std::move(segs);
    job->chunk_bytes = chunk_bytes;
    job->chunk_count = ChunkCount(job->segs.total(), chunk_bytes);
    job->deadline = deadline;
    job->counters = counters ? std::move(counters) : std::make_shared<TransferCounters>();
    job->counters->chunks_total = job->chunk_count;
    job->done = std::move(done);
    job->peer_address = std::move(peer);
    if (dir == Direction::kRecv) job->received.assign(job->chunk_count, false);
    {
      MutexLock l(&mu_);
      if (stop_) return absl::UnavailableError("data plane is shutting down");
      if (ids_.contains({dir, id})) {
        return absl::AlreadyExistsError(absl::StrFormat("transfer %016x already active", id));
      }
      ids_.insert({{dir, id}, true});
      job->key = next_key_++;
      incoming_.push_back(std::move(job));
      posted_.store(true, std::memory_order_release);
    }
    transport_->Wake();
    return absl::OkStatus();
  }

  void Cancel(Direction dir, uint64_t id, absl::Status reason) {
    {
      MutexLock l(&mu_);
      cancels_.push_back({dir, id, std::move(reason)});
      posted_.store(true, std::memory_order_release);
    }
    transport_->Wake();
  }

  EngineStats stats() const {
    MutexLock l(&mu_);
    return stats_;
  }

 private:
  struct CancelCmd {
    Direction dir;
    uint64_t id;
    absl::Status reason;
  };

  StagingPool& pool(const Job& j) { return j.dir == Direction::kSend ? send_pool_ : recv_pool_; }

  void Run() {
    std::vector<Completion> completions;
    int idle = 0;
    uint32_t iteration = 0;
    PublishStats();
    for (;;) {
      // Commands from other threads: only take the lock when some are posted.
      std::deque<std::unique_ptr<Job>> incoming;
      std::vector<CancelCmd> cancels;
      bool stop = false;
      if (posted_.load(std::memory_order_acquire)) {
        MutexLock l(&mu_);
        incoming.swap(incoming_);
        cancels.swap(cancels_);
        stop = stop_;
        posted_.store(stop_, std::memory_order_relaxed);
      }
      for (auto& j : incoming) Admit(std::move(j));
      for (auto& c : cancels) {
        if (Job* j = Find(c.dir, c.id)) Fail(j, c.reason);
      }
      if (stop) {
        stopping_ = true;
        for (auto& [key, j] : jobs_) Fail(j.get(), absl::CancelledError("daemon shutting down"));
      }

      bool worked = !incoming.empty() || !cancels.empty();
      for (auto& [key, j] : jobs_) worked |= Pump(j.get());

      completions.clear();
      transport_->Progress(&completions);
      for (auto& c : completions) OnCompletion(c);
      worked |= !completions.empty();

      // Deadlines and drain timeouts: the clock is read every 64 iterations.
      if ((++iteration & 63) == 0 || worked) {
        const absl::Time now = absl::Now();
        for (auto& [key, j] : jobs_) {
          if (!j->ending && now > j->deadline) {
            Fail(j.get(), absl::DeadlineExceededError(
                              absl::StrFormat("deadline passed after %d of %d chunks", j->completed, j->chunk_count)));
          }
        }
        Reap(now);
      }
      if (worked) PublishStats();

      if (stopping_ && jobs_.empty()) break;
      if (worked) {
        idle = 0;
      } else if (++idle > 64 && jobs_.empty()) {
        transport_->Wait(absl::Milliseconds(50));
        idle = 0;
      }
    }
  }

  Job* Find(Direction dir, uint64_t id) {
    for (auto& [key, j] : jobs_) {
      if (j->dir == dir && j->id == id) return j.get();
    }
    return nullptr;
  }

  void Admit(std::unique_ptr<Job> j) {
    if (j->dir == Direction::kSend) {
      auto ep = EndpointFor(j->peer_address);
      if (!ep.ok()) {
        j->ending = true;
        j->result = absl::UnavailableError(absl::StrFormat("connect to receiver: %s", ep.status().message()));
      } else {
        j->ep = std::move(ep).value();
      }
    }
    KVF_XLOG(debug, "engine", j->id, "{} job: {} bytes in {} chunks of {}",
             j->dir == Direction::kSend ? "send" : "receive", j->segs.total(), j->chunk_count, j->chunk_bytes);
    const uint64_t key = j->key;
    jobs_[key] = std::move(j);
  }

  // Endpoints are cached per peer: connecting costs several round trips.
  absl::StatusOr<std::shared_ptr<transport::Endpoint>> EndpointFor(const std::string& address) {
    auto it = endpoints_.find(address);
    if (it != endpoints_.end() && it->second->health().ok()) return it->second;
    auto ep = transport_->Connect(address);
    if (!ep.ok()) return ep.status();
    if (endpoints_.size() >= 4096) endpoints_.clear();
    std::shared_ptr<transport::Endpoint> shared = std::move(ep).value();
    endpoints_[address] = shared;
    return shared;
  }

  // Force-closes a send job's endpoint (e.g. a receiver that stopped posting
  // receives): its in-flight sends, and those of other jobs to that peer, fail.
  void AbortEndpoint(Job* j) {
    auto it = endpoints_.find(j->peer_address);
    if (it != endpoints_.end() && it->second == j->ep) endpoints_.erase(it);
    j->ep->Abort();
  }

  static uint64_t Cookie(const Job& j, int slot, int part) {
    return (j.key << kCookieShift) | (static_cast<uint64_t>(slot) << 1) | static_cast<uint64_t>(part);
  }

  // Starts what the window and free slots allow. Returns true if it did anything.
  bool Pump(Job* j) {
    bool did = false;
    StagingPool& p = pool(*j);
    while (!j->ending && j->inflight.size() < options_.window && j->next_seq < j->chunk_count && !p.empty()) {
      const int slot = p.Take();
      uint8_t* buf = p.ptr(slot);
      const uint32_t seq = j->next_seq;
      absl::Status st;
      int posted = 0;
      if (j->dir == Direction::kSend) {
        const uint64_t off = static_cast<uint64_t>(seq) * j->chunk_bytes;
        const uint64_t len = j->ChunkLen(seq);
        // Zero copy when the chunk is one contiguous range of the source;
        // otherwise gather it into the slot, hashing while it is in cache.
        const uint8_t* payload = j->segs.Contiguous(off, len);
        uint64_t sum;
        if (payload != nullptr) {
          sum = Kvsum64(payload, len);
        } else {
          Kvsum64Builder b(buf + kPayloadOffset);
          j->segs.Gather(off, len, buf + kPayloadOffset, &b);
          sum = b.Finish(len);
          payload = buf + kPayloadOffset;
        }
        transport::EncodeChunkHeader(ChunkHeader{j->id, seq, j->chunk_count, off, len, sum}, buf);
        st = j->ep->SubmitSend(transport::HeaderTag(j->id), buf, kChunkHeaderBytes, Cookie(*j, slot, 0));
        if (st.ok()) {
          ++posted;
          st = j->ep->SubmitSend(transport::PayloadTag(j->id), payload, len, Cookie(*j, slot, 1));
        }
      } else {
        st = transport_->SubmitRecv(transport::HeaderTag(j->id), buf, kChunkHeaderBytes, Cookie(*j, slot, 0));
        if (st.ok()) {
          ++posted;
          st = transport_->SubmitRecv(transport::PayloadTag(j->id), buf + kPayloadOffset, j->chunk_bytes,
                                      Cookie(*j, slot, 1));
        }
      }
      if (posted > 0 || st.ok()) {
        Job::Slot& s = j->inflight[slot];
        s.seq = seq;
        s.pending = st.ok() ? 2 : 1;
        if (!st.ok()) s.status = st;
        ++j->next_seq;
        did = true;
      } else {
        p.Give(slot);
      }
      if (!st.ok()) {
        Fail(j, st);
        break;
      }
    }
    return did;
  }

  void OnCompletion(const Completion& c) {
    auto it = jobs_.find(c.cookie >> kCookieShift);
    if (it == jobs_.end()) {
      KVF_LOG(warn, "engine", "completion for unknown cookie {:x}", c.cookie);
      return;
    }
    Job* j = it->second.get();
    const int slot = static_cast<int>((c.cookie >> 1) & kSlotMask);
    const int part = static_cast<int>(c.cookie & 1);
    auto in = j->inflight.find(slot);
    if (in == j->inflight.end()) return;
    Job::Slot& s = in->second;
    if (!c.status.ok() && s.status.ok()) s.status = c.status;
    (part == 0 ? s.header_len : s.payload_len) = c.length;
    if (--s.pending > 0) return;

    // Both messages of the chunk are done.
    const Job::Slot done = s;
    j->inflight.erase(in);
    StagingPool& p = pool(*j);
    if (j->dir == Direction::kSend) {
      p.Give(slot);
      if (!done.status.ok()) {
        if (!j->ep->health().ok()) endpoints_.erase(j->peer_address);
        Fail(j, absl::UnavailableError(absl::StrFormat("sending chunk %d: %s", done.seq, done.status.message())));
        return;
      }
      bytes_sent_ += done.payload_len;
      Account(j, done.payload_len);
      return;
    }
    // Receive: everything below is untrusted bytes from the wire.
    absl::Status st = done.status;
    if (st.ok()) {
      st = Accept(j, p.ptr(slot), done.header_len, p.ptr(slot) + kPayloadOffset, done.payload_len);
    } else if (st.code() == absl::StatusCode::kOutOfRange) {
      st = absl::DataLossError(absl::StrFormat("message larger than expected: %s", st.message()));
    } else if (st.code() != absl::StatusCode::kCancelled) {
      // Transport failures (peer gone, endpoint timeout) are the sender's loss,
      // not this transfer's deadline.
      st = absl::UnavailableError(absl::StrFormat("receive from sender failed: %s", st.message()));
    }
    p.Give(slot);
    if (!st.ok()) {
      if (!j->ending) KVF_XLOG(warn, "engine", j->id, "rejecting chunk: {}", st.ToString());
      Fail(j, st);
    }
  }

  // Checks a received chunk and, only if everything holds, writes its payload.
  absl::Status Accept(Job* j, const uint8_t* header, size_t header_len, const uint8_t* payload, size_t len) {
    if (j->ending) return j->result;
    auto parsed = transport::ParseChunkHeader(header, header_len, len);
    if (!parsed.ok()) return parsed.status();
    const ChunkHeader& h = *parsed;
    if (h.transfer_id != j->id) {
      return absl::DataLossError(absl::StrFormat("chunk for transfer %016x on transfer %016x", h.transfer_id, j->id));
    }
    if (h.chunk_count != j->chunk_count) {
      return absl::DataLossError(absl::StrFormat("chunk says %d chunks, expected %d", h.chunk_count, j->chunk_count));
    }
    if (j->received[h.seq]) return absl::DataLossError(absl::StrFormat("duplicate chunk %d", h.seq));
    const uint64_t off = static_cast<uint64_t>(h.seq) * j->chunk_bytes;
    if (h.offset != off || h.length != j->ChunkLen(h.seq)) {
      return absl::DataLossError(absl::StrFormat("chunk %d covers [%d, +%d), expected [%d, +%d)", h.seq, h.offset,
                                                 h.length, off, j->ChunkLen(h.seq)));
    }
    const uint64_t sum = Kvsum64(payload, h.length);
    if (sum != h.checksum) {
      return absl::DataLossError(
          absl::StrFormat("checksum mismatch in chunk %d: got %016x, header says %016x", h.seq, sum, h.checksum));
    }
    j->segs.Scatter(off, h.length, payload);
    j->received[h.seq] = true;
    bytes_received_ += h.length;
    Account(j, h.length);
    return absl::OkStatus();
  }

  void Account(Job* j, uint64_t bytes) {
    ++j->completed;
    j->counters->bytes_done.fetch_add(bytes, std::memory_order_relaxed);
    j->counters->chunks_done.fetch_add(1, std::memory_order_relaxed);
    if (j->completed == j->chunk_count && !j->ending) {
      j->ending = true;
      j->result = absl::OkStatus();
    }
  }

  void Fail(Job* j, absl::Status reason) {
    if (j->ending) return;
    j->ending = true;
    j->result = std::move(reason);
    if (j->dir == Direction::kRecv) {
      for (auto& [slot, st] : j->inflight) {
        transport_->CancelRecv(Cookie(*j, slot, 0));
        transport_->CancelRecv(Cookie(*j, slot, 1));
      }
    } else {
      // In-flight sends normally drain (the receiver completes or cancels
      // them); Reap() aborts the endpoint if they do not within a grace period.
      j->failed_at = absl::Now();
    }
  }

  // Ends jobs that have nothing in flight any more.
  void Reap(absl::Time now) {
    std::vector<std::unique_ptr<Job>> ended;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      Job* j = it->second.get();
      const bool finished = j->ending || (j->chunk_count == 0);
      if (finished && !j->inflight.empty() && j->ep && now > j->failed_at + kSendDrainGrace) {
        KVF_XLOG(warn, "engine", j->id, "{} sends did not drain; closing the endpoint", j->inflight.size());
        AbortEndpoint(j);
        j->failed_at = absl::InfiniteFuture();
      }
      if (!finished || !j->inflight.empty()) {
        ++it;
        continue;
      }
      ended.push_back(std::move(it->second));
      jobs_.erase(it++);
    }
    if (ended.empty()) return;
    {
      MutexLock l(&mu_);
      for (const auto& j : ended) ids_.erase({j->dir, j->id});
    }
    PublishStats();  // callbacks below see accounting that includes these ends
    for (auto& j : ended) {
      if (!j->result.ok()) {
        KVF_XLOG(info, "engine", j->id, "{} ended: {}", j->dir == Direction::kSend ? "send" : "receive",
                 j->result.ToString());
      }
      j->ep.reset();
      j->done(j->result);
    }
  }

  void PublishStats() {
    EngineStats s;
    s.send_slots = static_cast<uint32_t>(send_pool_.count());
    s.send_slots_free = static_cast<uint32_t>(send_pool_.free_count());
    s.recv_slots = static_cast<uint32_t>(recv_pool_.count());
    s.recv_slots_free = static_cast<uint32_t>(recv_pool_.free_count());
    for (auto& [k, j] : jobs_) (j->dir == Direction::kSend ? s.active_sends : s.active_recvs)++;
    s.bytes_sent = bytes_sent_;
    s.bytes_received = bytes_received_;
    s.staging_bytes_allocated = send_pool_.bytes() + recv_pool_.bytes();
    MutexLock l(&mu_);
    stats_ = s;
  }

  std::unique_ptr<transport::Transport> transport_;
  const EngineOptions options_;
  const std::string address_;
  std::thread thread_;

  // Owned by the engine thread.
  StagingPool send_pool_, recv_pool_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Job>> jobs_;
  absl::flat_hash_map<std::string, std::shared_ptr<transport::Endpoint>> endpoints_;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0;
  bool stopping_ = false;
  // Set (under mu_) whenever a command is queued; read lock-free by the loop.
  std::atomic<bool> posted_{false};

  mutable Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<std::unique_ptr<Job>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<CancelCmd> cancels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<Direction, uint64_t>, bool> ids_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<transport::Transport> transport,
                                                       const EngineOptions& options) {
  if (transport == nullptr) return absl::InvalidArgumentError("null transport");
  auto impl = std::make_unique<Impl>(std::move(transport), options);
  auto st = impl->Init();
  if (!st.ok()) return st;
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::string Engine::address() const { return impl_->address(); }
const transport::Capabilities& Engine::capabilities() const { return impl_->capabilities(); }
const EngineOptions& Engine::options() const { return impl_->options(); }

absl::Status Engine::StartSend(SendSpec s) {
  return impl_->Start(Direction::kSend, s.transfer_id, std::move(s.source), s.chunk_bytes, s.deadline,
                      std::move(s.counters), std::move(s.done), std::move(s.peer_address));
}

absl::Status Engine::StartRecv(RecvSpec s) {
  return impl_->Start(Direction::kRecv, s.transfer_id, std::move(s.destination), s.chunk_bytes, s.deadline,
                      std::move(s.counters), std::move(s.done), "");
}

void Engine::Cancel(Direction dir, uint64_t transfer_id, absl::Status reason) {
  impl_->Cancel(dir, transfer_id, std::move(reason));
}

EngineStats Engine::stats() const { return impl_->stats(); }
void Engine::Shutdown() { impl_->Shutdown(); }

}  // namespace kvferry::pipeline
