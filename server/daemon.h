// kvferryd: the gRPC control and peer services over a pool registry, a lease
// table, a transfer table and the data-plane engine.
//
// Threads: gRPC threads validate requests and hand work to the engine; the
// engine thread owns the transport and all chunk I/O; a janitor thread expires
// leases and prunes finished transfers. See docs/architecture.md.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/pipeline/engine.h"
#include "transport/transport.h"

namespace kvferry::server {

struct DaemonOptions {
  // gRPC listen address, host:port; port 0 picks a free port.
  std::string listen = "127.0.0.1:0";
  // host:port written into tickets; empty: the listen host with the bound port.
  std::string advertise;
  std::string role = "node";
  // If set, the bound port is written here (atomically) once serving.
  std::string port_file;
  pipeline::EngineOptions engine;
  // Compression of pulls that do not choose one.
  pipeline::Compression compression = pipeline::Compression::kAdaptive;
  absl::Duration default_lease_ttl = absl::Seconds(30);
  absl::Duration max_lease_ttl = absl::Minutes(10);
  absl::Duration default_deadline = absl::Seconds(60);
  absl::Duration max_deadline = absl::Hours(1);
  absl::Duration peer_check_timeout = absl::Seconds(5);
};

class Daemon {
 public:
  // Binds, starts serving and returns. The transport is the data plane's.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonOptions& options,
                                                       std::unique_ptr<transport::Transport> transport);
  ~Daemon();  // Shutdown()

  int port() const;
  // What tickets carry (host:port).
  std::string peer_address() const;
  // Cancels transfers, stops the data plane and the gRPC server. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Effective configuration as "key = value" lines (for --print_config).
std::string DescribeOptions(const DaemonOptions& o);

}  // namespace kvferry::server
