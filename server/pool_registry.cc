#include "server/pool_registry.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kvferry::server {

pipeline::SegmentList Pool::Segments(const std::vector<uint32_t>& blocks) const {
  std::vector<pipeline::Segment> segs;
  for (uint64_t off : geometry.StreamOffsets(blocks)) segs.push_back({base + off, geometry.segment_bytes});
  return pipeline::SegmentList(std::move(segs));
}

v1::PoolInfo Pool::Info() const {
  v1::PoolInfo i;
  i.set_pool_id(id);
  i.set_name(name);
  i.set_memory_kind(ipc ? v1::MEMORY_KIND_CUDA_IPC : v1::MEMORY_KIND_HOST_SHM);
  if (ipc) i.set_gpu_ordinal(device);
  i.set_num_blocks(geometry.num_blocks);
  *i.mutable_layout() = layout;
  i.set_region_bytes(geometry.region_bytes);
  return i;
}

namespace {
absl::Status ValidatePoolName(const std::string& n) {
  if (n.empty() || n.size() > 64) return absl::InvalidArgumentError("pool name must have 1..64 characters");
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return absl::InvalidArgumentError(absl::StrFormat("pool name '%s' has a character outside [A-Za-z0-9._-]", n));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::shared_ptr<Pool>> PoolRegistry::Register(const v1::RegisterPoolRequest& req) {
  KVF_RETURN_IF_ERROR(ValidatePoolName(req.name()));
  if (req.memory_kind() != v1::MEMORY_KIND_HOST_SHM && req.memory_kind() != v1::MEMORY_KIND_CUDA_IPC) {
    return absl::InvalidArgumentError("memory_kind must be MEMORY_KIND_HOST_SHM or MEMORY_KIND_CUDA_IPC");
  }
  KVF_ASSIGN_OR_RETURN(Geometry g, MakeGeometry(req.layout(), req.num_blocks()));
  if (req.offset_bytes() % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("offset_bytes %d is not 64-byte aligned", req.offset_bytes()));
  }
  auto pool = std::make_shared<Pool>();
  pool->name = req.name();
  pool->layout = req.layout();
  pool->geometry = g;
  pool->offset = req.offset_bytes();
  uint8_t* data = nullptr;
  uint64_t size = 0;
  std::string where;
  if (req.memory_kind() == v1::MEMORY_KIND_HOST_SHM) {
    KVF_ASSIGN_OR_RETURN(pool->shm, ShmSegment::Open(req.shm_name()));
    data = pool->shm->data();
    size = pool->shm->size();
    where = absl::StrFormat("shm segment %s", req.shm_name());
  } else {
    KVF_ASSIGN_OR_RETURN(pool->device, gpu::ResolveDevice(req.gpu_device()));
    KVF_ASSIGN_OR_RETURN(pool->ipc, gpu::IpcMapping::Open(req.cuda_ipc_handle(), pool->device));
    data = pool->ipc->base();
    size = pool->ipc->size();
    where = absl::StrFormat("the CUDA allocation on GPU %d", pool->device);
  }
  if (req.offset_bytes() > size || g.region_bytes > size - req.offset_bytes()) {
    return absl::OutOfRangeError(absl::StrFormat("pool of %d bytes at offset %d does not fit in %s of %d bytes",
                                                 g.region_bytes, req.offset_bytes(), where, size));
  }
  pool->base = data + req.offset_bytes();

  MutexLock l(&mu_);
  for (const auto& [id, p] : pools_) {
    if (p->name == pool->name) {
      return absl::AlreadyExistsError(absl::StrFormat("a pool named '%s' exists (id %d)", p->name, id));
    }
    // The same memory twice: overlapping offsets of one shm file, or
    // overlapping device addresses (an IPC handle opened twice maps to the
    // same place).
    uint64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    if (p->shm && pool->shm && p->shm->device() == pool->shm->device() && p->shm->inode() == pool->shm->inode()) {
      a0 = p->offset, a1 = p->offset + p->geometry.region_bytes;
      b0 = pool->offset, b1 = pool->offset + g.region_bytes;
    } else if (p->ipc && pool->ipc) {
      a0 = reinterpret_cast<uintptr_t>(p->base), a1 = a0 + p->geometry.region_bytes;
      b0 = reinterpret_cast<uintptr_t>(pool->base), b1 = b0 + g.region_bytes;
    }
    if (a0 < b1 && b0 < a1) {
      return absl::AlreadyExistsError(
          absl::StrFormat("pool '%s' overlaps the memory of pool '%s' (%s)", pool->name, p->name, where));
    }
  }
  pool->id = next_id_++;
  pools_[pool->id] = pool;
  return pool;
}

absl::Status PoolRegistry::Unregister(uint64_t pool_id) {
  MutexLock l(&mu_);
  auto it = pools_.find(pool_id);
  if (it == pools_.end()) return absl::NotFoundError(absl::StrFormat("no pool %d", pool_id));
  if (it->second.use_count() > 1) {
    return absl::FailedPreconditionError(absl::StrFormat("pool %d is in use by leases or transfers", pool_id));
  }
  pools_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Pool>> PoolRegistry::Get(uint64_t pool_id) const {
  MutexLock l(&mu_);
  auto it = pools_.find(pool_id);
  if (it == pools_.end()) return absl::NotFoundError(absl::StrFormat("no pool %d", pool_id));
  return it->second;
}

std::vector<v1::PoolInfo> PoolRegistry::List() const {
  MutexLock l(&mu_);
  std::vector<v1::PoolInfo> out;
  for (const auto& [id, p] : pools_) out.push_back(p->Info());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pool_id() < b.pool_id(); });
  return out;
}

}  // namespace kvferry::server
