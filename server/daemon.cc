#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/kv_layout.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "kvferry/v1/control.grpc.pb.h"
#include "kvferry/v1/peer.grpc.pb.h"
#include "server/leases.h"
#include "server/pool_registry.h"
#include "server/transfers.h"

namespace kvferry::server {

constexpr char kVersion[] = "0.1.0";

namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view prefix) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(prefix, s.error_message()));
}

absl::Status ValidateKey(const std::string& key) {
  if (key.size() != 32) return absl::InvalidArgumentError("malformed transfer key (want 32 hex characters)");
  for (char c : key) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError("malformed transfer key (want 32 hex characters)");
    }
  }
  return absl::OkStatus();
}

// The sender's codec settings: the receiver's choice (anything but COMPRESSED
// or ADAPTIVE sends raw) and the pool's element type and block layout (the
// KV-aware mode's channel hint).
pipeline::CodecSpec CodecSpecFor(v1::Compression c, const v1::KvLayout& layout) {
  pipeline::CodecSpec spec;
  spec.mode = CompressionFromProto(c, pipeline::Compression::kRaw).value_or(pipeline::Compression::kRaw);
  const int d = layout.dtype();
  spec.dtype = d >= 1 && d <= 6 ? static_cast<codec::DType>(d) : codec::DType::kBytes;
  spec.layout = {layout.block_tokens(), layout.num_heads(), layout.head_dim()};
  return spec;
}

// The receiver's view of a lease must match the lease exactly.
absl::Status MatchLease(const Lease& lease, uint32_t block_count, uint64_t segment_bytes, const v1::KvLayout& layout) {
  if (!SameLayout(lease.pool->layout, layout) || lease.pool->geometry.segment_bytes != segment_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat("layout mismatch: published %s, receiver expects %s",
                                                         LayoutString(lease.pool->layout), LayoutString(layout)));
  }
  if (lease.blocks.size() != block_count) {
    return absl::FailedPreconditionError(
        absl::StrFormat("block count mismatch: published %d, receiver expects %d", lease.blocks.size(), block_count));
  }
  return absl::OkStatus();
}

absl::Duration ClampMs(uint32_t ms, absl::Duration dflt, absl::Duration max) {
  if (ms == 0) return dflt;
  return std::min(absl::Milliseconds(ms), max);
}

// An outgoing StartSend call; lives until its callback has run.
struct SendCall {
  grpc::ClientContext ctx;
  v1::StartSendRequest req;
  v1::StartSendResponse resp;
};

}  // namespace

class Daemon::Impl final : public v1::Control::Service, public v1::Peer::CallbackService {
 public:
  explicit Impl(const DaemonOptions& o) : options_(o) {}

  absl::Status Init(std::unique_ptr<transport::Transport> transport) {
    KVF_ASSIGN_OR_RETURN(engine_, pipeline::Engine::Create(std::move(transport), options_.engine));
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(static_cast<v1::Control::Service*>(this));
    builder.RegisterService(static_cast<v1::Peer::CallbackService*>(this));
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.listen));
    }
    std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]") {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    peer_address_ = options_.advertise.empty() ? absl::StrCat(host, ":", port_) : options_.advertise;
    if (!options_.port_file.empty()) {
      const std::string tmp = options_.port_file + ".tmp";
      {
        std::ofstream f(tmp);
        f << port_ << "\n";
        if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
      }
      if (std::rename(tmp.c_str(), options_.port_file.c_str()) != 0) {
        return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", options_.port_file));
      }
    }
    janitor_ = std::thread([this] { Janitor(); });
    KVF_LOG(info, "server", "kvferryd {} ({}) serving on port {}, peer address {}, transport {}", kVersion,
            options_.role, port_, peer_address_, engine_->capabilities().name);
    return absl::OkStatus();
  }

  void Shutdown() {
    if (shut_down_.exchange(true)) return;
    KVF_LOG(info, "server", "shutting down");
    {
      MutexLock l(&janitor_mu_);
      stop_janitor_ = true;
    }
    if (janitor_.joinable()) janitor_.join();
    // 1. End every data-plane job (their callbacks finish transfers and replies).
    if (engine_) engine_->Shutdown();
    // 2. Wait for outgoing StartSend calls (already told to cancel) to return.
    {
      MutexLock l(&calls_mu_);
      for (SendCall* c : open_calls_) c->ctx.TryCancel();
      calls_mu_.Await([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return open_calls_.empty(); });
    }
    // 3. Stop serving.
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  int port() const { return port_; }
  std::string peer_address() const { return peer_address_; }

  // ---------------- Control service ----------------

  grpc::Status RegisterPool(grpc::ServerContext*, const v1::RegisterPoolRequest* req,
                            v1::RegisterPoolResponse* resp) override {
    auto pool = pools_.Register(*req);
    if (pool.ok() && (*pool)->ipc) {
      // GPU workers and pinned staging are set up now, not on the first pull.
      if (auto st = engine_->PrepareDevice((*pool)->device); !st.ok()) {
        (void)pools_.Unregister((*pool)->id);
        pool = absl::Status(st.code(), absl::StrCat("GPU ", (*pool)->device, ": ", st.message()));
      }
    }
    if (!pool.ok()) {
      KVF_LOG(info, "control", "RegisterPool '{}' refused: {}", req->name(), pool.status().ToString());
      return ToGrpc(pool.status());
    }
    resp->set_pool_id((*pool)->id);
    resp->set_segment_bytes((*pool)->geometry.segment_bytes);
    resp->set_region_bytes((*pool)->geometry.region_bytes);
    KVF_LOG(info, "control", "pool {} '{}' registered: {} blocks, {}, {} bytes{}", (*pool)->id, req->name(),
            req->num_blocks(), LayoutString(req->layout()), (*pool)->geometry.region_bytes,
            (*pool)->ipc ? absl::StrCat(" on GPU ", (*pool)->device) : std::string(" in host memory"));
    return grpc::Status::OK;
  }

  grpc::Status UnregisterPool(grpc::ServerContext*, const v1::UnregisterPoolRequest* req,
                              v1::UnregisterPoolResponse*) override {
    return ToGrpc(pools_.Unregister(req->pool_id()));
  }

  grpc::Status Publish(grpc::ServerContext*, const v1::PublishRequest* req, v1::PublishResponse* resp) override {
    auto pool = pools_.Get(req->pool_id());
    if (!pool.ok()) return ToGrpc(pool.status());
    std::vector<uint32_t> blocks(req->block_ids().begin(), req->block_ids().end());
    if (auto st = ValidateBlockIds(blocks, (*pool)->geometry.num_blocks); !st.ok()) return ToGrpc(st);
    const absl::Duration ttl = ClampMs(req->lease_ttl_ms(), options_.default_lease_ttl, options_.max_lease_ttl);
    auto lease = leases_.Create(*pool, std::move(blocks), ttl);
    v1::Ticket* t = resp->mutable_ticket();
    t->set_peer_address(peer_address_);
    t->set_transfer_key(lease->key);
    t->set_block_count(static_cast<uint32_t>(lease->blocks.size()));
    *t->mutable_layout() = (*pool)->layout;
    t->set_segment_bytes((*pool)->geometry.segment_bytes);
    t->set_expires_unix_ms(absl::ToUnixMillis(lease->expires));
    KVF_LOG(debug, "control", "published {} blocks of pool {} for {} ms", lease->blocks.size(), req->pool_id(),
            absl::ToInt64Milliseconds(ttl));
    return grpc::Status::OK;
  }

  grpc::Status ReleaseLease(grpc::ServerContext*, const v1::ReleaseLeaseRequest* req,
                            v1::ReleaseLeaseResponse*) override {
    if (auto st = ValidateKey(req->transfer_key()); !st.ok()) return ToGrpc(st);
    return ToGrpc(leases_.Release(req->transfer_key()));
  }

  grpc::Status Pull(grpc::ServerContext*, const v1::PullRequest* req, v1::PullResponse* resp) override {
    auto id = StartPull(*req);
    if (!id.ok()) {
      KVF_LOG(info, "control", "Pull refused: {}", id.status().ToString());
      return ToGrpc(id.status());
    }
    resp->set_transfer_id(*id);
    return grpc::Status::OK;
  }

  grpc::Status GetTransfer(grpc::ServerContext*, const v1::GetTransferRequest* req, v1::TransferStatus* resp) override {
    auto s = transfers_.Get(req->transfer_id());
    if (!s.ok()) return ToGrpc(s.status());
    *resp = *s;
    return grpc::Status::OK;
  }

  grpc::Status WatchTransfer(grpc::ServerContext* ctx, const v1::GetTransferRequest* req,
                             grpc::ServerWriter<v1::TransferStatus>* writer) override {
    auto s = transfers_.Get(req->transfer_id());
    if (!s.ok()) return ToGrpc(s.status());
    for (;;) {
      if (!writer->Write(*s)) return grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away");
      if (IsTerminal(s->state())) return grpc::Status::OK;
      if (ctx->IsCancelled() || shut_down_) return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
      s = transfers_.WaitChange(req->transfer_id(), *s, absl::Milliseconds(250));
      if (!s.ok()) return ToGrpc(s.status());
    }
  }

  grpc::Status CancelTransfer(grpc::ServerContext*, const v1::CancelTransferRequest* req,
                              v1::TransferStatus* resp) override {
    auto s = transfers_.Get(req->transfer_id());
    if (!s.ok()) return ToGrpc(s.status());
    if (!IsTerminal(s->state())) {
      transfers_.Finish(req->transfer_id(), absl::CancelledError("cancelled by client"));
      engine_->Cancel(pipeline::Direction::kRecv, req->transfer_id(), absl::CancelledError("cancelled by client"));
      KVF_XLOG(info, "control", req->transfer_id(), "cancelled by client");
    }
    auto now = transfers_.Get(req->transfer_id());
    if (!now.ok()) return ToGrpc(now.status());
    *resp = *now;
    return grpc::Status::OK;
  }

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*, v1::GetStatusResponse* resp) override {
    resp->set_version(kVersion);
    resp->set_role(options_.role);
    resp->set_peer_address(peer_address_);
    for (auto& p : pools_.List()) *resp->add_pools() = p;
    resp->set_active_leases(static_cast<uint32_t>(leases_.size()));
    const auto c = transfers_.counts();
    resp->set_active_transfers(c.active);
    resp->set_transfers_done(c.done);
    resp->set_transfers_failed(c.failed);
    const auto e = engine_->stats();
    resp->set_bytes_received(e.bytes_received);
    resp->set_bytes_sent(e.bytes_sent);
    resp->set_transport(engine_->capabilities().name);
    resp->set_staging_bytes(e.staging_bytes_allocated);
    resp->set_send_slots(e.send_slots);
    resp->set_send_slots_free(e.send_slots_free);
    resp->set_recv_slots(e.recv_slots);
    resp->set_recv_slots_free(e.recv_slots_free);
    resp->set_active_sends(e.active_sends);
    resp->set_gpu_bytes(e.gpu_bytes_allocated);
    resp->set_gpu_direct(e.gpu_direct);
    return grpc::Status::OK;
  }

  // ---------------- Peer service ----------------

  grpc::ServerUnaryReactor* CheckTicket(grpc::CallbackServerContext* ctx, const v1::CheckTicketRequest* req,
                                        v1::CheckTicketResponse*) override {
    auto* r = ctx->DefaultReactor();
    absl::Status st = ValidateKey(req->transfer_key());
    if (st.ok()) {
      auto lease = leases_.Peek(req->transfer_key());
      st = lease.ok() ? MatchLease(**lease, req->block_count(), req->segment_bytes(), req->layout()) : lease.status();
    }
    r->Finish(ToGrpc(st));
    return r;
  }

  grpc::ServerUnaryReactor* StartSend(grpc::CallbackServerContext* ctx, const v1::StartSendRequest* req,
                                      v1::StartSendResponse* resp) override {
    auto* reactor = new SendReactor(this, req->transfer_id());
    absl::Status st = BeginSend(ctx, *req, resp, reactor);
    if (!st.ok()) {
      KVF_XLOG(info, "peer", req->transfer_id(), "StartSend refused: {}", st.ToString());
      reactor->Finish(ToGrpc(st));
    }
    return reactor;
  }

 private:
  class SendReactor final : public grpc::ServerUnaryReactor {
   public:
    SendReactor(Impl* d, uint64_t id) : d_(d), id_(id) {}
    void OnCancel() override {
      d_->engine_->Cancel(pipeline::Direction::kSend, id_, absl::CancelledError("receiver cancelled the transfer"));
    }
    void OnDone() override { delete this; }

   private:
    Impl* d_;
    uint64_t id_;
  };

  absl::Status BeginSend(grpc::CallbackServerContext* ctx, const v1::StartSendRequest& req, v1::StartSendResponse* resp,
                         SendReactor* reactor) {
    KVF_RETURN_IF_ERROR(ValidateKey(req.transfer_key()));
    if (req.transfer_id() == 0) return absl::InvalidArgumentError("transfer_id must be non-zero");
    if (req.transport() != engine_->capabilities().name) {
      return absl::FailedPreconditionError(absl::StrFormat("receiver speaks transport '%s', this daemon '%s'",
                                                           req.transport(), engine_->capabilities().name));
    }
    KVF_ASSIGN_OR_RETURN(auto lease, leases_.Claim(req.transfer_key()));
    absl::Status st = MatchLease(*lease, req.block_count(), req.segment_bytes(), req.layout());
    if (!st.ok()) {
      leases_.Unclaim(lease->key, false);
      return st;
    }
    absl::Time deadline = absl::FromChrono(ctx->deadline());
    deadline = std::min(deadline, absl::Now() + options_.max_deadline);
    auto counters = std::make_shared<pipeline::TransferCounters>();
    const uint64_t id = req.transfer_id();
    const absl::Time t0 = absl::Now();
    pipeline::SendSpec spec;
    spec.transfer_id = id;
    spec.peer_address = req.receiver_address();
    spec.source = lease->pool->Segments(lease->blocks);
    spec.device = lease->pool->device;
    spec.chunk_bytes = req.chunk_bytes();
    spec.deadline = deadline;
    spec.counters = counters;
    spec.codec = CodecSpecFor(req.compression(), lease->pool->layout);
    spec.peer_decode_bps = req.receiver_decode_bps();  // checked by the engine
    spec.peer_raw_bps = req.receiver_raw_bps();
    const char* mode = pipeline::CompressionName(spec.codec.mode);
    // The callback holds the lease (and so the pool) until the job has ended.
    spec.done = [this, lease, counters, resp, reactor, id, t0, mode](absl::Status s) {
      leases_.Unclaim(lease->key, s.ok());
      resp->set_bytes_sent(counters->bytes_done.load());
      resp->set_chunks_sent(counters->chunks_done.load());
      resp->set_wire_bytes(counters->wire_bytes.load());
      resp->set_chunks_encoded(counters->chunks_encoded.load());
      resp->set_encode_us(counters->codec_ns.load() / 1000);
      resp->set_stalls(counters->stalls.load());
      resp->set_chunks_split(counters->chunks_split.load());
      resp->set_first_payload_us(counters->first_payload_ns.load() / 1000);
      const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
      if (s.ok()) {
        const uint64_t raw = counters->bytes_done.load(), wire = counters->wire_bytes.load();
        KVF_XLOG(info, "peer", id,
                 "sent {} bytes in {} chunks ({}, {} encoded, {} split), {} on the wire (ratio {:.3f}), {:.3f} s, "
                 "{:.2f} GB/s; encode {:.3f} s over codec threads, first payload after {:.3f} ms, {} stalls",
                 raw, counters->chunks_done.load(), mode, counters->chunks_encoded.load(),
                 counters->chunks_split.load(), wire, wire ? static_cast<double>(raw) / wire : 0.0, secs,
                 raw / 1e9 / std::max(secs, 1e-9), counters->codec_ns.load() / 1e9,
                 counters->first_payload_ns.load() / 1e6, counters->stalls.load());
      } else {
        KVF_XLOG(info, "peer", id, "send ended: {}", s.ToString());
      }
      reactor->Finish(ToGrpc(s));
    };
    st = engine_->StartSend(std::move(spec));
    if (!st.ok()) {
      leases_.Unclaim(lease->key, false);
      return st;
    }
    return absl::OkStatus();
  }

  std::shared_ptr<v1::Peer::Stub> PeerStub(const std::string& address) {
    MutexLock l(&stubs_mu_);
    auto it = stubs_.find(address);
    if (it != stubs_.end()) return it->second;
    auto stub = std::shared_ptr<v1::Peer::Stub>(
        v1::Peer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
    if (stubs_.size() > 1024) stubs_.clear();
    stubs_[address] = stub;
    return stub;
  }

  absl::StatusOr<uint64_t> StartPull(const v1::PullRequest& req) {
    KVF_ASSIGN_OR_RETURN(auto pool, pools_.Get(req.pool_id()));
    const v1::Ticket& t = req.ticket();
    KVF_RETURN_IF_ERROR(ValidateKey(t.transfer_key()));
    if (t.peer_address().empty() || t.peer_address().size() > 512) {
      return absl::InvalidArgumentError("ticket.peer_address must be host:port");
    }
    if (!SameLayout(t.layout(), pool->layout) || t.segment_bytes() != pool->geometry.segment_bytes) {
      return absl::FailedPreconditionError(absl::StrFormat("ticket layout %s does not match pool %d layout %s",
                                                           LayoutString(t.layout()), pool->id,
                                                           LayoutString(pool->layout)));
    }
    std::vector<uint32_t> blocks(req.block_ids().begin(), req.block_ids().end());
    KVF_RETURN_IF_ERROR(ValidateBlockIds(blocks, pool->geometry.num_blocks));
    if (blocks.size() != t.block_count()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%d destination blocks for a ticket of %d blocks", blocks.size(), t.block_count()));
    }
    const absl::Time deadline =
        absl::Now() + ClampMs(req.deadline_ms(), options_.default_deadline, options_.max_deadline);
    auto stub = PeerStub(t.peer_address());

    // Ask the publisher first, so a bad ticket fails this call with its reason.
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + options_.peer_check_timeout)));
      v1::CheckTicketRequest creq;
      creq.set_transfer_key(t.transfer_key());
      creq.set_block_count(t.block_count());
      creq.set_segment_bytes(t.segment_bytes());
      *creq.mutable_layout() = t.layout();
      v1::CheckTicketResponse cresp;
      grpc::Status gs = stub->CheckTicket(&ctx, creq, &cresp);
      if (!gs.ok()) return FromGrpc(gs, absl::StrCat("publisher ", t.peer_address(), ": "));
    }

    KVF_ASSIGN_OR_RETURN(const pipeline::Compression compression,
                         CompressionFromProto(req.compression(), options_.compression));
    auto segs = pool->Segments(blocks);
    auto rec = transfers_.Create(pool, t.peer_address(), segs.total());
    rec->compression = compression;
    const uint64_t id = rec->id;
    const absl::Time t0 = absl::Now();
    pipeline::RecvSpec spec;
    spec.transfer_id = id;
    spec.destination = std::move(segs);
    spec.device = pool->device;
    spec.chunk_bytes = engine_->options().chunk_bytes;
    spec.deadline = deadline;
    spec.counters = rec->counters;
    // The callback holds the pool until the job has ended (nothing writes into
    // an unmapped pool even if the transfer was cancelled earlier).
    spec.done = [this, id, pool, counters = rec->counters, t0](absl::Status s) {
      const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
      if (s.ok()) {
        const uint64_t raw = counters->bytes_done.load(), wire = counters->wire_bytes.load();
        KVF_XLOG(info, "transfer", id,
                 "done: {} bytes verified in {} chunks ({} encoded), {} on the wire (ratio {:.3f}), {:.3f} s, "
                 "{:.2f} GB/s; decode {:.3f} s over codec threads, first payload after {:.3f} ms",
                 raw, counters->chunks_done.load(), counters->chunks_encoded.load(), wire,
                 wire ? static_cast<double>(raw) / wire : 0.0, secs, raw / 1e9 / std::max(secs, 1e-9),
                 counters->codec_ns.load() / 1e9, counters->first_payload_ns.load() / 1e6);
      } else {
        KVF_XLOG(info, "transfer", id, "ended after {:.3f} s: {}", secs, s.ToString());
      }
      transfers_.Finish(id, s);
    };
    if (auto st = engine_->StartRecv(std::move(spec)); !st.ok()) {
      transfers_.Finish(id, st);
      return st;
    }

    auto call = std::make_shared<SendCall>();
    call->ctx.set_deadline(absl::ToChronoTime(deadline));
    call->req.set_transfer_key(t.transfer_key());
    call->req.set_transfer_id(id);
    call->req.set_receiver_address(engine_->address());
    call->req.set_block_count(t.block_count());
    call->req.set_segment_bytes(t.segment_bytes());
    *call->req.mutable_layout() = t.layout();
    call->req.set_chunk_bytes(engine_->options().chunk_bytes);
    call->req.set_transport(engine_->capabilities().name);
    call->req.set_compression(CompressionToProto(compression));
    const auto rates = engine_->receive_rates(pool->device);  // for the sender's adaptive mode
    call->req.set_receiver_decode_bps(rates.decode_bps);
    call->req.set_receiver_raw_bps(rates.raw_bps);
    transfers_.SetCancelPeer(id, [call] { call->ctx.TryCancel(); });
    {
      MutexLock l(&calls_mu_);
      open_calls_.insert(call.get());
    }
    stub->async()->StartSend(&call->ctx, &call->req, &call->resp, [this, call, id](grpc::Status s) {
      if (!s.ok()) {
        // The sender gave up or vanished: end the receive with its reason.
        engine_->Cancel(pipeline::Direction::kRecv, id, FromGrpc(s, "sender: "));
      } else {
        transfers_.SetSenderMetrics(id, call->resp);
      }
      MutexLock l(&calls_mu_);
      open_calls_.erase(call.get());
    });
    transfers_.SetRunning(id);
    KVF_XLOG(info, "transfer", id, "pulling {} blocks from {} into pool {}", blocks.size(), t.peer_address(), pool->id);
    return id;
  }

  void Janitor() {
    for (;;) {
      {
        MutexLock l(&janitor_mu_);
        if (janitor_mu_.AwaitWithTimeout([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_janitor_; },
                                         absl::Milliseconds(100))) {
          return;
        }
      }
      if (size_t n = leases_.Sweep(absl::Now())) KVF_LOG(info, "server", "{} lease(s) expired", n);
      transfers_.Prune(absl::Minutes(10), 10000);
    }
  }

  const DaemonOptions options_;
  std::unique_ptr<pipeline::Engine> engine_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string peer_address_;
  PoolRegistry pools_;
  LeaseTable leases_;
  TransferTable transfers_;
  std::thread janitor_;
  Mutex janitor_mu_;
  bool stop_janitor_ ABSL_GUARDED_BY(janitor_mu_) = false;
  std::atomic<bool> shut_down_{false};

  Mutex stubs_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<v1::Peer::Stub>> stubs_ ABSL_GUARDED_BY(stubs_mu_);
  Mutex calls_mu_;
  absl::flat_hash_set<SendCall*> open_calls_ ABSL_GUARDED_BY(calls_mu_);
};

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options,
                                                      std::unique_ptr<transport::Transport> transport) {
  auto impl = std::make_unique<Impl>(options);
  if (auto st = impl->Init(std::move(transport)); !st.ok()) {
    impl->Shutdown();
    return st;
  }
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

int Daemon::port() const { return impl_->port(); }
std::string Daemon::peer_address() const { return impl_->peer_address(); }
void Daemon::Shutdown() {
  if (impl_) impl_->Shutdown();
}

std::string DescribeOptions(const DaemonOptions& o) {
  return absl::StrFormat(
      "listen = %s\nadvertise = %s\nrole = %s\nport_file = %s\nchunk_bytes = %d\nstaging_bytes_per_direction = %d\n"
      "window = %d\ncodec_threads = %d\ngpu_workers = %d\nsplit_send = %s\ngpu_direct = %s\ncompression = %s\n"
      "default_lease_ttl_ms = %d\nmax_lease_ttl_ms = %d\ndefault_deadline_ms = %d\nmax_deadline_ms = %d\n",
      o.listen, o.advertise.empty() ? "(listen host:bound port)" : o.advertise, o.role,
      o.port_file.empty() ? "(none)" : o.port_file, o.engine.chunk_bytes, o.engine.staging_bytes, o.engine.window,
      o.engine.codec_threads, o.engine.gpu_workers, o.engine.split_send ? "true" : "false",
      o.engine.gpu_direct ? "true" : "false", pipeline::CompressionName(o.compression), absl::ToInt64Milliseconds(o.default_lease_ttl),
      absl::ToInt64Milliseconds(o.max_lease_ttl), absl::ToInt64Milliseconds(o.default_deadline),
      absl::ToInt64Milliseconds(o.max_deadline));
}

}  // namespace kvferry::server
