// In-process transport for unit tests: transports created on the same Fabric
// reach each other by address. Matching follows the UCX tag rules (exact tag,
// FIFO per tag); a message with no posted receive is held as unexpected.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace kvferry::transport {

class LoopbackFabric;

// A fresh fabric; transports keep it alive.
std::shared_ptr<LoopbackFabric> NewLoopbackFabric();

absl::StatusOr<std::unique_ptr<Transport>> CreateLoopbackTransport(std::shared_ptr<LoopbackFabric> fabric);

}  // namespace kvferry::transport
