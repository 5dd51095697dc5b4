// Registered KV pools. A pool is shared (shared_ptr) by leases and transfers
// that use it, so its mapping outlives any data-plane job touching it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/kv_layout.h"
#include "common/mutex.h"
#include "common/shm.h"
#include "kvferry/v1/control.pb.h"
#include "transport/gpu/gpu.h"
#include "transport/pipeline/segments.h"

namespace kvferry::server {

struct Pool {
  uint64_t id = 0;
  std::string name;
  v1::KvLayout layout;
  Geometry geometry;
  std::unique_ptr<ShmSegment> shm;       // host pools
  std::unique_ptr<gpu::IpcMapping> ipc;  // GPU pools
  int device = -1;                       // GPU pools: the CUDA device
  uint64_t offset = 0;
  uint8_t* base = nullptr;  // shm->data() or ipc->base(), + offset

  // The byte stream of `blocks` in transfer order (see Geometry::StreamOffsets).
  pipeline::SegmentList Segments(const std::vector<uint32_t>& blocks) const;
  v1::PoolInfo Info() const;
};

class PoolRegistry {
 public:
  absl::StatusOr<std::shared_ptr<Pool>> Register(const v1::RegisterPoolRequest& req);
  // FAILED_PRECONDITION while leases or transfers hold the pool.
  absl::Status Unregister(uint64_t pool_id);
  absl::StatusOr<std::shared_ptr<Pool>> Get(uint64_t pool_id) const;
  std::vector<v1::PoolInfo> List() const;

 private:
  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Pool>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvferry::server
