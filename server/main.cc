// kvferryd: per-node KV-cache transfer daemon. Thin main: flags -> options.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "common/log.h"
#include "server/daemon.h"
#include "transport/ucx/ucx_transport.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address host:port (control and peer services). Port 0 picks a free port.");
ABSL_FLAG(std::string, advertise, "",
          "host:port that tickets name for pullers to reach this daemon (default: listen host + bound port).");
ABSL_FLAG(std::string, role, "node", "Role label shown in status and logs (prefill, decode, ...).");
ABSL_FLAG(std::string, port_file, "", "Write the bound port to this file once serving.");
ABSL_FLAG(uint64_t, chunk_bytes, 1ull << 20, "Payload bytes per data-plane chunk (4 KiB .. 1 GiB).");
ABSL_FLAG(uint64_t, staging_mib, 64,
          "Staging memory per direction (send, receive) in MiB, allocated at start; bounds chunks in flight.");
ABSL_FLAG(uint32_t, window, 8, "Chunks in flight per transfer (1 .. 1024).");
ABSL_FLAG(uint32_t, codec_threads, 2,
          "CPU codec threads for compressed chunks (0 .. 64; 0 turns compression off and refuses encoded chunks).");
ABSL_FLAG(uint32_t, gpu_workers, 4,
          "Threads per GPU with registered pools (0 .. 16), each with its own CUDA stream, CUDA codec workspaces "
          "and device buffers: gather, encode, decode and scatter of chunks of GPU pools. 0 refuses GPU pools.");
ABSL_FLAG(bool, split_send, false,
          "Split-send: where a transfer's link is idle, an encoded chunk's raw sign+mantissa plane goes on the wire "
          "as soon as the codec has split it off, while its exponents are still being coded (false: encoded chunks "
          "go whole, once coded). Off by default: it measured no gain on the hosts tested (docs/performance.md).");
ABSL_FLAG(bool, gpu_direct, false,
          "GPU pools' chunks go on the wire straight from device memory (gathered, encoded, received, verified and "
          "decoded on the GPU), where UCX has CUDA transports and UCX_TLS allows them (kvferry status says "
          "gpu_direct=yes then). Worth it where UCX moves GPU memory natively: cuda_ipc between GPUs of one host "
          "(UCX_TLS=tcp,cuda_copy,cuda_ipc,self,sm), GPUDirect RDMA. Over plain TCP, UCX's own staging of GPU "
          "memory is far slower than kvferry's, so it is off by default; without it (or without such a UCX, e.g. "
          "Debian's) chunks are staged through pinned host memory.");
ABSL_FLAG(std::string, compression, "adaptive",
          "Compression of pulls that do not choose one: raw, compressed (every chunk through the codec; chunks "
          "that do not shrink go raw) or adaptive (the fraction of chunks that balances codec and link "
          "throughput, measured as the transfer runs).");
ABSL_FLAG(uint32_t, lease_ttl_ms, 30000, "Default lease time for published blocks.");
ABSL_FLAG(uint32_t, max_lease_ttl_ms, 600000, "Upper bound for a requested lease time.");
ABSL_FLAG(uint32_t, deadline_ms, 60000, "Default deadline of a pull.");
ABSL_FLAG(uint32_t, max_deadline_ms, 3600000, "Upper bound for a requested pull deadline.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical or off.");
ABSL_FLAG(std::string, log_file, "", "Log to this file instead of stderr.");
ABSL_FLAG(bool, print_config, false, "Print the effective configuration and exit.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "moves KV-cache blocks between nodes for disaggregated LLM inference.\n"
      "Workers register KV pools and publish or pull blocks through the gRPC Control API\n"
      "(proto/kvferry/v1/control.proto); daemons stream blocks to each other over UCX.\n"
      "Usage: kvferryd [--listen=HOST:PORT] [--role=prefill|decode] [flags]");
  absl::FlagsUsageConfig cfg;
  cfg.contains_helpshort_flags = [](absl::string_view f) {
    return f.find("server/main.cc") != absl::string_view::npos;
  };
  cfg.contains_help_flags = cfg.contains_helpshort_flags;
  absl::SetFlagsUsageConfig(cfg);
  absl::ParseCommandLine(argc, argv);

  kvferry::server::DaemonOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  o.advertise = absl::GetFlag(FLAGS_advertise);
  o.role = absl::GetFlag(FLAGS_role);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.engine.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  o.engine.staging_bytes = absl::GetFlag(FLAGS_staging_mib) << 20;
  o.engine.window = absl::GetFlag(FLAGS_window);
  o.engine.codec_threads = absl::GetFlag(FLAGS_codec_threads);
  o.engine.gpu_workers = absl::GetFlag(FLAGS_gpu_workers);
  o.engine.split_send = absl::GetFlag(FLAGS_split_send);
  o.engine.gpu_direct = absl::GetFlag(FLAGS_gpu_direct);
  if (o.engine.gpu_workers > 16) {
    std::fprintf(stderr, "kvferryd: --gpu_workers must be in [0, 16]\n");
    return 2;
  }
  {
    auto c = kvferry::pipeline::ParseCompression(absl::GetFlag(FLAGS_compression));
    if (!c.ok()) {
      std::fprintf(stderr, "kvferryd: --compression: %s\n", std::string(c.status().message()).c_str());
      return 2;
    }
    o.compression = *c;
    if (o.compression != kvferry::pipeline::Compression::kRaw && o.engine.codec_threads == 0) {
      std::fprintf(stderr, "kvferryd: --compression=%s needs --codec_threads >= 1\n",
                   kvferry::pipeline::CompressionName(o.compression));
      return 2;
    }
  }
  o.default_lease_ttl = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ttl_ms));
  o.max_lease_ttl = absl::Milliseconds(absl::GetFlag(FLAGS_max_lease_ttl_ms));
  o.default_deadline = absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  o.max_deadline = absl::Milliseconds(absl::GetFlag(FLAGS_max_deadline_ms));

  if (absl::GetFlag(FLAGS_print_config)) {
    std::cout << kvferry::server::DescribeOptions(o);
    return 0;
  }
  if (!kvferry::InitLogging(absl::GetFlag(FLAGS_log_level), absl::GetFlag(FLAGS_log_file))) return 2;
  if (o.default_lease_ttl > o.max_lease_ttl || o.default_deadline > o.max_deadline ||
      o.default_lease_ttl <= absl::ZeroDuration()) {
    std::cerr << "kvferryd: default lease/deadline must be positive and not above their maximum\n";
    return 2;
  }

  // Signals are taken synchronously by this thread; block them before any
  // other thread starts so they all inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto transport = kvferry::transport::CreateUcxTransport({});
  if (!transport.ok()) {
    std::cerr << "kvferryd: UCX: " << transport.status() << "\n";
    return 1;
  }
  auto daemon = kvferry::server::Daemon::Start(o, std::move(transport).value());
  if (!daemon.ok()) {
    std::cerr << "kvferryd: " << daemon.status() << "\n";
    return 1;
  }
  std::printf("kvferryd listening on port %d (peer address %s)\n", (*daemon)->port(),
              (*daemon)->peer_address().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  SPDLOG_INFO("[server] signal {} received", sig);
  (*daemon)->Shutdown();
  daemon->reset();
  return 0;
}
