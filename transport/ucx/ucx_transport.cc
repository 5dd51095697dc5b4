#include "transport/ucx/ucx_transport.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "transport/ucx/address.h"

namespace kvferry::transport {

absl::Status FromUcsStatus(int code, const char* what) {
  const auto s = static_cast<ucs_status_t>(code);
  if (s == UCS_OK || s == UCS_INPROGRESS) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", ucs_status_string(s));
  switch (s) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(msg);
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::OutOfRangeError(msg);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
      return absl::ResourceExhaustedError(msg);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::InvalidArgumentError(msg);
    case UCS_ERR_TIMED_OUT:
      return absl::DeadlineExceededError(msg);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
    default:
      return absl::UnavailableError(msg);
  }
}

namespace {

class UcxTransport;

// Per-operation bookkeeping handed to UCX callbacks as user_data.
struct OpCtx {
  UcxTransport* transport;
  uint64_t cookie;
  size_t length;
};

class UcxEndpoint final : public Endpoint {
 public:
  explicit UcxEndpoint(UcxTransport* t) : transport_(t) {}
  void set_ep(ucp_ep_h ep) { ep_ = ep; }
  ~UcxEndpoint() override;
  UcxEndpoint(const UcxEndpoint&) = delete;
  UcxEndpoint& operator=(const UcxEndpoint&) = delete;

  absl::Status SubmitSend(uint64_t tag, const void* buf, size_t len, uint64_t cookie, bool device = false) override;
  absl::Status health() const override { return health_; }
  void SetFailed(ucs_status_t s) { health_ = FromUcsStatus(s, "ucx endpoint"); }
  void Abort() override;

 private:
  UcxTransport* transport_;
  ucp_ep_h ep_ = nullptr;
  absl::Status health_;
};

class UcxTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> Create(const UcxOptions& options) {
    auto t = std::unique_ptr<UcxTransport>(new UcxTransport());
    auto st = t->Init(options);
    if (!st.ok()) return st;
    return std::unique_ptr<Transport>(std::move(t));
  }

  ~UcxTransport() override {
    // Cancel whatever is still posted and let UCX finish it before teardown.
    for (auto& [cookie, req] : recvs_) ucp_request_cancel(worker_, req);
    for (int i = 0; i < 1000 && !recvs_.empty(); ++i) ucp_worker_progress(worker_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  const Capabilities& capabilities() const override { return caps_; }
  std::string address() const override { return address_; }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const std::string& peer_address) override {
    auto body = UnwrapUcxAddress(peer_address);
    if (!body.ok()) return body.status();
    // The endpoint object exists first so the error handler can point at it;
    // it outlives the UCX endpoint (its destructor force-closes it).
    auto endpoint = std::make_unique<UcxEndpoint>(this);
    ucp_ep_params_t params{};
    params.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(body->data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxTransport::OnEpError;
    params.err_handler.arg = endpoint.get();
    ucp_ep_h ep = nullptr;
    ucs_status_t s = ucp_ep_create(worker_, &params, &ep);
    if (s != UCS_OK) return FromUcsStatus(s, "ucp_ep_create");
    endpoint->set_ep(ep);
    return std::unique_ptr<Endpoint>(std::move(endpoint));
  }

  absl::Status SubmitRecv(uint64_t tag, void* buf, size_t capacity, uint64_t cookie, bool device = false) override {
    if (device && !caps_.cuda_memory) {
      return absl::FailedPreconditionError("this UCX has no CUDA transport: GPU memory cannot be received directly");
    }
    auto* op = new OpCtx{this, cookie, 0};
    ucp_request_param_t param{};
    // Always complete through OnRecv: UCX 1.13 does not report the length of
    // a receive that completes in place.
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.datatype = ucp_dt_make_contig(1);
    SetMemoryType(device, &param);
    param.cb.recv = &UcxTransport::OnRecv;
    param.user_data = op;
    ucs_status_ptr_t req = ucp_tag_recv_nbx(worker_, buf, capacity, tag, ~ucp_tag_t{0}, &param);
    if (UCS_PTR_IS_ERR(req)) {
      delete op;
      // A matched message that did not fit still counts as that receive's result.
      if (UCS_PTR_STATUS(req) == UCS_ERR_MESSAGE_TRUNCATED) {
        done_.push_back(Completion{cookie, FromUcsStatus(UCS_ERR_MESSAGE_TRUNCATED, "receive"), 0});
        return absl::OkStatus();
      }
      return FromUcsStatus(UCS_PTR_STATUS(req), "ucp_tag_recv_nbx");
    }
    if (req == nullptr) {  // excluded by UCP_OP_ATTR_FLAG_NO_IMM_CMPL
      delete op;
      return absl::InternalError("ucp_tag_recv_nbx completed in place");
    }
    recvs_[cookie] = req;
    return absl::OkStatus();
  }

  void CancelRecv(uint64_t cookie) override {
    auto it = recvs_.find(cookie);
    if (it != recvs_.end()) ucp_request_cancel(worker_, it->second);
  }

  size_t Progress(std::vector<Completion>* out) override {
    for (int i = 0; i < 8; ++i) {
      if (ucp_worker_progress(worker_) == 0) break;
    }
    const size_t n = done_.size();
    for (auto& c : done_) out->push_back(std::move(c));
    done_.clear();
    return n;
  }

  void Wait(absl::Duration timeout) override {
    if (efd_ < 0) return;
    ucs_status_t s = ucp_worker_arm(worker_);
    if (s == UCS_ERR_BUSY) return;  // events pending: do not sleep
    struct pollfd pfd {
      efd_, POLLIN, 0
    };
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
    (void)poll(&pfd, 1, ms < 0 ? 0 : ms);
  }

  void Wake() override {
    if (worker_ != nullptr) ucp_worker_signal(worker_);
  }

  // --- called by the endpoint / callbacks on the owner thread ---
  absl::Status Send(ucp_ep_h ep, uint64_t tag, const void* buf, size_t len, uint64_t cookie, bool device) {
    auto* op = new OpCtx{this, cookie, len};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = ucp_dt_make_contig(1);
    SetMemoryType(device, &param);
    param.cb.send = &UcxTransport::OnSend;
    param.user_data = op;
    ucs_status_ptr_t req = ucp_tag_send_nbx(ep, buf, len, tag, &param);
    if (UCS_PTR_IS_ERR(req)) {
      delete op;
      return FromUcsStatus(UCS_PTR_STATUS(req), "ucp_tag_send_nbx");
    }
    if (req == nullptr) {  // completed in place
      done_.push_back(Completion{cookie, absl::OkStatus(), len});
      delete op;
    }
    return absl::OkStatus();
  }

  void CloseEndpoint(ucp_ep_h ep) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) {
      // Force close completes promptly; progress until it does.
      while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
  }

 private:
  UcxTransport() { caps_.name = "ucx"; }

  absl::Status Init(const UcxOptions& options) {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return FromUcsStatus(s, "ucp_config_read");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG | (options.enable_wakeup ? UCP_FEATURE_WAKEUP : 0);
    params.mt_workers_shared = 0;
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return FromUcsStatus(s, "ucp_init");

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    // GPU memory on the wire needs a UCX built with CUDA transports (cuda_copy,
    // cuda_ipc), and UCX_TLS allowing them.
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context_, &attr) == UCS_OK) {
      caps_.cuda_memory = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    }
    KVF_LOG(info, "ucx", "UCX {}: GPU memory {}", ucp_get_version_string(),
            caps_.cuda_memory ? "goes on the wire directly" : "needs host staging (no CUDA transport)");
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) return FromUcsStatus(s, "ucp_worker_create");

    ucp_address_t* addr = nullptr;
    size_t addr_len = 0;
    s = ucp_worker_get_address(worker_, &addr, &addr_len);
    if (s != UCS_OK) return FromUcsStatus(s, "ucp_worker_get_address");
    address_ = WrapUcxAddress(addr, addr_len);
    ucp_worker_release_address(worker_, addr);

    if (options.enable_wakeup) {
      s = ucp_worker_get_efd(worker_, &efd_);
      if (s != UCS_OK) {
        KVF_LOG(warn, "ucx", "no wakeup fd ({}); the data plane will poll", ucs_status_string(s));
        efd_ = -1;
      }
    }
    return absl::OkStatus();
  }

  // GPU buffers are named as such: UCX then need not look the pointer up (its
  // memory-type cache cannot see allocations made through a static CUDA runtime).
  static void SetMemoryType(bool device, ucp_request_param_t* param) {
    if (!device) return;
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param->memory_type = UCS_MEMORY_TYPE_CUDA;
  }

  static void OnSend(void* request, ucs_status_t status, void* user_data) {
    auto* op = static_cast<OpCtx*>(user_data);
    op->transport->done_.push_back(Completion{op->cookie, FromUcsStatus(status, "send"), op->length});
    delete op;
    ucp_request_free(request);
  }

  static void OnRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
    auto* op = static_cast<OpCtx*>(user_data);
    UcxTransport* t = op->transport;
    t->recvs_.erase(op->cookie);
    t->done_.push_back(Completion{op->cookie, FromUcsStatus(status, "receive"), status == UCS_OK ? info->length : 0});
    delete op;
    ucp_request_free(request);
  }

  static void OnEpError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    static_cast<UcxEndpoint*>(arg)->SetFailed(status);
    KVF_LOG(debug, "ucx", "endpoint error: {}", ucs_status_string(status));
  }

  friend class UcxEndpoint;
  Capabilities caps_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::string address_;
  absl::flat_hash_map<uint64_t, void*> recvs_;
  std::vector<Completion> done_;
};

UcxEndpoint::~UcxEndpoint() { Abort(); }

void UcxEndpoint::Abort() {
  if (ep_ == nullptr) return;
  if (health_.ok()) health_ = absl::UnavailableError("ucx endpoint closed");
  transport_->CloseEndpoint(std::exchange(ep_, nullptr));
}

absl::Status UcxEndpoint::SubmitSend(uint64_t tag, const void* buf, size_t len, uint64_t cookie, bool device) {
  if (!health_.ok()) return health_;
  if (device && !transport_->capabilities().cuda_memory) {
    return absl::FailedPreconditionError("this UCX has no CUDA transport: GPU memory cannot be sent directly");
  }
  return transport_->Send(ep_, tag, buf, len, cookie, device);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const UcxOptions& options) {
  return UcxTransport::Create(options);
}

}  // namespace kvferry::transport
