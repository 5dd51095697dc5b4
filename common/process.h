// Child processes for the demo, the benchmark and integration tests: start a
// kvferryd, wait for its port file, stop it with SIGTERM (SIGKILL after a grace
// period) and collect its exit status.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvferry {

class ChildProcess {
 public:
  // argv[0] is the program path. `env` entries (NAME=value) are added to the
  // inherited environment. stdout+stderr go to `log_path` if non-empty.
  static absl::StatusOr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                            const std::vector<std::string>& env = {}, const std::string& log_path = "");
  ChildProcess() = default;
  ChildProcess(ChildProcess&& o) noexcept : pid_(std::exchange(o.pid_, -1)) {}
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ~ChildProcess();  // SIGKILLs a child that is still running

  pid_t pid() const { return pid_; }
  bool running();
  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit code (128+sig
  // for a signal death).
  int Stop(absl::Duration grace = absl::Seconds(5));
  // Waits up to `timeout` for the child to exit by itself, then SIGKILLs it.
  // Returns the exit code as Stop() does.
  int Wait(absl::Duration timeout);
  // SIGKILL now (a crash stand-in for tests).
  void Kill();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// Waits until `path` holds a port number; fails if `child` exits first.
absl::StatusOr<int> WaitForPortFile(const std::string& path, ChildProcess* child, absl::Duration timeout);

// Directory of the running executable.
std::string SelfDir();

}  // namespace kvferry
