// Local daemons as child processes, on loopback with ports chosen by the OS.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process.h"

namespace kvferry::cli {

struct LocalDaemon {
  std::string role;
  std::string address;  // 127.0.0.1:port
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

// Environment used for UCX processes started by the CLI.
std::vector<std::string> UcxLoopbackEnv();

// A fresh private directory under $TMPDIR (or /tmp).
absl::StatusOr<std::string> MakeWorkDir(const std::string& prefix);

}  // namespace kvferry::cli
