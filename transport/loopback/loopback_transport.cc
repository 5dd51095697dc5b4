#include "transport/loopback/loopback_transport.h"

#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace kvferry::transport {

class LoopbackTransport;

// Shared state of all loopback transports: one mutex guards every queue.
class LoopbackFabric {
 public:
  Mutex mu;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  absl::flat_hash_map<std::string, LoopbackTransport*> by_address ABSL_GUARDED_BY(mu);
};

std::shared_ptr<LoopbackFabric> NewLoopbackFabric() { return std::make_shared<LoopbackFabric>(); }

namespace {
struct PostedRecv {
  uint64_t tag;
  void* buf;
  size_t capacity;
  uint64_t cookie;
};
struct Unexpected {
  uint64_t tag;
  std::string bytes;
};
}  // namespace

class LoopbackTransport final : public Transport {
 public:
  explicit LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric) : fabric_(std::move(fabric)) {
    caps_.name = "loopback";
    MutexLock l(&fabric_->mu);
    address_ = absl::StrCat("loopback:", fabric_->next_id++);
    fabric_->by_address[address_] = this;
  }
  ~LoopbackTransport() override {
    MutexLock l(&fabric_->mu);
    fabric_->by_address.erase(address_);
  }

  const Capabilities& capabilities() const override { return caps_; }
  std::string address() const override { return address_; }

  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const std::string& peer_address) override;

  absl::Status SubmitRecv(uint64_t tag, void* buf, size_t capacity, uint64_t cookie, bool device = false) override {
    if (device) return absl::FailedPreconditionError("the loopback transport cannot carry GPU memory");
    MutexLock l(&fabric_->mu);
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->tag != tag) continue;
      Deliver(PostedRecv{tag, buf, capacity, cookie}, it->bytes.data(), it->bytes.size());
      unexpected_.erase(it);
      return absl::OkStatus();
    }
    posted_.push_back(PostedRecv{tag, buf, capacity, cookie});
    return absl::OkStatus();
  }

  void CancelRecv(uint64_t cookie) override {
    MutexLock l(&fabric_->mu);
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (it->cookie == cookie) {
        done_.push_back(Completion{cookie, absl::CancelledError("receive cancelled"), 0});
        posted_.erase(it);
        return;
      }
    }
  }

  size_t Progress(std::vector<Completion>* out) override {
    MutexLock l(&fabric_->mu);
    const size_t n = done_.size();
    for (auto& c : done_) out->push_back(std::move(c));
    done_.clear();
    return n;
  }

  void Wait(absl::Duration timeout) override {
    MutexLock l(&fabric_->mu);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fabric_->mu) { return woken_ || !done_.empty(); };
    fabric_->mu.AwaitWithTimeout(ready, timeout);
    woken_ = false;
  }

  void Wake() override {
    MutexLock l(&fabric_->mu);
    woken_ = true;
  }

  // Called by a peer's endpoint with the fabric lock held.
  void Arrive(uint64_t tag, const void* data, size_t len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(fabric_->mu) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (it->tag != tag) continue;
      Deliver(*it, data, len);
      posted_.erase(it);
      return;
    }
    unexpected_.push_back(Unexpected{tag, std::string(static_cast<const char*>(data), len)});
  }

  void PushCompletion(Completion c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(fabric_->mu) { done_.push_back(std::move(c)); }

  LoopbackFabric* fabric() const { return fabric_.get(); }

 private:
  void Deliver(const PostedRecv& r, const void* data, size_t len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(fabric_->mu) {
    if (len > r.capacity) {
      done_.push_back(Completion{r.cookie, absl::OutOfRangeError("receive: message truncated"), 0});
      return;
    }
    if (len > 0) std::memcpy(r.buf, data, len);
    done_.push_back(Completion{r.cookie, absl::OkStatus(), len});
  }

  std::shared_ptr<LoopbackFabric> fabric_;
  Capabilities caps_;
  std::string address_;
  std::deque<PostedRecv> posted_ ABSL_GUARDED_BY(fabric_->mu);
  std::deque<Unexpected> unexpected_ ABSL_GUARDED_BY(fabric_->mu);
  std::vector<Completion> done_ ABSL_GUARDED_BY(fabric_->mu);
  bool woken_ ABSL_GUARDED_BY(fabric_->mu) = false;
};

namespace {
class LoopbackEndpoint final : public Endpoint {
 public:
  LoopbackEndpoint(LoopbackTransport* self, std::string peer) : self_(self), peer_(std::move(peer)) {}

  absl::Status SubmitSend(uint64_t tag, const void* buf, size_t len, uint64_t cookie, bool device = false) override {
    if (device) return absl::FailedPreconditionError("the loopback transport cannot carry GPU memory");
    if (!health_.ok()) return health_;
    MutexLock l(&self_->fabric()->mu);
    auto it = self_->fabric()->by_address.find(peer_);
    if (it == self_->fabric()->by_address.end()) {
      health_ = absl::UnavailableError("loopback peer gone");
      self_->PushCompletion(Completion{cookie, health_, 0});
      return absl::OkStatus();
    }
    it->second->Arrive(tag, buf, len);
    self_->PushCompletion(Completion{cookie, absl::OkStatus(), len});
    return absl::OkStatus();
  }
  absl::Status health() const override { return health_; }
  void Abort() override { health_ = absl::UnavailableError("loopback endpoint closed"); }

 private:
  LoopbackTransport* self_;
  std::string peer_;
  absl::Status health_;
};
}  // namespace

absl::StatusOr<std::unique_ptr<Endpoint>> LoopbackTransport::Connect(const std::string& peer_address) {
  MutexLock l(&fabric_->mu);
  if (!fabric_->by_address.contains(peer_address)) {
    return absl::UnavailableError(absl::StrCat("no loopback transport at '", peer_address, "'"));
  }
  return std::unique_ptr<Endpoint>(new LoopbackEndpoint(this, peer_address));
}

absl::StatusOr<std::unique_ptr<Transport>> CreateLoopbackTransport(std::shared_ptr<LoopbackFabric> fabric) {
  if (fabric == nullptr) return absl::InvalidArgumentError("null loopback fabric");
  return std::unique_ptr<Transport>(new LoopbackTransport(std::move(fabric)));
}

}  // namespace kvferry::transport
