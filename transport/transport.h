// The transport seam: tagged messages between daemons, never blocking.
//
// A Transport is owned by ONE thread (the data-plane thread); every method
// except Wake() must be called from it. Operations are submitted with a cookie
// and complete later through Progress(), which is also what drives the network.
//
//   sender:   ep = Connect(addr); ep->SubmitSend(tag, buf, len, cookie)
//   receiver: SubmitRecv(tag, buf, cap, cookie)
//   both:     Progress(&completions) in a loop; Wait() when idle.
//
// Buffers passed to Submit* stay owned by the caller and must remain valid until
// their completion is returned. Implementations: ucx/ (UCX ucp tag API) and
// loopback/ (in-process, for unit tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvferry::transport {

struct Completion {
  uint64_t cookie = 0;
  // OK, or why the operation failed (CANCELLED after CancelRecv/Close, a peer
  // error as UNAVAILABLE, a message larger than the receive buffer as
  // OUT_OF_RANGE).
  absl::Status status;
  // Bytes received (receives) or sent (sends).
  size_t length = 0;
};

// What an implementation can do, queried once at setup.
struct Capabilities {
  std::string name;          // "ucx", "loopback"
  bool cuda_memory = false;  // can send/receive GPU memory directly (Submit* with device = true)
};

// A connection to one peer, shared by every transfer to it. Abort() (or
// destruction) force-closes it: in-flight sends complete with an error through
// Progress() and later sends fail.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // `device`: buf is GPU memory (only where capabilities().cuda_memory).
  virtual absl::Status SubmitSend(uint64_t tag, const void* buf, size_t len, uint64_t cookie, bool device = false) = 0;
  // Non-OK once the connection has failed (peer gone) or was aborted.
  virtual absl::Status health() const = 0;
  virtual void Abort() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const Capabilities& capabilities() const = 0;

  // Opaque bytes a peer passes to Connect() to reach this transport.
  virtual std::string address() const = 0;

  virtual absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const std::string& peer_address) = 0;

  // Posts a receive for one message with exactly `tag` (into GPU memory when
  // `device`, only where capabilities().cuda_memory).
  virtual absl::Status SubmitRecv(uint64_t tag, void* buf, size_t capacity, uint64_t cookie, bool device = false) = 0;

  // Cancels a posted receive; it completes (CANCELLED, or normally if it had
  // already matched) through Progress(). Unknown cookies are ignored.
  virtual void CancelRecv(uint64_t cookie) = 0;

  // Drives communication; appends finished operations. Returns how many.
  virtual size_t Progress(std::vector<Completion>* out) = 0;

  // Sleeps until there may be work, Wake() is called, or `timeout` passes.
  virtual void Wait(absl::Duration timeout) = 0;

  // Thread-safe: makes a concurrent Wait() return.
  virtual void Wake() = 0;
};

}  // namespace kvferry::transport
