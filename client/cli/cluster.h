// Local daemons as child processes, on loopback with ports chosen by the OS.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process.h"

namespace kvferry::cli {

struct LocalDaemon {
  std::string role;
  std::string address;  // host:port
  std::string log_path;
  ChildProcess process;
};

// Finds kvferryd: an explicit path, else next to this binary (or in ../server).
absl::StatusOr<std::string> FindKvferryd(const std::string& explicit_path);

// Starts one daemon per role. UCX_TLS / UCX_NET_DEVICES default to tcp / lo
// (the loopback network path) unless already set in the environment.
absl::StatusOr<std::vector<LocalDaemon>> StartLocalDaemons(const std::string& kvferryd,
                                                           const std::vector<std::string>& roles,
                                                           const std::string& workdir,
                                                           const std::vector<std::string>& extra_flags = {});

// How to start one daemon of StartDaemons.
struct DaemonLaunch {
  std::string role;
  std::string host = "127.0.0.1";   // listen address (port 0)
  std::vector<std::string> prefix;  // e.g. {"ip", "netns", "exec", NS}
  std::vector<std::string> env;     // UCX environment
};
absl::StatusOr<std::vector<LocalDaemon>> StartDaemons(const std::string& kvferryd,
                                                      const std::vector<DaemonLaunch>& launches,
                                                      const std::string& workdir,
                                                      const std::vector<std::string>& extra_flags = {});

// Environment used for UCX processes started by the CLI.
std::vector<std::string> UcxLoopbackEnv();

// A fresh private directory under $TMPDIR (or /tmp).
absl::StatusOr<std::string> MakeWorkDir(const std::string& prefix);

}  // namespace kvferry::cli
