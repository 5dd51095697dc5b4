// The data-plane engine: turns "send this byte stream to that peer" and
// "receive that transfer into these segments" into chunks on a Transport.
//
// One thread owns the Transport and every job. Other threads only post
// commands (Start*, Cancel) and read counters; codec work runs on a small pool
// of codec threads. Per transfer:
//   sender:   raw chunk: gather into a staging slot + kvsum64 -> send.
//             Compressed chunk: a codec thread gathers and encodes it
//             (CPU codec) while the engine thread keeps sending earlier
//             chunks; a chunk that does not shrink goes raw. Split-send: once
//             the codec has split the chunk (raw plane final, tables chosen)
//             and expects it to shrink, the raw plane goes on the wire while
//             the exponents are still being coded; the rest follows with the
//             chunk's header. Up to `window` chunks in flight (being encoded
//             or on the wire).
//   GPU jobs (device memory): a GPU worker thread does the chunk's device
//             work on its own stream: gather (or CUDA-encode) into the pinned
//             staging slot, or, once the chunk is verified, copy (or
//             CUDA-decode, verify, then copy) into the destination blocks.
//             Direct (a transport that carries GPU memory): the slot is a
//             device mirror of the host slot; the payload goes on the wire
//             from it and arrives into it, its kvsum64 computed and checked
//             on the GPU; headers stay in host memory.
//   receiver: up to `window` receives posted into staging slots; on arrival:
//             parse + validate header -> (split chunk: join raw plane and
//             rest) -> verify the kvsum64 of the bytes as
//             sent -> raw: scatter into the destination; encoded: a codec
//             thread decodes into the slot (the codec checks the kvsum64 of
//             the decoded bytes) -> scatter. Unverified bytes never reach the
//             destination.
// Compression per transfer (CodecSpec): raw, compressed, or adaptive, which
// compresses the fraction of chunks that balances codec and link time
// (see Adaptive in engine.cc).
// Staging memory is allocated once (bounded by `staging_bytes` per direction);
// a job that finds no free slot waits for one. Every job ends exactly once, with
// its `done` callback on the engine thread: OK, or the reason it failed
// (DEADLINE_EXCEEDED past its deadline, CANCELLED on Cancel or shutdown).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/codec.h"
#include "transport/pipeline/segments.h"
#include "transport/transport.h"

namespace kvferry::pipeline {

enum class Compression : uint8_t { kRaw = 0, kCompressed = 1, kAdaptive = 2 };
const char* CompressionName(Compression c);
// "raw", "compressed" or "adaptive".
absl::StatusOr<Compression> ParseCompression(absl::string_view name);

// How a sender codes its chunks. Receivers need nothing: chunks say so.
struct CodecSpec {
  Compression mode = Compression::kRaw;
  codec::DType dtype = codec::DType::kBytes;
  codec::Layout layout;  // channel hint for the KV-aware mode
};

// What adaptive mode weighs, in bytes/s of chunk payload (0: unknown or free).
struct AdaptiveRates {
  double encode_bps = 0;  // the sender's codec workers together
  double link_bps = 0;    // the link's wire rate
  double ratio = 0;       // raw / encoded bytes
  // The sender's workers on raw chunks, where raw chunks need them too (GPU
  // pools: gather and checksum on the device); 0 when they cost the codec
  // nothing (host pools: the engine thread does them).
  double raw_bps = 0;
  // The receiver's workers: decoding, and raw chunks where they need them.
  double decode_bps = 0, recv_raw_bps = 0;
};

// Adaptive mode: the fraction of chunks to compress. Each resource takes a
// time per byte that is linear in the fraction f (sender and receiver
// workers: f / codec + (1 - f) / raw; link: (1 - f + f / ratio) / link); the
// fraction minimises the largest, and is 0 unless it beats f = 0 clearly.
double AdaptiveCompressedFraction(const AdaptiveRates& r);

// Progress and metrics of one job, written by the engine thread, read by anyone.
struct TransferCounters {
  std::atomic<uint64_t> bytes_done{0};  // raw bytes sent / verified
  std::atomic<uint32_t> chunks_done{0};
  std::atomic<uint32_t> chunks_total{0};
  std::atomic<uint64_t> wire_bytes{0};      // payload bytes on the wire
  std::atomic<uint32_t> chunks_encoded{0};  // chunks that went as codec chunks
  std::atomic<uint32_t> chunks_split{0};    // send: codec chunks whose raw plane left before their exponents were coded
  std::atomic<uint64_t> codec_ns{0};        // encode (send) / decode (receive) time, summed over threads
  std::atomic<uint64_t> stalls{0};          // times a ready chunk waited for a staging slot
  std::atomic<uint64_t> first_payload_ns{0};  // start -> first payload submitted / verified
};

using DoneCallback = std::function<void(absl::Status)>;

struct SendSpec {
  uint64_t transfer_id = 0;  // message tag; non-zero
  std::string peer_address;  // receiver's transport address
  SegmentList source;
  uint64_t chunk_bytes = 0;  // <= this engine's chunk_bytes
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<TransferCounters> counters;  // optional
  DoneCallback done;
  CodecSpec codec;
  // >= 0: `source` is device memory on this CUDA device (PrepareDevice first).
  int device = -1;
  // The receiver's rates (Engine::ReceiveRates on its side; 0: unknown), for
  // adaptive mode.
  double peer_decode_bps = 0, peer_raw_bps = 0;
};

struct RecvSpec {
  uint64_t transfer_id = 0;
  SegmentList destination;
  uint64_t chunk_bytes = 0;  // <= this engine's chunk_bytes
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<TransferCounters> counters;
  DoneCallback done;
  // >= 0: `destination` is device memory on this CUDA device (PrepareDevice first).
  int device = -1;
};

struct EngineOptions {
  uint64_t chunk_bytes = 1ull << 20;     // largest chunk payload
  uint64_t staging_bytes = 64ull << 20;  // per direction (send, receive)
  uint32_t window = 8;                   // chunks in flight per transfer
  uint32_t codec_threads = 2;            // CPU codec threads (0: no compression; encoded chunks are refused)
  uint32_t gpu_workers = 4;              // per GPU device with pools: threads, each with a stream and buffers
  // Split-send: an encoded chunk's raw plane goes on the wire as soon as the
  // codec has split it off, while its exponents are still being coded, where
  // the job's link is idle. Off by default: measured, it gained nothing on
  // the hosts at hand (docs/performance.md).
  bool split_send = false;
  // GPU pools' chunks stay in device memory and go on the wire from there
  // (gather/encode and receive/verify/decode on the GPU), where the
  // transport carries GPU memory (a UCX with CUDA transports). Otherwise, or
  // when false, they are staged through pinned host memory. Off by default:
  // it pays where UCX moves GPU memory natively (cuda_ipc between GPUs of one
  // host: 2.3x; GPUDirect RDMA), but UCX's own staging of GPU memory over TCP
  // measured 7x slower than kvferry's (docs/performance.md).
  bool gpu_direct = false;
};

struct EngineStats {
  uint32_t send_slots = 0, send_slots_free = 0;
  uint32_t recv_slots = 0, recv_slots_free = 0;
  uint32_t active_sends = 0, active_recvs = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t staging_bytes_allocated = 0;
  uint32_t codec_threads = 0;
  uint32_t gpu_devices = 0;          // devices prepared for GPU pools
  uint64_t gpu_bytes_allocated = 0;  // device memory of their workers (and direct staging)
  bool gpu_direct = false;           // GPU pools' chunks go on the wire from device memory
  // Adaptive mode's current estimates for the CPU codec (0 until measured).
  double codec_mbps_per_thread = 0, codec_ratio = 0;
};

enum class Direction { kSend, kRecv };

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<transport::Transport> transport,
                                                        const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  std::string address() const;
  const transport::Capabilities& capabilities() const;
  const EngineOptions& options() const;

  // Validates and queues a job; errors are returned here, not through `done`.
  absl::Status StartSend(SendSpec spec);
  absl::Status StartRecv(RecvSpec spec);
  // Readies GPU `device` for jobs on device memory: its workers (a stream,
  // CUDA codec workspaces and device buffers each, allocated now) and pinned
  // staging. Idempotent; slow the first time, so call it off the hot path
  // (the daemon does when a GPU pool is registered).
  absl::Status PrepareDevice(int device);
  // Ends the job with `reason` (no-op if it is unknown or already ended).
  void Cancel(Direction dir, uint64_t transfer_id, absl::Status reason);

  EngineStats stats() const;

  // This engine's measured receive rates for memory on `device` (-1: host), in
  // bytes/s over its workers together (0: not measured yet): decoding encoded
  // chunks, and writing raw ones where that takes the same workers (GPU pools).
  // Sent to senders with a pull, for their adaptive mode.
  struct ReceiveRates {
    double decode_bps = 0, raw_bps = 0;
  };
  ReceiveRates receive_rates(int device) const;

  // Ends every job (CANCELLED: "daemon shutting down"), waits for their
  // callbacks and stops the engine thread; later Start* calls fail. Idempotent.
  void Shutdown();

 private:
  class Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvferry::pipeline
