#include "client/client.h"

#include <grpcpp/grpcpp.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace kvferry::client {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

HostPool::~HostPool() {
  if (detached_) {
    shm_.reset();
    return;
  }
  if (stub_ != nullptr && id_ != 0) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::UnregisterPoolRequest req;
    req.set_pool_id(id_);
    v1::UnregisterPoolResponse resp;
    (void)stub_->UnregisterPool(&ctx, req, &resp);  // best effort: the daemon may be gone
  }
}

Client::Client(std::shared_ptr<grpc::Channel> ch, absl::Duration rpc_timeout)
    : channel_(std::move(ch)), stub_(v1::Control::NewStub(channel_)), rpc_timeout_(rpc_timeout) {}

std::unique_ptr<grpc::ClientContext> Client::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
  return ctx;
}

// One unary Control call with the client's deadline.
template <typename Req, typename Resp>
absl::StatusOr<Resp> Client::Call(grpc::Status (v1::Control::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                                  const Req& req) const {
  auto ctx = Context();
  Resp resp;
  KVF_RETURN_IF_ERROR(FromGrpc((stub_.get()->*method)(ctx.get(), req, &resp)));
  return resp;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address, absl::Duration wait_ready) {
  if (address.empty()) return absl::InvalidArgumentError("empty daemon address");
  auto ch = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  if (!ch->WaitForConnected(absl::ToChronoTime(absl::Now() + wait_ready))) {
    return absl::UnavailableError(absl::StrCat("no kvferryd answering at ", address));
  }
  return std::unique_ptr<Client>(new Client(std::move(ch), absl::Seconds(30)));
}

absl::StatusOr<v1::GetStatusResponse> Client::Status() {
  return Call(&v1::Control::Stub::GetStatus, v1::GetStatusRequest());
}

absl::StatusOr<v1::RegisterPoolResponse> Client::RegisterPool(const v1::RegisterPoolRequest& req) {
  return Call(&v1::Control::Stub::RegisterPool, req);
}

absl::StatusOr<std::unique_ptr<HostPool>> Client::CreateHostPool(const std::string& name, const v1::KvLayout& layout,
                                                                 uint32_t num_blocks) {
  KVF_ASSIGN_OR_RETURN(Geometry g, MakeGeometry(layout, num_blocks));
  // pid + counter + random: pids repeat across PID namespaces sharing /dev/shm.
  static std::atomic<int> counter{0};
  uint32_t nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
    nonce = static_cast<uint32_t>(absl::ToUnixNanos(absl::Now()));
  std::string shm_name = absl::StrFormat("/kvferry-%d-%d-%08x-%s", getpid(), counter++, nonce, name);
  if (shm_name.size() > 200) shm_name.resize(200);
  auto pool = std::unique_ptr<HostPool>(new HostPool());
  KVF_ASSIGN_OR_RETURN(pool->shm_, ShmSegment::Create(shm_name, g.region_bytes));
  v1::RegisterPoolRequest req;
  req.set_name(name);
  req.set_memory_kind(v1::MEMORY_KIND_HOST_SHM);
  req.set_shm_name(shm_name);
  req.set_num_blocks(num_blocks);
  *req.mutable_layout() = layout;
  KVF_ASSIGN_OR_RETURN(auto resp, RegisterPool(req));
  pool->stub_ = stub_;
  pool->id_ = resp.pool_id();
  pool->layout_ = layout;
  pool->geometry_ = g;
  return pool;
}

absl::StatusOr<v1::RegisterPoolResponse> Client::RegisterGpuPool(const std::string& name, const v1::KvLayout& layout,
                                                                 uint32_t num_blocks, const std::string& ipc_handle,
                                                                 const std::string& gpu_device, uint64_t offset) {
  v1::RegisterPoolRequest req;
  req.set_name(name);
  req.set_memory_kind(v1::MEMORY_KIND_CUDA_IPC);
  req.set_cuda_ipc_handle(ipc_handle);
  req.set_gpu_device(gpu_device);
  req.set_offset_bytes(offset);
  req.set_num_blocks(num_blocks);
  *req.mutable_layout() = layout;
  return RegisterPool(req);
}

absl::Status Client::UnregisterPool(uint64_t pool_id) {
  v1::UnregisterPoolRequest req;
  req.set_pool_id(pool_id);
  return Call(&v1::Control::Stub::UnregisterPool, req).status();
}

absl::StatusOr<v1::Ticket> Client::Publish(uint64_t pool_id, const std::vector<uint32_t>& block_ids,
                                           absl::Duration ttl) {
  v1::PublishRequest req;
  req.set_pool_id(pool_id);
  for (uint32_t b : block_ids) req.add_block_ids(b);
  req.set_lease_ttl_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(ttl)));
  KVF_ASSIGN_OR_RETURN(auto resp, Call(&v1::Control::Stub::Publish, req));
  return resp.ticket();
}

absl::Status Client::ReleaseLease(const std::string& key) {
  v1::ReleaseLeaseRequest req;
  req.set_transfer_key(key);
  return Call(&v1::Control::Stub::ReleaseLease, req).status();
}

absl::StatusOr<uint64_t> Client::Pull(const v1::Ticket& ticket, uint64_t pool_id,
                                      const std::vector<uint32_t>& block_ids, absl::Duration deadline,
                                      v1::Compression compression) {
  v1::PullRequest req;
  req.set_compression(compression);
  *req.mutable_ticket() = ticket;
  req.set_pool_id(pool_id);
  for (uint32_t b : block_ids) req.add_block_ids(b);
  req.set_deadline_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(deadline)));
  KVF_ASSIGN_OR_RETURN(auto resp, Call(&v1::Control::Stub::Pull, req));
  return resp.transfer_id();
}

absl::StatusOr<v1::TransferStatus> Client::GetTransfer(uint64_t transfer_id) {
  v1::GetTransferRequest req;
  req.set_transfer_id(transfer_id);
  return Call(&v1::Control::Stub::GetTransfer, req);
}

absl::StatusOr<v1::TransferStatus> Client::Watch(uint64_t transfer_id,
                                                 const std::function<void(const v1::TransferStatus&)>& on_update) {
  grpc::ClientContext ctx;  // no deadline: the transfer's own deadline bounds it
  v1::GetTransferRequest req;
  req.set_transfer_id(transfer_id);
  auto reader = stub_->WatchTransfer(&ctx, req);
  v1::TransferStatus s, last;
  bool any = false;
  while (reader->Read(&s)) {
    last = s;
    any = true;
    if (on_update) on_update(s);
  }
  KVF_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
  if (!any) return absl::InternalError("watch ended without a status");
  return last;
}

std::future<absl::StatusOr<v1::TransferStatus>> Client::WatchAsync(uint64_t transfer_id) {
  return std::async(std::launch::async, [this, transfer_id] { return Watch(transfer_id); });
}

absl::StatusOr<v1::TransferStatus> Client::Cancel(uint64_t transfer_id) {
  v1::CancelTransferRequest req;
  req.set_transfer_id(transfer_id);
  return Call(&v1::Control::Stub::CancelTransfer, req);
}

absl::StatusOr<v1::DType> ParseDType(const std::string& name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "bf16") return v1::DTYPE_BF16;
  if (n == "fp16") return v1::DTYPE_FP16;
  if (n == "fp32") return v1::DTYPE_FP32;
  if (n == "fp8_e4m3" || n == "fp8") return v1::DTYPE_FP8_E4M3;
  if (n == "fp8_e5m2") return v1::DTYPE_FP8_E5M2;
  if (n == "bytes") return v1::DTYPE_BYTES;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, bytes)"));
}

absl::StatusOr<v1::KvLayout> ParseLayout(const std::string& spec, v1::DType dtype) {
  std::vector<std::string> parts = absl::StrSplit(spec, ',');
  if (parts.size() != 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout '", spec, "' must be LAYERS,PLANES,BLOCK_TOKENS,HEADS,HEAD_DIM"));
  }
  uint32_t v[5];
  for (int i = 0; i < 5; ++i) {
    if (!absl::SimpleAtoi(parts[i], &v[i])) {
      return absl::InvalidArgumentError(absl::StrCat("layout field '", parts[i], "' is not a number"));
    }
  }
  v1::KvLayout l;
  l.set_num_layers(v[0]);
  l.set_kv_planes(v[1]);
  l.set_block_tokens(v[2]);
  l.set_num_heads(v[3]);
  l.set_head_dim(v[4]);
  l.set_dtype(dtype);
  return l;
}

absl::StatusOr<std::vector<uint32_t>> ParseBlockList(const std::string& spec) {
  std::vector<uint32_t> out;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::vector<std::string> ends = absl::StrSplit(part, '-');
    uint32_t a = 0, b = 0;
    if (ends.size() == 1 && absl::SimpleAtoi(ends[0], &a)) {
      out.push_back(a);
    } else if (ends.size() == 2 && absl::SimpleAtoi(ends[0], &a) && absl::SimpleAtoi(ends[1], &b) && a <= b &&
               b - a < (1u << 24)) {
      for (uint64_t i = a; i <= b; ++i) out.push_back(static_cast<uint32_t>(i));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad block list element '", part, "' (use 0-3,7)"));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("empty block list");
  return out;
}

std::string StateName(v1::TransferState s) {
  std::string n = v1::TransferState_Name(s);
  const std::string prefix = "TRANSFER_STATE_";
  return n.rfind(prefix, 0) == 0 ? n.substr(prefix.size()) : n;
}

}  // namespace kvferry::client
