// kvferry C++ SDK: a worker's handle on its local kvferryd.
//
//   auto c = kvferry::client::Client::Connect("127.0.0.1:50051").value();
//   auto pool = c->CreateHostPool("prefill-kv", layout, 1024).value();  // shm + RegisterPool
//   ... write KV into pool->segment(layer, plane, block) ...
//   v1::Ticket t = c->Publish(pool->id(), {3, 4, 5}).value();           // send t to the decode side
//   // decode side:
//   uint64_t id = c->Pull(t, dst_pool_id, {10, 11, 12}).value();        // returns at once
//   auto done = c->WatchAsync(id);  // std::future; or Watch(id, on_update)
//
// Every call returns absl::Status/StatusOr; RPC errors keep their gRPC code and
// message. The Client is thread-safe; calls may be made from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/kv_layout.h"
#include "common/shm.h"
#include "kvferry/v1/control.grpc.pb.h"

namespace kvferry::client {

// A host KV pool whose memory this process created (a POSIX shm segment) and
// registered with the daemon. Destroying it unregisters it (best effort) and
// removes the segment's name.
class HostPool {
 public:
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  uint64_t id() const { return id_; }
  const v1::KvLayout& layout() const { return layout_; }
  const Geometry& geometry() const { return geometry_; }
  const std::string& shm_name() const { return shm_->name(); }
  uint8_t* base() const { return shm_->data(); }
  size_t bytes() const { return geometry_.region_bytes; }
  // One block of one plane of one layer (geometry().segment_bytes bytes).
  uint8_t* segment(uint32_t layer, uint32_t plane, uint32_t block) const {
    return shm_->data() + geometry_.SegmentOffset(layer, plane, block);
  }
  // Keeps the daemon registration and the shm name after this object dies
  // (for the CLI, whose process exits while the pool stays in use).
  void Detach() { detached_ = true; }

 private:
  friend class Client;
  HostPool() = default;
  std::shared_ptr<v1::Control::Stub> stub_;
  std::unique_ptr<ShmSegment> shm_;
  uint64_t id_ = 0;
  v1::KvLayout layout_;
  Geometry geometry_;
  bool detached_ = false;
};

class Client {
 public:
  // Connects and waits up to `wait_ready` for the daemon to answer.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                         absl::Duration wait_ready = absl::Seconds(5));

  absl::StatusOr<v1::GetStatusResponse> Status();

  absl::StatusOr<v1::RegisterPoolResponse> RegisterPool(const v1::RegisterPoolRequest& req);
  // Creates a shm segment sized for the layout and registers it as `name`.
  absl::StatusOr<std::unique_ptr<HostPool>> CreateHostPool(const std::string& name, const v1::KvLayout& layout,
                                                           uint32_t num_blocks);
  // Registers GPU memory this worker allocated, shared by CUDA IPC:
  // `ipc_handle` is the allocation's 64-byte cudaIpcMemHandle_t (from
  // cudaIpcGetMemHandle; in PyTorch, the handle bytes of
  // tensor.untyped_storage()._share_cuda_()), `gpu_device` the GPU's PCI bus
  // id ("0000:65:00.0") or ordinal, `offset` where the pool starts in the
  // allocation. The daemon opens the handle on that GPU and bound-checks the
  // pool against the allocation. Keep the allocation alive until
  // UnregisterPool. Needs a kvferryd built with CUDA (UNIMPLEMENTED otherwise).
  absl::StatusOr<v1::RegisterPoolResponse> RegisterGpuPool(const std::string& name, const v1::KvLayout& layout,
                                                           uint32_t num_blocks, const std::string& ipc_handle,
                                                           const std::string& gpu_device, uint64_t offset = 0);
  absl::Status UnregisterPool(uint64_t pool_id);

  // ttl zero: the daemon's default lease time.
  absl::StatusOr<v1::Ticket> Publish(uint64_t pool_id, const std::vector<uint32_t>& block_ids,
                                     absl::Duration ttl = absl::ZeroDuration());
  absl::Status ReleaseLease(const std::string& transfer_key);

  // Starts a pull and returns its transfer id; deadline zero: the daemon's default.
  // compression: RAW, COMPRESSED or ADAPTIVE; DEFAULT takes the daemon's --compression.
  absl::StatusOr<uint64_t> Pull(const v1::Ticket& ticket, uint64_t pool_id, const std::vector<uint32_t>& block_ids,
                                absl::Duration deadline = absl::ZeroDuration(),
                                v1::Compression compression = v1::COMPRESSION_DEFAULT);
  absl::StatusOr<v1::TransferStatus> GetTransfer(uint64_t transfer_id);
  // Follows a transfer until it ends; `on_update` sees every status update.
  // Returns the final status (check its state: DONE or why not).
  absl::StatusOr<v1::TransferStatus> Watch(uint64_t transfer_id,
                                           const std::function<void(const v1::TransferStatus&)>& on_update = nullptr);
  std::future<absl::StatusOr<v1::TransferStatus>> WatchAsync(uint64_t transfer_id);
  absl::StatusOr<v1::TransferStatus> Cancel(uint64_t transfer_id);

  v1::Control::Stub* stub() { return stub_.get(); }

 private:
  Client(std::shared_ptr<grpc::Channel> ch, absl::Duration rpc_timeout);
  std::unique_ptr<grpc::ClientContext> Context() const;
  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(grpc::Status (v1::Control::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                            const Req& req) const;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<v1::Control::Stub> stub_;
  absl::Duration rpc_timeout_;
};

// gRPC status -> absl::Status with the same code and message.
absl::Status FromGrpc(const grpc::Status& s);

// "bf16" -> DTYPE_BF16 etc.; error for unknown names.
absl::StatusOr<v1::DType> ParseDType(const std::string& name);
// "L,P,T,H,D" (layers, planes, block tokens, heads, head dim) + dtype.
absl::StatusOr<v1::KvLayout> ParseLayout(const std::string& spec, v1::DType dtype);
// "0-3,7,9" -> {0,1,2,3,7,9}.
absl::StatusOr<std::vector<uint32_t>> ParseBlockList(const std::string& spec);
std::string StateName(v1::TransferState s);

}  // namespace kvferry::client
