#include "transport/pipeline/engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/mutex.h"
#include "kernels/checksum.h"
#include "kernels/codec.h"
#include "transport/chunk.h"
#include "transport/gpu/gpu.h"

namespace kvferry::pipeline {
namespace {

using transport::ChunkHeader;
using transport::Completion;
using transport::kChunkHeaderBytes;

// cookie = job key << 25 | slot << 1 | part (0: header message, 1: payload).
constexpr int kSlotBits = 24;
constexpr int kCookieShift = kSlotBits + 1;
constexpr uint64_t kSlotMask = (1ull << kSlotBits) - 1;
// Payloads start here in a staging slot. Send: the header message is built at
// offset 0. Receive: a split chunk's codec header is put back just before its
// raw plane, at kPayloadOffset - 64.
constexpr size_t kPayloadOffset = 128;
// How long a failed send job waits for its in-flight sends before it aborts
// the endpoint they are on.
constexpr absl::Duration kSendDrainGrace = absl::Seconds(1);

uint64_t Align4K(uint64_t n) { return (n + 4095) & ~uint64_t{4095}; }

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
    slot_bytes_ = Align4K(slot_bytes);
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

// Threads that run tasks posted by the engine thread, one per worker; a task
// gets its thread's worker (CPU codec: none; GPU: its ChunkWorker, with the
// stream and buffers that thread owns). Results travel back through the
// engine's completion queue (see Impl::PostCodecDone).
template <typename Worker>
class WorkerPool {
 public:
  using Task = std::function<void(Worker&)>;
  explicit WorkerPool(std::vector<std::unique_ptr<Worker>> workers) : workers_(std::move(workers)) {
    for (auto& w : workers_) threads_.emplace_back([this, w = w.get()] { Work(w); });
  }
  ~WorkerPool() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Post(Task task) {
    MutexLock l(&mu_);
    tasks_.push_back(std::move(task));
  }
  uint32_t size() const { return static_cast<uint32_t>(threads_.size()); }

 private:
  void Work(Worker* w) {
    for (;;) {
      Task task;
      {
        MutexLock l(&mu_);
        mu_.Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, nothing left
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task(*w);
    }
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

// CPU codec threads keep nothing between tasks.
struct CpuWorker {};
using CodecPool = WorkerPool<CpuWorker>;
using GpuPool = WorkerPool<gpu::ChunkWorker>;

std::vector<gpu::DeviceRange> DeviceRanges(const SegmentList& segs, uint64_t off, uint64_t len) {
  std::vector<gpu::DeviceRange> out;
  for (const Segment& p : segs.Pieces(off, len)) out.push_back({p.data, p.len});
  return out;
}

// Adaptive compression. With a codec of C input bytes/s (all codec threads), a
// link of L wire bytes/s and a ratio R, sending a fraction f of the chunks
// compressed takes, per input byte, f / C of codec time and (f / R + 1 - f) / L
// of link time; the two run in parallel, so the transfer is fastest where they
// are equal:
//     f = (1 / L) / (1 / C + 1 / L - 1 / (R L)),   clamped to [0, 1].
// C is the smaller of (per-thread rate x threads) and the measured aggregate
// (input bytes over the time any encode ran), which shows cores shared with
// other work. L is the best of the job's rate and the peer's recent best, as
// a receiver busy decoding slows sends and would hide the link's capacity.
// f = 1 when the codec is much faster than the link, f -> 0 when it is much
// slower or the data does not shrink. A credit counter spreads the compressed
// chunks evenly. C and R come from this engine's encodes (EWMA), L from the
// job's own sends (wire bytes over the time sends were in flight) or, before
// it has any, from the last job to the same peer. Unknown C or R: one probe
// chunk is compressed while the others go raw. Where the predicted speed-up
// is under 15% the model's simplifications (in-flight window, codec threads
// sharing cores with the engine, the receiver's decode) outweigh it, so f is
// 0. C and R older than 10 s are measured again by one probe chunk.
// One codec (the CPU's, or one GPU's); the link estimates are per peer.
// A pool of workers on one kind of task, all together: bytes finished over
// the time any such task was in flight (counted from posting). Lower than the
// per-task rate x workers when the workers share cores or a GPU with other
// work. It under-reads a pool whose tasks seldom overlap (it is then the rate
// of one worker); measuring only while every worker is busy was tried and
// made staged GPU pulls compress too little (docs/performance.md).
struct PoolRate {
  uint32_t running = 0;
  absl::Time since;
  absl::Duration busy;
  uint64_t bytes = 0;
  uint32_t count = 0;

  void Start() {
    if (running++ == 0) since = absl::Now();
  }
  void Done(uint64_t b) {
    if (running == 0) return;
    bytes += b;
    ++count;
    if (--running == 0) busy += absl::Now() - since;
  }
  double Rate() const {
    const double secs = absl::ToDoubleSeconds(busy);
    return count >= 2 && secs > 0 ? bytes / secs : 0;
  }
};

// Moving average of measured rates: the first sample, then 80/20.
inline void Ewma(double* avg, double sample) { *avg = *avg == 0 ? sample : 0.8 * *avg + 0.2 * sample; }

struct CodecRate {
  double codec_bps = 0;  // per codec thread, input bytes/s
  double ratio = 0;
  absl::Time measured_at = absl::InfinitePast();
  PoolRate pool;  // all encodes together
  double Aggregate() const { return pool.Rate(); }

  // GPU pools: a raw chunk's worker time (gather, checksum) per input byte.
  double raw_bps = 0;
  void AddRaw(uint64_t in_bytes, uint64_t ns) {
    if (ns == 0) return;
    Ewma(&raw_bps, in_bytes * 1e9 / ns);
  }

  void AddEncode(uint64_t in_bytes, uint64_t out_bytes, uint64_t ns) {
    if (ns == 0 || out_bytes == 0) return;
    Ewma(&codec_bps, in_bytes * 1e9 / ns);
    Ewma(&ratio, static_cast<double>(in_bytes) / out_bytes);
    measured_at = absl::Now();
  }
};

// One kind of receive task (decode, or a GPU pool's raw write): its rate per
// task, and the pool's (PoolRate).
struct TaskRate {
  double per_task_bps = 0;
  PoolRate pool;

  void Start() { pool.Start(); }
  void Done(uint64_t b, uint64_t ns, bool ok) {
    pool.Done(ok ? b : 0);
    if (ok && ns != 0) Ewma(&per_task_bps, b * 1e9 / ns);
  }
  double Total(uint32_t workers) const {
    double t = per_task_bps * workers;
    if (const double full = pool.Rate(); full > 0) t = std::min(t, full);
    return t;
  }
};

// Where a job's codec work runs.
constexpr int kCpu = -1;

constexpr double kMinAdaptiveGain = 1.15;
constexpr uint32_t kMinSendsForLinkEstimate = 8;
// Codec rate and ratio older than this are measured again (one probe chunk).
constexpr absl::Duration kCodecEstimateLifetime = absl::Seconds(10);

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
  CodecSpec codec;                          // send only
  int device = kCpu;                        // >= 0: segments are device memory
  GpuPool* gpu = nullptr;                   // that device's workers
  uint8_t* dev_staging = nullptr;           // direct: device mirror of this direction's staging
  absl::Time started;
  // Send: the link's busy time (some payload in flight) and its wire bytes.
  uint32_t sends_in_flight = 0;
  absl::Time busy_since;
  absl::Duration busy;
  uint64_t wire_done = 0;
  uint32_t sends_done = 0;
  double credit = 0;           // adaptive: compressed chunks owed
  double peer_decode_bps = 0, peer_raw_bps = 0;  // send, adaptive: the receiver's rates (0: unknown)
  bool probe_pending = false;  // adaptive: a probe chunk is being encoded
  bool stalled = false;        // counted a stall since the last chunk started
  absl::Time failed_at = absl::InfiniteFuture();
  uint32_t next_seq = 0;   // send: next chunk to gather; recv: receives posted so far
  uint32_t completed = 0;  // chunks sent / verified
  // A chunk in flight: its two messages (payload, header) complete separately.
  struct Slot {
    uint32_t seq = 0;  // send: the chunk; receive: the posting index, then the chunk being decoded
    // What the slot waits for. Receive: 2 messages, then 1 while a codec
    // thread has it. Send: the codec task, each message submitted, and a
    // header queued behind earlier chunks' (see wire_order).
    int pending = 2;
    bool in_codec = false;
    bool lead = false;           // send: a split chunk's raw plane went early
    bool lead_deferred = false;  // send: a split chunk's plane came while the link was busy; it goes with the rest
    const uint8_t* payload = nullptr;  // send: the payload message (whole chunks)
    uint64_t payload_bytes = 0;
    bool header_ready = false, header_done = false, payload_done = false;  // send
    size_t header_bytes = 0;  // send: the header message's size (48, or more with a split tail)
    size_t header_len = 0, payload_len = 0;
    absl::Status status;
  };
  absl::flat_hash_map<int, Slot> inflight;
  // Send: slots in the order their payload messages went out. Headers go in
  // the same order, so that the receiver pairs the k-th of each; a header
  // that is ready waits here behind earlier chunks whose exponents are still
  // being coded.
  std::deque<int> wire_order;
  int open_lead = -1;                 // send: the slot whose raw plane went early and whose header has not followed
  std::deque<int> held;               // send: whole chunks waiting for that header
  std::atomic<bool> wire_idle{true};  // send: nothing in flight or waiting (read by codec threads)
  std::vector<bool> received;         // recv only
  bool ending = false;
  absl::Status result;

  uint64_t ChunkLen(uint32_t seq) const {
    const uint64_t off = static_cast<uint64_t>(seq) * chunk_bytes;
    return std::min(chunk_bytes, segs.total() - off);
  }
};

absl::Status ChecksumMismatch(uint64_t seq, uint64_t got, uint64_t want) {
  return absl::DataLossError(
      absl::StrFormat("checksum mismatch in chunk %d: got %016x, header says %016x", seq, got, want));
}

uint32_t ChunkCount(uint64_t total, uint64_t chunk) { return static_cast<uint32_t>((total + chunk - 1) / chunk); }

// What a codec thread hands back to the engine thread.
struct CodecDone {
  uint64_t key = 0;
  int slot = 0;
  uint64_t ns = 0;
  absl::Status status;
  // Send: the payload to put on the wire.
  const uint8_t* payload = nullptr;
  uint64_t len = 0, sum = 0;
  bool encoded = false;
  bool encode_task = false;               // send: the task tried to encode
  uint64_t raw_len = 0, encoded_len = 0;  // what the encoder saw and produced (0: it failed)
  bool written = false;                   // receive: the task wrote the destination itself (GPU)
  // Split-send. `lead`: not the task's end but its raw plane (payload, len)
  // ready for the wire. `split`: the task's chunk went that way; its header
  // message (header_len bytes: the 48-byte header's room, then the codec
  // chunk's header and what follows its raw plane) is in the slot.
  bool lead = false, split = false;
  uint64_t header_len = 0;
  // Receive: the task is measured for Engine::receive_rates (memory on `device`).
  bool metered = false;
  uint64_t wire_len = 0;  // receive, direct: the payload's bytes on the wire
  int device = -1;
};

}  // namespace

const char* CompressionName(Compression c) {
  switch (c) {
    case Compression::kRaw:
      return "raw";
    case Compression::kCompressed:
      return "compressed";
    case Compression::kAdaptive:
      return "adaptive";
  }
  return "?";
}

double AdaptiveCompressedFraction(const AdaptiveRates& r) {
  if (!(r.ratio > 1.0) || !(r.encode_bps > 0) || !(r.link_bps > 0)) return 0;
  auto inv = [](double bps) { return bps > 0 && std::isfinite(bps) ? 1 / bps : 0.0; };
  // Time per byte of each resource: a + b f.
  struct Line {
    double a, b;
  };
  std::vector<Line> lines = {{inv(r.raw_bps), inv(r.encode_bps) - inv(r.raw_bps)},
                             {inv(r.link_bps), -(1 - 1 / r.ratio) * inv(r.link_bps)}};
  if (r.decode_bps > 0) lines.push_back({inv(r.recv_raw_bps), inv(r.decode_bps) - inv(r.recv_raw_bps)});
  auto slowest = [&](double f) {
    double t = 0;
    for (const Line& l : lines) t = std::max(t, l.a + l.b * f);
    return t;
  };
  // The largest of lines is convex and piecewise linear: its minimum over
  // [0, 1] is at an end or where two lines cross.
  std::vector<double> candidates = {0, 1};
  for (size_t i = 0; i < lines.size(); ++i) {
    for (size_t j = i + 1; j < lines.size(); ++j) {
      const double db = lines[i].b - lines[j].b;
      if (db == 0) continue;
      const double f = (lines[j].a - lines[i].a) / db;
      if (f > 0 && f < 1) candidates.push_back(f);
    }
  }
  double best = 0;
  for (double f : candidates) {
    if (slowest(f) < slowest(best)) best = f;
  }
  // The model ignores the window and CPU contention: compress only where it
  // promises a clear gain.
  if (!(best > 0) || slowest(0) / slowest(best) < kMinAdaptiveGain) return 0;
  return best;
}

absl::StatusOr<Compression> ParseCompression(absl::string_view name) {
  if (name == "raw") return Compression::kRaw;
  if (name == "compressed") return Compression::kCompressed;
  if (name == "adaptive") return Compression::kAdaptive;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown compression '%s' (raw, compressed or adaptive)", std::string(name)));
}

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
    if (options_.codec_threads > 64) return absl::InvalidArgumentError("codec_threads must be in [0, 64]");
    // Send slot: the header message (with a split chunk's tail) from offset
    // 0, the gathered raw chunk at kPayloadOffset, the encoded chunk (CPU or
    // GPU codec) at second_off_. Receive slot: the payload at kPayloadOffset
    // (room for a whole codec chunk, as split chunks are joined there), the
    // header message at second_off_, where the decoded chunk goes later.
    second_off_ = kPayloadOffset + Align4K(codec::MaxSplitEncodedBytes(options_.chunk_bytes));
    const uint64_t send_slot = second_off_ + codec::MaxSplitEncodedBytes(options_.chunk_bytes);
    const uint64_t recv_slot = second_off_ + options_.chunk_bytes;
    const uint64_t send_slots = options_.staging_bytes / Align4K(send_slot);
    const uint64_t recv_slots = options_.staging_bytes / Align4K(recv_slot);
    if (send_slots < 1 || recv_slots < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "staging_bytes %d holds no chunk slot of %d bytes (chunk_bytes %d%s)", options_.staging_bytes,
          std::max(send_slot, recv_slot), options_.chunk_bytes, options_.codec_threads ? ", with codec room" : ""));
    }
    if (send_slots > kSlotMask || recv_slots > kSlotMask) return absl::InvalidArgumentError("too many staging slots");
    gpu_direct_ = options_.gpu_direct && transport_->capabilities().cuda_memory;
    auto st = send_pool_.Init(send_slot, send_slots);
    if (!st.ok()) return st;
    st = recv_pool_.Init(recv_slot, recv_slots);
    if (!st.ok()) return st;
    if (options_.codec_threads > 0) {
      std::vector<std::unique_ptr<CpuWorker>> workers;
      for (uint32_t i = 0; i < options_.codec_threads; ++i) workers.push_back(std::make_unique<CpuWorker>());
      codec_ = std::make_unique<CodecPool>(std::move(workers));
    }
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
                     std::shared_ptr<TransferCounters> counters, DoneCallback done, std::string peer,
                     CodecSpec codec_spec, int device, double peer_decode_bps = 0, double peer_raw_bps = 0) {
    auto st = Validate(id, segs, chunk_bytes, done);
    if (!st.ok()) return st;
    GpuPool* gpu = nullptr;
    if (device != kCpu) {
      MutexLock l(&gpu_mu_);
      auto it = gpus_.find(device);
      if (it == gpus_.end()) {
        return absl::FailedPreconditionError(absl::StrFormat("GPU %d is not prepared for transfers", device));
      }
      gpu = it->second.get();
    }
    if (codec_spec.mode != Compression::kRaw) {
      if (!codec_ && gpu == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrFormat("%s transfer on a data plane without codec threads", CompressionName(codec_spec.mode)));
      }
      if (!codec::Info(codec_spec.dtype).ok()) return absl::InvalidArgumentError("unknown codec dtype");
    }
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
    job->codec = codec_spec;
    job->device = device;
    job->gpu = gpu;
    // From a peer: untrusted. Anything outside 1 MB/s .. 10 TB/s counts as unknown.
    auto usable = [](double bps) { return bps >= 1e6 && bps <= 1e13 ? bps : 0.0; };
    job->peer_decode_bps = usable(peer_decode_bps);
    job->peer_raw_bps = usable(peer_raw_bps);
    if (gpu != nullptr && gpu_direct_) {
      MutexLock l(&gpu_mu_);
      const DirectStaging& d = direct_.at(device);
      job->dev_staging = (dir == Direction::kSend ? d.send : d.recv)->data();
    }
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

  absl::Status PrepareDevice(int device) {
    MutexLock prepare(&prepare_mu_);  // one at a time; gpu_mu_ only guards the map
    {
      MutexLock l(&gpu_mu_);
      if (gpus_.contains(device)) return absl::OkStatus();
    }
    if (options_.gpu_workers == 0) {
      return absl::FailedPreconditionError("this data plane has no GPU workers (--gpu_workers=0)");
    }
    if (pinned_.empty()) {  // staging is shared by every device: pin it once
      for (StagingPool* p : {&send_pool_, &recv_pool_}) {
        auto r = gpu::PinnedRange::Pin(p->ptr(0), p->bytes());
        if (!r.ok()) return r.status();
        pinned_.push_back(std::move(r).value());
      }
    }
    std::vector<std::unique_ptr<gpu::ChunkWorker>> workers;
    uint64_t device_bytes = 0;
    for (uint32_t i = 0; i < options_.gpu_workers; ++i) {
      auto w = gpu::ChunkWorker::Create(device, options_.chunk_bytes);
      if (!w.ok()) return w.status();
      device_bytes += (*w)->device_bytes();
      workers.push_back(std::move(w).value());
    }
    DirectStaging direct;
    if (gpu_direct_) {  // device mirrors of both staging pools
      auto s = gpu::DeviceBuffer::Allocate(device, send_pool_.bytes());
      if (!s.ok()) return s.status();
      auto r = gpu::DeviceBuffer::Allocate(device, recv_pool_.bytes());
      if (!r.ok()) return r.status();
      direct.send = std::move(s).value();
      direct.recv = std::move(r).value();
      device_bytes += send_pool_.bytes() + recv_pool_.bytes();
    }
    {
      MutexLock l(&gpu_mu_);
      gpus_[device] = std::make_unique<GpuPool>(std::move(workers));
      direct_[device] = std::move(direct);
      gpu_devices_.store(static_cast<uint32_t>(gpus_.size()), std::memory_order_relaxed);
      gpu_bytes_.fetch_add(device_bytes, std::memory_order_relaxed);
    }
    KVF_LOG(info, "engine", "GPU {} ready: {} workers holding {} bytes of device memory, {} bytes of staging {}",
            device, options_.gpu_workers, device_bytes, send_pool_.bytes() + recv_pool_.bytes(),
            gpu_direct_ ? "mirrored on the device (chunks go on the wire from GPU memory)" : "pinned");
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

  Engine::ReceiveRates receive_rates(int device) const {
    MutexLock l(&rates_mu_);
    auto it = recv_rates_.find(device);
    return it == recv_rates_.end() ? Engine::ReceiveRates{} : it->second;
  }

  EngineStats stats() const {
    EngineStats s;
    {
      MutexLock l(&mu_);
      s = stats_;
    }
    // Set by PrepareDevice (another thread): current even before the engine
    // thread publishes again.
    s.gpu_devices = gpu_devices_.load(std::memory_order_relaxed);
    s.gpu_bytes_allocated = gpu_bytes_.load(std::memory_order_relaxed);
    s.gpu_direct = gpu_direct_;
    return s;
  }

 private:
  struct CancelCmd {
    Direction dir;
    uint64_t id;
    absl::Status reason;
  };

  StagingPool& pool(const Job& j) { return j.dir == Direction::kSend ? send_pool_ : recv_pool_; }
  // Direct jobs: the device mirror of staging slot `slot` (same offset).
  uint8_t* DevSlot(const Job& j, int slot) {
    const StagingPool& p = pool(j);
    return j.dev_staging + (p.ptr(slot) - p.ptr(0));
  }

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

      if (codec_posted_.load(std::memory_order_acquire)) {
        std::vector<CodecDone> done;
        {
          MutexLock l(&codec_mu_);
          done.swap(codec_done_);
          codec_posted_.store(false, std::memory_order_relaxed);
        }
        for (auto& d : done) OnCodecDone(d);
        worked |= !done.empty();
      }

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
      } else if (idle > 64 && in_codec_ > 0) {
        // Waiting on codec threads: leave them the CPU. A codec result or a
        // network event ends the wait early.
        transport_->Wait(absl::Milliseconds(1));
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
    j->started = absl::Now();
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
    while (!j->ending && j->inflight.size() < options_.window && j->next_seq < j->chunk_count) {
      if (p.empty()) {
        if (!j->stalled) {
          j->stalled = true;
          j->counters->stalls.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      }
      j->stalled = false;
      const int slot = p.Take();
      uint8_t* buf = p.ptr(slot);
      const uint32_t seq = j->next_seq;
      if (j->dir == Direction::kSend && (j->gpu != nullptr || ShouldCompress(j))) {
        // Device memory always goes through a GPU worker, compressed or not.
        const bool compress = j->gpu == nullptr || ShouldCompress(j);
        Job::Slot& s = j->inflight[slot];
        s.seq = seq;
        s.pending = 1;
        s.in_codec = true;
        ++j->next_seq;
        ++in_codec_;
        if (compress) codec_rates_[j->device].pool.Start();
        PostEncode(j, slot, seq, buf, compress);
        did = true;
        continue;
      }
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
        Job::Slot& s = j->inflight[slot];
        s.seq = seq;
        s.pending = 0;
        ++j->next_seq;
        did = true;
        const absl::Status st = SendWhole(j, slot, ChunkHeader{j->id, seq, j->chunk_count, off, len, sum, 0}, payload,
                                          len, kChunkHeaderBytes);
        if (!st.ok()) {
          Fail(j, st);
          break;
        }
        continue;
      }
      // Receive: the payload into the slot's first area, the header message
      // (48 bytes, or more for a split chunk) into its second.
      absl::Status st = transport_->SubmitRecv(transport::HeaderTag(j->id), buf + second_off_, options_.chunk_bytes,
                                               Cookie(*j, slot, 0));
      int posted = 0;
      if (st.ok()) {
        ++posted;
        const bool direct = j->dev_staging != nullptr;
        st = transport_->SubmitRecv(transport::PayloadTag(j->id),
                                    (direct ? DevSlot(*j, slot) : buf) + kPayloadOffset, j->chunk_bytes,
                                    Cookie(*j, slot, 1), direct);
      }
      if (posted > 0) {
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

  // ---- Sending. A chunk's payload message goes out first, its header message
  // after it; headers leave in the order the payloads did (wire_order).
  // Split-send puts a raw plane on the wire early only where the link would
  // otherwise idle: when nothing of the job is in flight. While that early
  // plane is on the wire and its chunk's header has not followed, the other
  // chunks wait in `held`; sent before the header, they would delay it (the
  // connection is one byte stream) and so the whole chunk.

  // A whole chunk: the payload (for a split chunk whose plane did not go
  // early, the plane), and the header (48 bytes, written into the slot, plus
  // a split chunk's tail). Held while an early plane is open.
  absl::Status SendWhole(Job* j, int slot, const ChunkHeader& h, const uint8_t* payload, uint64_t len,
                         size_t header_bytes) {
    Job::Slot& s = WriteHeader(j, slot, h, header_bytes);
    s.payload = payload;
    s.payload_bytes = len;
    if (j->open_lead >= 0) {
      ++s.pending;  // held
      j->held.push_back(slot);
      UpdateWireIdle(j);
      return absl::OkStatus();
    }
    return SubmitWhole(j, slot);
  }

  absl::Status SubmitWhole(Job* j, int slot) {
    Job::Slot& s = j->inflight[slot];
    if (auto st = SubmitPayload(j, slot, s.payload, s.payload_bytes); !st.ok()) {
      ReleaseIfIdle(j, slot);
      return st;
    }
    return HeaderReady(j, slot);
  }

  // The early plane's header left or its send completed: release held chunks.
  absl::Status CloseLead(Job* j) {
    j->open_lead = -1;
    absl::Status st;
    while (st.ok() && !j->held.empty()) {
      const int slot = j->held.front();
      j->held.pop_front();
      --j->inflight[slot].pending;
      st = SubmitWhole(j, slot);
    }
    UpdateWireIdle(j);
    return st;
  }

  // Whether a raw plane could leave now: nothing of the job in flight or waiting.
  static bool WireIdle(const Job& j) { return j.sends_in_flight == 0 && j.held.empty() && j.open_lead < 0; }
  // The same, for codec threads (SplitHook).
  static void UpdateWireIdle(Job* j) { j->wire_idle.store(WireIdle(*j), std::memory_order_relaxed); }

  absl::Status SubmitPayload(Job* j, int slot, const uint8_t* payload, uint64_t len) {
    Job::Slot& s = j->inflight[slot];
    absl::Status st =
        j->ep->SubmitSend(transport::PayloadTag(j->id), payload, len, Cookie(*j, slot, 1), j->dev_staging != nullptr);
    if (!st.ok()) {
      s.status = st;
      return st;
    }
    ++s.pending;
    BusyStart(j);
    MarkFirstPayload(j);
    j->wire_order.push_back(slot);
    return absl::OkStatus();
  }

  // Writes the chunk header into the slot; its message is `bytes` long (a
  // split chunk's tail follows the header).
  Job::Slot& WriteHeader(Job* j, int slot, const ChunkHeader& h, size_t bytes) {
    Job::Slot& s = j->inflight[slot];
    transport::EncodeChunkHeader(h, send_pool_.ptr(slot));
    s.header_bytes = bytes;
    return s;
  }

  // The slot's header may leave once those before it have: send what is due.
  absl::Status HeaderReady(Job* j, int slot) {
    Job::Slot& s = j->inflight[slot];
    s.header_ready = true;
    ++s.pending;
    return FlushHeaders(j);
  }

  absl::Status FlushHeaders(Job* j) {
    bool close = false;  // the early plane's header went: its chunk is whole on the wire
    while (!j->wire_order.empty()) {
      const int slot = j->wire_order.front();
      Job::Slot& s = j->inflight[slot];
      if (!s.header_ready) break;
      j->wire_order.pop_front();
      const absl::Status st =
          j->ep->SubmitSend(transport::HeaderTag(j->id), send_pool_.ptr(slot), s.header_bytes, Cookie(*j, slot, 0));
      if (!st.ok()) {
        s.status = st;
        --s.pending;
        ReleaseIfIdle(j, slot);
        return st;
      }
      s.header_ready = false;
      if (s.header_bytes > kChunkHeaderBytes) BusyStart(j);
      close |= slot == j->open_lead;
    }
    return close ? CloseLead(j) : absl::OkStatus();
  }

  void ReleaseIfIdle(Job* j, int slot) {
    auto it = j->inflight.find(slot);
    if (it == j->inflight.end() || it->second.pending > 0) return;
    j->inflight.erase(it);
    pool(*j).Give(slot);
  }

  // The link is busy while any message carrying chunk bytes is in flight.
  static void BusyStart(Job* j) {
    if (j->sends_in_flight++ == 0) j->busy_since = absl::Now();
    UpdateWireIdle(j);
  }
  static void BusyEnd(Job* j) {
    if (--j->sends_in_flight == 0) j->busy += absl::Now() - j->busy_since;
    UpdateWireIdle(j);
  }

  // Records the time from the job's start to its first payload sent / verified.
  static void MarkFirstPayload(Job* j) {
    if (j->counters->first_payload_ns.load(std::memory_order_relaxed) != 0) return;
    j->counters->first_payload_ns.store(std::max<int64_t>(1, absl::ToInt64Nanoseconds(absl::Now() - j->started)),
                                        std::memory_order_relaxed);
  }

  // The compression decision for the next chunk of a send job.
  bool ShouldCompress(Job* j) {
    switch (j->codec.mode) {
      case Compression::kRaw:
        return false;
      case Compression::kCompressed:
        return true;
      case Compression::kAdaptive:
        break;
    }
    // The link's capacity: a receiver busy decoding slows the sends down and
    // would make the link look slower than it is, so take the best of this
    // job's rate (once the sends that include connection set-up are past)
    // and the peer's recent best.
    double link = j->sends_done >= kMinSendsForLinkEstimate ? LinkRate(*j) : 0;
    if (auto it = link_bps_.find(j->peer_address); it != link_bps_.end()) {
      link = std::max(link, it->second);
    }
    const CodecRate& rate = codec_rates_[j->device];
    const bool codec_known =
        rate.codec_bps > 0 && rate.ratio > 0 && absl::Now() - rate.measured_at <= kCodecEstimateLifetime;
    if (!codec_known || link == 0) {  // probe: one chunk at a time, the others raw
      if (j->probe_pending) return false;
      j->probe_pending = true;
      return true;
    }
    const double workers = Workers(j->device);
    double codec_rate = rate.codec_bps * workers;
    if (const double agg = rate.Aggregate(); agg > 0) codec_rate = std::min(codec_rate, agg);
    AdaptiveRates a;
    a.encode_bps = codec_rate;
    a.link_bps = link;
    a.ratio = rate.ratio;
    // GPU pools' raw chunks take the same workers (0, unknown, counts as free).
    a.raw_bps = j->gpu != nullptr ? rate.raw_bps * workers : 0;
    a.decode_bps = j->peer_decode_bps;
    a.recv_raw_bps = j->peer_raw_bps;
    j->credit += AdaptiveCompressedFraction(a);
    if (j->credit < 1) return false;
    j->credit -= 1;
    return true;
  }

  // A send job's wire bytes over the time its sends were in flight (0 before any).
  static double LinkRate(const Job& j) {
    const absl::Duration busy = j.busy + (j.sends_in_flight > 0 ? absl::Now() - j.busy_since : absl::ZeroDuration());
    const double secs = absl::ToDoubleSeconds(busy);
    return secs > 0 ? j.wire_done / secs : 0;
  }

  // On a codec thread: gather (unless contiguous) and encode chunk `seq`; a
  // chunk that does not shrink, or that the codec cannot take (e.g. a partial
  // element at the end), goes raw. With split-send the codec's raw plane is
  // posted to the engine thread (CodecDone::lead) as soon as it is final.
  void PostEncode(Job* j, int slot, uint32_t seq, uint8_t* buf, bool compress) {
    const uint64_t off = static_cast<uint64_t>(seq) * j->chunk_bytes;
    const uint64_t len = j->ChunkLen(seq);
    const SegmentList* segs = &j->segs;  // the job outlives its slots in flight
    codec::EncodeOptions o;
    o.dtype = j->codec.dtype;
    o.layout = j->codec.layout;
    o.threads = 1;
    const uint64_t key = j->key;
    const bool split = options_.split_send;
    const Job* job = j;  // likewise; only its immutable fields and wire_idle are read
    if (j->dev_staging != nullptr) {  // direct: the chunk stays on the device
      uint8_t* dev = DevSlot(*j, slot);
      j->gpu->Post([this, segs, off, len, o, dev, key, slot, compress](gpu::ChunkWorker& w) {
        const absl::Time t0 = absl::Now();
        CodecDone d = StartDone(key, slot, compress, len);
        const auto src = DeviceRanges(*segs, off, len);
        if (compress) FinishEncode(w.EncodeInto(o, src, len, dev + second_off_), 0, dev, &d);
        if (!d.encoded && d.status.ok()) {  // raw, or the chunk did not shrink
          d.status = w.Gather(src, dev + kPayloadOffset);
          d.payload = dev + kPayloadOffset;
          d.len = len;
        }
        if (d.status.ok()) {
          auto sum = w.Checksum(d.payload, d.len);
          d.status = sum.status();
          d.sum = sum.value_or(0);
        }
        d.ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - t0));
        PostCodecDone(std::move(d));
      });
      return;
    }
    if (j->gpu != nullptr) {
      j->gpu->Post([this, segs, off, len, o, buf, key, slot, compress, split, job](gpu::ChunkWorker& w) {
        const absl::Time t0 = absl::Now();
        CodecDone d = StartDone(key, slot, compress, len);
        const auto src = DeviceRanges(*segs, off, len);
        if (compress) {
          uint64_t lead = 0;
          codec::EncodeOptions so = o;
          if (split) so.on_raw_plane = SplitHook(job, slot, buf, len, &lead);
          auto n = w.Encode(so, src, len, buf + second_off_);
          FinishEncode(n, lead, buf, &d);
        }
        if (!d.encoded && d.status.ok()) {  // raw, or the chunk did not shrink
          d.status = w.ToHost(src, buf + kPayloadOffset);
          d.payload = buf + kPayloadOffset;
          d.len = len;
        }
        if (d.status.ok()) d.sum = Kvsum64(d.payload, d.len);
        d.ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - t0));
        PostCodecDone(std::move(d));
      });
      return;
    }
    codec_->Post([this, segs, off, len, o, buf, key, slot, split, job](CpuWorker&) {
      const absl::Time t0 = absl::Now();
      CodecDone d = StartDone(key, slot, true, len);
      const uint8_t* raw = segs->Contiguous(off, len);
      if (raw == nullptr) {
        segs->Gather(off, len, buf + kPayloadOffset, nullptr);
        raw = buf + kPayloadOffset;
      }
      uint64_t lead = 0;
      codec::EncodeOptions so = o;
      if (split) so.on_raw_plane = SplitHook(job, slot, buf, len, &lead);
      auto n = codec::Encode(so, raw, len, buf + second_off_, codec::MaxSplitEncodedBytes(len));
      FinishEncode(n, lead, buf, &d);
      if (!d.encoded && d.status.ok()) {
        d.payload = raw;
        d.len = len;
      }
      if (d.status.ok()) d.sum = Kvsum64(d.payload, d.len);
      d.ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - t0));
      PostCodecDone(std::move(d));
    });
  }

  // A receive task's result, measured for receive_rates (memory on `device`).
  static CodecDone RecvDone(uint64_t key, int slot, bool encoded, int device, uint64_t raw_len) {
    CodecDone d;
    d.key = key;
    d.slot = slot;
    d.encoded = encoded;
    d.metered = true;
    d.device = device;
    d.len = raw_len;
    return d;
  }

  static CodecDone StartDone(uint64_t key, int slot, bool encode_task, uint64_t len) {
    CodecDone d;
    d.key = key;
    d.slot = slot;
    d.encode_task = encode_task;
    d.raw_len = len;
    return d;
  }

  // Split-send's decision, on the codec thread, once the raw plane is final:
  // take it when the job's link is idle (nothing of it in flight or waiting),
  // the codec expects the chunk to shrink (by 2%, a margin for the estimate)
  // and the header message, with its tail, fits the receiver's slot (a
  // chunk_bytes area) whatever the exponents turn into.
  std::function<bool(uint64_t, uint64_t)> SplitHook(const Job* j, int slot, uint8_t* buf, uint64_t len,
                                                    uint64_t* lead) {
    const uint64_t key = j->key, chunk_bytes = j->chunk_bytes;
    const std::atomic<bool>* idle = &j->wire_idle;  // the job outlives its codec tasks
    return [this, key, slot, buf, len, chunk_bytes, lead, idle](uint64_t raw_plane, uint64_t estimate) {
      if (!idle->load(std::memory_order_relaxed) || estimate == 0 || estimate * 100 >= len * 98 || raw_plane == 0 ||
          kChunkHeaderBytes + codec::MaxSplitEncodedBytes(len) - raw_plane > chunk_bytes) {
        return false;
      }
      *lead = raw_plane;
      CodecDone d;
      d.key = key;
      d.slot = slot;
      d.lead = true;
      d.payload = buf + second_off_ + codec::kHeaderBytes;
      d.len = raw_plane;
      PostCodecDone(std::move(d));
      return true;
    };
  }

  // After an encode: a chunk that shrank, or whose raw plane already left
  // (lead > 0), is sent encoded; for the latter the header message's tail
  // (codec header, then all after the raw plane) is laid out in the slot.
  void FinishEncode(const absl::StatusOr<size_t>& n, uint64_t lead, uint8_t* buf, CodecDone* d) {
    if (n.ok()) d->encoded_len = *n;
    if (lead > 0) {
      if (!n.ok()) {
        d->status = n.status();  // the raw plane is on the wire: the chunk cannot go raw now
        return;
      }
      const uint8_t* chunk = buf + second_off_;
      const uint64_t rest = codec::kHeaderBytes + lead;
      std::memcpy(buf + kChunkHeaderBytes, chunk, codec::kHeaderBytes);
      std::memcpy(buf + kChunkHeaderBytes + codec::kHeaderBytes, chunk + rest, *n - rest);
      d->split = true;
      d->header_len = kChunkHeaderBytes + *n - lead;
    }
    if (n.ok() && (*n < d->raw_len || lead > 0)) {
      d->payload = buf + second_off_;
      d->len = *n;
      d->encoded = true;
    }
  }

  // On a codec thread: decode a verified encoded payload into the slot's
  // second half; the codec checks the kvsum64 of what it decoded.
  void PostDecode(Job* j, int slot, const uint8_t* payload, uint64_t len, uint64_t raw_len) {
    uint8_t* out = recv_pool_.ptr(slot) + second_off_;
    const uint64_t key = j->key;
    MeterStart(kCpu, true);
    codec_->Post([this, payload, len, raw_len, out, key, slot](CpuWorker&) {
      const absl::Time t0 = absl::Now();
      CodecDone d = RecvDone(key, slot, true, kCpu, raw_len);
      auto n = codec::Decode(payload, len, out, raw_len, 1);
      if (!n.ok()) {
        d.status = n.status();
      } else if (*n != raw_len) {
        d.status = absl::DataLossError(absl::StrFormat("codec chunk decodes to %d bytes, expected %d", *n, raw_len));
      }
      d.ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - t0));
      PostCodecDone(std::move(d));
    });
  }

  // On a GPU worker: a verified chunk into device memory, decoded first
  // (and verified again) if encoded.
  void PostGpuWrite(Job* j, int slot, uint64_t off, const uint8_t* payload, uint64_t len, uint64_t raw_len,
                    bool encoded) {
    const SegmentList* segs = &j->segs;
    const uint64_t key = j->key;
    const int device = j->device;
    MeterStart(device, encoded);
    j->gpu->Post([this, segs, off, payload, len, raw_len, encoded, key, slot, device](gpu::ChunkWorker& w) {
      const absl::Time t0 = absl::Now();
      CodecDone d = RecvDone(key, slot, encoded, device, raw_len);
      d.written = true;
      const auto dst = DeviceRanges(*segs, off, raw_len);
      d.status = encoded ? w.Decode(payload, len, dst, raw_len) : w.FromHost(payload, dst);
      d.ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - t0));
      PostCodecDone(std::move(d));
    });
  }

  // Direct: the same on a payload in device memory (`dev`, the device slot's
  // payload area). A split chunk's tail (host, in the slot's header area) is
  // joined around its raw plane first; the wire kvsum64 is checked on the GPU
  // before anything reaches the destination.
  void PostGpuWriteDirect(Job* j, int slot, uint64_t off, uint8_t* dev, const ChunkHeader& h, uint64_t raw_len,
                          const uint8_t* tail, uint64_t tail_len) {
    const SegmentList* segs = &j->segs;
    const uint64_t key = j->key;
    const bool encoded = (h.flags & transport::kChunkEncoded) != 0;
    const uint64_t len = h.length, want = h.checksum, seq = h.seq;
    const int device = j->device;
    MeterStart(device, encoded);
    j->gpu->Post([this, segs, off, dev, len, want, seq, raw_len, encoded, tail, tail_len, key, slot,
                  device](gpu::ChunkWorker& w) {
      const absl::Time t0 = absl::Now();
      CodecDone d = RecvDone(key, slot, encoded, device, raw_len);
      d.written = true;
      d.wire_len = len;
      const uint8_t* payload = dev;
      if (tail != nullptr) {  // as Accept's host join: header before the plane, the rest after it
        const uint64_t plane = len - tail_len;  // the payload message
        d.status = w.CopyIn(tail, codec::kHeaderBytes, dev - codec::kHeaderBytes);
        if (d.status.ok()) {
          d.status = w.CopyIn(tail + codec::kHeaderBytes, tail_len - codec::kHeaderBytes, dev + plane);
        }
        payload = dev - codec::kHeaderBytes;
      }
      if (d.status.ok()) {
        auto sum = w.Checksum(payload, len);
        d.status = sum.status();
        if (sum.ok() && *sum != want) d.status = ChecksumMismatch(seq, *sum, want);
      }
      if (d.status.ok()) {
        const auto dst = DeviceRanges(*segs, off, raw_len);
        d.status = encoded ? w.DecodeFrom(payload, len, dst, raw_len) : w.Scatter(payload, dst);
      }
      d.ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - t0));
      PostCodecDone(std::move(d));
    });
  }

  // Receive-task rates (engine thread), published for receive_rates().
  uint32_t Workers(int device) const {
    return device == kCpu ? (codec_ ? static_cast<uint32_t>(codec_->size()) : 0) : options_.gpu_workers;
  }
  void MeterStart(int device, bool encoded) {
    RecvMeters& m = recv_meters_[device];
    (encoded ? m.decode : m.raw).Start();
  }
  void MeterDone(const CodecDone& d) {
    RecvMeters& m = recv_meters_[d.device];
    const uint32_t workers = Workers(d.device);
    (d.encoded ? m.decode : m.raw).Done(d.len, d.ns, d.status.ok());
    Engine::ReceiveRates r;
    r.decode_bps = m.decode.Total(workers);
    r.raw_bps = d.device == kCpu ? 0 : m.raw.Total(workers);  // host pools: raw chunks take no codec thread
    MutexLock l(&rates_mu_);
    recv_rates_[d.device] = r;
  }

  void PostCodecDone(CodecDone d) {
    {
      MutexLock l(&codec_mu_);
      codec_done_.push_back(std::move(d));
      codec_posted_.store(true, std::memory_order_release);
    }
    transport_->Wake();
  }

  // Engine thread: split-send, a chunk's raw plane is final (its exponents
  // are still being coded): on the wire with it.
  void OnLead(const CodecDone& d) {
    auto it = jobs_.find(d.key);
    if (it == jobs_.end()) return;
    Job* j = it->second.get();
    if (j->ending || !j->inflight.contains(d.slot)) return;  // the codec task's end releases the slot
    Job::Slot& s = j->inflight[d.slot];
    if (!WireIdle(*j)) {
      // The link got busy since the codec thread looked: the plane goes with
      // the rest of the chunk.
      s.lead_deferred = true;
      s.payload = d.payload;
      s.payload_bytes = d.len;
      return;
    }
    s.lead = true;
    j->open_lead = d.slot;
    if (auto st = SubmitPayload(j, d.slot, d.payload, d.len); !st.ok()) Fail(j, st);
    UpdateWireIdle(j);
  }

  // Engine thread: a codec task ended.
  void OnCodecDone(const CodecDone& d) {
    if (d.lead) {
      OnLead(d);
      return;
    }
    if (d.metered) MeterDone(d);
    --in_codec_;
    auto it = jobs_.find(d.key);
    if (it == jobs_.end()) return;  // cannot happen: jobs wait for their slots
    Job* j = it->second.get();
    auto in = j->inflight.find(d.slot);
    if (in == j->inflight.end()) return;
    Job::Slot& s = in->second;
    s.in_codec = false;
    j->counters->codec_ns.fetch_add(d.ns, std::memory_order_relaxed);
    StagingPool& p = pool(*j);
    if (j->dir == Direction::kSend) {
      if (d.encode_task) {
        j->probe_pending = false;
        CodecRate& r = codec_rates_[j->device];
        if (d.encoded_len != 0) r.AddEncode(d.raw_len, d.encoded_len, d.ns);
        r.pool.Done(d.raw_len);
      } else if (j->gpu != nullptr && d.status.ok()) {
        codec_rates_[j->device].AddRaw(d.raw_len, d.ns);
      }
      --s.pending;  // the codec task; a split chunk's raw plane may still be in flight
      const uint32_t seq = s.seq;
      const bool lead = s.lead, deferred = s.lead_deferred;
      if (j->ending || !d.status.ok() || d.split != (lead || deferred)) {
        ReleaseIfIdle(j, d.slot);
        if (!d.status.ok()) {
          Fail(j, absl::InternalError(absl::StrFormat("encoding chunk %d: %s", seq, d.status.message())));
        } else if (!j->ending) {
          Fail(j, absl::InternalError(absl::StrFormat("chunk %d: split-send out of step", seq)));
        }
        return;
      }
      const uint64_t off = static_cast<uint64_t>(seq) * j->chunk_bytes;
      if (d.encoded) j->counters->chunks_encoded.fetch_add(1, std::memory_order_relaxed);
      absl::Status st;
      const ChunkHeader split_header{j->id,
                                     seq,
                                     j->chunk_count,
                                     off,
                                     d.len,
                                     d.sum,
                                     static_cast<uint16_t>(transport::kChunkEncoded | transport::kChunkSplit)};
      if (lead) {  // the raw plane is out: the header message carries the rest
        j->counters->chunks_split.fetch_add(1, std::memory_order_relaxed);
        WriteHeader(j, d.slot, split_header, d.header_len);
        st = HeaderReady(j, d.slot);
      } else if (deferred) {  // committed to the split form, but nothing went early
        st = SendWhole(j, d.slot, split_header, s.payload, s.payload_bytes, d.header_len);
      } else {
        st = SendWhole(j, d.slot,
                       ChunkHeader{j->id, seq, j->chunk_count, off, d.len, d.sum,
                                   d.encoded ? transport::kChunkEncoded : uint16_t{0}},
                       d.payload, d.len, kChunkHeaderBytes);
      }
      if (!st.ok()) Fail(j, st);
      return;
    }
    // Receive: the decoded chunk is verified; only now does it reach the destination.
    const uint32_t seq = s.seq;
    absl::Status st = d.status;
    if (st.ok() && j->ending) st = j->result;
    if (st.ok()) {
      if (j->dev_staging != nullptr) {  // direct: verified on the GPU just now
        j->counters->wire_bytes.fetch_add(d.wire_len, std::memory_order_relaxed);
        MarkFirstPayload(j);
      }
      if (!d.written) j->segs.Scatter(static_cast<uint64_t>(seq) * j->chunk_bytes, d.len, p.ptr(d.slot) + second_off_);
      j->received[seq] = true;
      if (d.encoded) j->counters->chunks_encoded.fetch_add(1, std::memory_order_relaxed);
      bytes_received_ += d.len;
      Account(j, d.len);
    }
    j->inflight.erase(in);
    p.Give(d.slot);
    if (!st.ok()) {
      if (!j->ending) KVF_XLOG(warn, "engine", j->id, "rejecting chunk {}: {}", seq, st.ToString());
      Fail(j, st);
    }
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
    if (j->dir == Direction::kSend) {
      if (part == 1 || s.header_bytes > kChunkHeaderBytes) BusyEnd(j);
      if (c.status.ok()) (part == 0 ? s.header_done : s.payload_done) = true;
      if (part == 1 && j->open_lead == slot && !j->ending) {
        // The early plane is through and its header is not ready: let the
        // held chunks use the link.
        if (auto st = CloseLead(j); !st.ok()) Fail(j, st);
      }
    }
    if (--s.pending > 0) return;

    // Everything of the chunk is done.
    const Job::Slot done = s;
    StagingPool& p = pool(*j);
    if (j->dir == Direction::kSend) {
      j->inflight.erase(in);
      p.Give(slot);
      if (!done.status.ok()) {
        if (!j->ep->health().ok()) endpoints_.erase(j->peer_address);
        Fail(j, absl::UnavailableError(absl::StrFormat("sending chunk %d: %s", done.seq, done.status.message())));
        return;
      }
      if (!done.header_done || !done.payload_done) return;  // abandoned: the job is ending
      const uint64_t wire = done.payload_len + done.header_len - kChunkHeaderBytes;
      bytes_sent_ += wire;
      j->wire_done += wire;
      ++j->sends_done;
      j->counters->wire_bytes.fetch_add(wire, std::memory_order_relaxed);
      Account(j, j->ChunkLen(done.seq));
      return;
    }
    // Receive: everything below is untrusted bytes from the wire.
    absl::Status st = done.status;
    bool decoding = false;
    if (st.ok()) {
      auto r =
          Accept(j, slot, p.ptr(slot) + second_off_, done.header_len, p.ptr(slot) + kPayloadOffset, done.payload_len);
      if (r.ok()) {
        decoding = *r;
      } else {
        st = r.status();
      }
    } else if (st.code() == absl::StatusCode::kOutOfRange) {
      st = absl::DataLossError(absl::StrFormat("message larger than expected: %s", st.message()));
    } else if (st.code() != absl::StatusCode::kCancelled || !j->ending) {
      // Transport failures (peer gone, endpoint timeout) are the sender's loss,
      // not this transfer's deadline. So is a receive the transport cancelled
      // on its own (a rendezvous from a sender that died): this engine's own
      // cancels end the job first (Fail).
      st = absl::UnavailableError(absl::StrFormat("receive from sender failed: %s", st.message()));
    }
    if (decoding) {  // the slot stays in flight until its codec thread is done
      s.pending = 1;
      s.in_codec = true;
      ++in_codec_;
      return;
    }
    j->inflight.erase(in);
    p.Give(slot);
    if (!st.ok()) {
      if (!j->ending) KVF_XLOG(warn, "engine", j->id, "rejecting chunk: {}", st.ToString());
      Fail(j, st);
    }
  }

  // Checks a received chunk and, only if everything holds, writes its payload
  // (raw chunk) or hands it to a codec thread (encoded chunk; returns true).
  absl::StatusOr<bool> Accept(Job* j, int slot, const uint8_t* header, size_t header_len, uint8_t* payload,
                              size_t len) {
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
    const bool encoded = (h.flags & transport::kChunkEncoded) != 0;
    const bool split = (h.flags & transport::kChunkSplit) != 0;
    const uint64_t raw_len = j->ChunkLen(h.seq);
    // A split chunk went encoded before its size was known: it may be a little
    // larger than the raw bytes, never more than the codec's bound.
    const bool length_ok = split     ? h.length <= codec::MaxSplitEncodedBytes(raw_len)
                           : encoded ? h.length < raw_len
                                     : h.length == raw_len;
    if (h.offset != off || !length_ok) {
      return absl::DataLossError(absl::StrFormat("chunk %d%s covers [%d, +%d), expected [%d, +%d)", h.seq,
                                                 encoded ? " (encoded)" : "", h.offset, h.length, off, raw_len));
    }
    // Claimed now: a second copy of this chunk, arriving while this one is still
    // being checked or decoded, must be refused, not counted twice (the job
    // fails anyway if this copy does not verify).
    j->received[h.seq] = true;
    if (j->dev_staging != nullptr) {  // direct: the payload is in device memory; a GPU worker checks it
      j->inflight.find(slot)->second.seq = h.seq;  // was the receive's posting index
      PostGpuWriteDirect(j, slot, off, DevSlot(*j, slot) + kPayloadOffset, h, raw_len,
                         split ? header + kChunkHeaderBytes : nullptr, split ? header_len - kChunkHeaderBytes : 0);
      return true;
    }
    if (split) {
      // Join the codec chunk: its header (the tail's first 64 bytes) goes just
      // before the raw plane, the rest of the tail right after it. Both fit:
      // the slot's first area holds MaxSplitEncodedBytes(chunk_bytes) from
      // kPayloadOffset - 64.
      const uint8_t* tail = header + kChunkHeaderBytes;
      const uint64_t tail_len = header_len - kChunkHeaderBytes;  // >= 64, checked by the parser
      std::memcpy(payload - codec::kHeaderBytes, tail, codec::kHeaderBytes);
      std::memcpy(payload + len, tail + codec::kHeaderBytes, tail_len - codec::kHeaderBytes);
      payload -= codec::kHeaderBytes;
    }
    const uint64_t sum = Kvsum64(payload, h.length);
    if (sum != h.checksum) return ChecksumMismatch(h.seq, sum, h.checksum);
    j->counters->wire_bytes.fetch_add(h.length, std::memory_order_relaxed);
    MarkFirstPayload(j);
    if (j->gpu != nullptr) {                       // device memory: a GPU worker writes it
      j->inflight.find(slot)->second.seq = h.seq;  // was the receive's posting index
      PostGpuWrite(j, slot, off, payload, h.length, raw_len, encoded);
      return true;
    }
    if (encoded) {
      if (!codec_) return absl::FailedPreconditionError("encoded chunk, but this data plane has no codec threads");
      j->inflight.find(slot)->second.seq = h.seq;  // was the receive's posting index
      PostDecode(j, slot, payload, h.length, raw_len);
      return true;
    }
    j->segs.Scatter(off, h.length, payload);
    j->received[h.seq] = true;
    bytes_received_ += h.length;
    Account(j, h.length);
    return false;
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
        if (st.in_codec) continue;  // its messages are in; the codec thread's result is dropped
        transport_->CancelRecv(Cookie(*j, slot, 0));
        transport_->CancelRecv(Cookie(*j, slot, 1));
      }
    } else {
      // Headers not yet sent stay unsent. In-flight sends normally drain (the
      // receiver completes or cancels them); Reap() aborts the endpoint if
      // they do not within a grace period.
      std::deque<int> queued, held;
      queued.swap(j->wire_order);
      held.swap(j->held);
      j->open_lead = -1;
      for (int slot : queued) {
        Job::Slot& s = j->inflight[slot];
        if (s.header_ready) {
          s.header_ready = false;
          --s.pending;
          ReleaseIfIdle(j, slot);
        }
      }
      for (int slot : held) {
        --j->inflight[slot].pending;
        ReleaseIfIdle(j, slot);
      }
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
      if (j->dir == Direction::kSend && j->sends_done >= 2) {
        if (const double rate = LinkRate(*j); rate > 0) {
          if (link_bps_.size() >= 4096) link_bps_.clear();  // before taking a reference into it
          double& l = link_bps_[j->peer_address];
          l = std::max(0.9 * l, rate);  // the recent best
        }
      }
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
    s.codec_threads = codec_ ? codec_->size() : 0;
    const CodecRate& cpu = codec_rates_[kCpu];
    s.codec_mbps_per_thread = cpu.codec_bps / 1e6;
    s.codec_ratio = cpu.ratio;
    s.gpu_devices = gpu_devices_.load(std::memory_order_relaxed);
    s.gpu_bytes_allocated = gpu_bytes_.load(std::memory_order_relaxed);
    s.gpu_direct = gpu_direct_;
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
  uint64_t second_off_ = 0;                            // slot offset of the encoded (send) / decoded (receive) chunk
  uint32_t in_codec_ = 0;                              // slots a codec thread is working on
  absl::flat_hash_map<int, CodecRate> codec_rates_;    // per codec: kCpu or a GPU
  absl::flat_hash_map<std::string, double> link_bps_;  // per peer, wire bytes/s (the recent best)
  // Codec results, posted by codec threads.
  Mutex codec_mu_;
  std::vector<CodecDone> codec_done_ ABSL_GUARDED_BY(codec_mu_);
  std::atomic<bool> codec_posted_{false};
  // Set (under mu_) whenever a command is queued; read lock-free by the loop.
  std::atomic<bool> posted_{false};

  mutable Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<std::unique_ptr<Job>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<CancelCmd> cancels_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<Direction, uint64_t>, bool> ids_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  // GPU workers per device (PrepareDevice); pinned staging.
  Mutex prepare_mu_;
  std::vector<std::unique_ptr<gpu::PinnedRange>> pinned_ ABSL_GUARDED_BY(prepare_mu_);
  Mutex gpu_mu_;
  absl::flat_hash_map<int, std::unique_ptr<GpuPool>> gpus_ ABSL_GUARDED_BY(gpu_mu_);
  // Direct staging per device (empty buffers unless gpu_direct_).
  struct DirectStaging {
    std::unique_ptr<gpu::DeviceBuffer> send, recv;
  };
  absl::flat_hash_map<int, DirectStaging> direct_ ABSL_GUARDED_BY(gpu_mu_);
  // Receive-task rates per memory kind (kCpu or a device): measured on the
  // engine thread, published under rates_mu_.
  struct RecvMeters {
    TaskRate decode, raw;
  };
  absl::flat_hash_map<int, RecvMeters> recv_meters_;
  mutable Mutex rates_mu_;
  absl::flat_hash_map<int, Engine::ReceiveRates> recv_rates_ ABSL_GUARDED_BY(rates_mu_);
  bool gpu_direct_ = false;  // set in Init: options_.gpu_direct and the transport carries GPU memory
  std::atomic<uint32_t> gpu_devices_{0};
  std::atomic<uint64_t> gpu_bytes_{0};
  // Last member: its threads are joined first on destruction.
  std::unique_ptr<CodecPool> codec_;
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
                      std::move(s.counters), std::move(s.done), std::move(s.peer_address), s.codec, s.device,
                      s.peer_decode_bps, s.peer_raw_bps);
}

absl::Status Engine::StartRecv(RecvSpec s) {
  return impl_->Start(Direction::kRecv, s.transfer_id, std::move(s.destination), s.chunk_bytes, s.deadline,
                      std::move(s.counters), std::move(s.done), "", CodecSpec{}, s.device);
}

void Engine::Cancel(Direction dir, uint64_t transfer_id, absl::Status reason) {
  impl_->Cancel(dir, transfer_id, std::move(reason));
}

absl::Status Engine::PrepareDevice(int device) { return impl_->PrepareDevice(device); }
EngineStats Engine::stats() const { return impl_->stats(); }
Engine::ReceiveRates Engine::receive_rates(int device) const { return impl_->receive_rates(device); }
void Engine::Shutdown() { impl_->Shutdown(); }

}  // namespace kvferry::pipeline
