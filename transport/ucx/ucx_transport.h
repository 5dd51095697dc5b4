// Transport over UCX (ucp tag API). Whatever UCX selects: TCP on loopback in
// tests (UCX_TLS=tcp,self,sm), RC/DC/cuda where the fabric and build allow.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace kvferry::transport {

struct UcxOptions {
  // Reserved for future tuning; UCX itself reads UCX_* environment variables.
  bool enable_wakeup = true;
};

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const UcxOptions& options);

// UCX status -> absl::Status (the one place UCX codes are converted).
absl::Status FromUcsStatus(int ucs_status, const char* what);

}  // namespace kvferry::transport
