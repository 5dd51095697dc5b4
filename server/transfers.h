// Transfers this daemon receives (pulls). Every transfer ends exactly once:
// DONE, FAILED with a reason, CANCELLED, or EXPIRED; later outcomes are ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "kvferry/v1/control.pb.h"
#include "kvferry/v1/peer.pb.h"
#include "server/pool_registry.h"
#include "transport/pipeline/engine.h"

namespace kvferry::server {

class TransferTable {
 public:
  struct Record {
    uint64_t id = 0;
    v1::TransferState state = v1::TRANSFER_STATE_PENDING;
    std::string error;
    uint64_t total_bytes = 0;
    std::shared_ptr<Pool> pool;  // held until the transfer ends
    std::string peer;
    absl::Time started, ended;
    std::shared_ptr<pipeline::TransferCounters> counters = std::make_shared<pipeline::TransferCounters>();
    std::function<void()> cancel_peer;  // cancels the StartSend RPC, if one is open
    pipeline::Compression compression = pipeline::Compression::kRaw;
    // Reported when the sender's call returns.
    uint64_t sender_encode_us = 0, sender_stalls = 0, sender_chunks_split = 0, sender_first_payload_us = 0;
  };

  // New PENDING transfer with a fresh unique non-zero id.
  std::shared_ptr<Record> Create(std::shared_ptr<Pool> pool, std::string peer, uint64_t total_bytes);
  void SetRunning(uint64_t id);
  void SetCancelPeer(uint64_t id, std::function<void()> fn);
  void SetSenderMetrics(uint64_t id, const v1::StartSendResponse& sender);
  // Ends a transfer from its outcome: OK -> DONE, CANCELLED -> CANCELLED,
  // DEADLINE_EXCEEDED -> EXPIRED, anything else -> FAILED. Returns false if it
  // had already ended.
  bool Finish(uint64_t id, const absl::Status& outcome);
  absl::StatusOr<v1::TransferStatus> Get(uint64_t id) const;
  // Waits until the transfer's state or progress differs from `last`, or timeout.
  absl::StatusOr<v1::TransferStatus> WaitChange(uint64_t id, const v1::TransferStatus& last, absl::Duration timeout);
  // Forgets ended transfers older than `age`, keeping at most `keep` of them.
  void Prune(absl::Duration age, size_t keep);

  struct Counts {
    uint32_t active = 0;
    uint64_t done = 0, failed = 0, bytes_received = 0;
  };
  Counts counts() const;

 private:
  v1::TransferStatus ToProto(const Record& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Record>> records_ ABSL_GUARDED_BY(mu_);
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_received_ ABSL_GUARDED_BY(mu_) = 0;
};

bool IsTerminal(v1::TransferState s);

// Compression between the API's enum and the data plane's. DEFAULT gives
// `fallback`; a value outside the enum is INVALID_ARGUMENT.
v1::Compression CompressionToProto(pipeline::Compression c);
absl::StatusOr<pipeline::Compression> CompressionFromProto(v1::Compression c, pipeline::Compression fallback);

}  // namespace kvferry::server
