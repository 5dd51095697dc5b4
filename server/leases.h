// Published blocks under a lease. A lease is found by its secret key, is used
// by at most one send at a time, ends when its send succeeds, when it is
// released, or when it expires unclaimed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "server/pool_registry.h"

namespace kvferry::server {

struct Lease {
  std::string key;
  std::shared_ptr<Pool> pool;
  std::vector<uint32_t> blocks;
  absl::Time expires;
  bool sending = false;
};

class LeaseTable {
 public:
  // Creates a lease with a fresh random 128-bit key.
  std::shared_ptr<const Lease> Create(std::shared_ptr<Pool> pool, std::vector<uint32_t> blocks, absl::Duration ttl);
  // Claims a lease for sending: NOT_FOUND for unknown keys (forged, released,
  // already delivered), FAILED_PRECONDITION if expired or already being sent.
  absl::StatusOr<std::shared_ptr<const Lease>> Claim(const std::string& key);
  // Checks a key without claiming it.
  absl::StatusOr<std::shared_ptr<const Lease>> Peek(const std::string& key);
  // After a claimed send: delivered -> the lease ends; otherwise it may be retried.
  void Unclaim(const std::string& key, bool delivered);
  absl::Status Release(const std::string& key);
  // Drops expired, unclaimed leases; returns how many.
  size_t Sweep(absl::Time now);
  size_t size() const;

 private:
  absl::StatusOr<std::shared_ptr<Lease>> FindLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(const std::string& key, absl::Time when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Lease>> leases_ ABSL_GUARDED_BY(mu_);
  // Keys of expired leases, remembered for a while so a late pull is told
  // "expired" rather than "unknown".
  absl::flat_hash_map<std::string, absl::Time> expired_ ABSL_GUARDED_BY(mu_);
};

// 32 lowercase hex characters from a CSPRNG.
std::string NewLeaseKey();

}  // namespace kvferry::server
