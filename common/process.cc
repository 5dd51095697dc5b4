#include "common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace kvferry {

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                 const std::vector<std::string>& env, const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot execute ", argv[0], ": ", std::strerror(errno)));
  }
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path, ": ", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The environment is built here: after fork only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& o : env) overridden |= o.substr(0, o.find('=')) == name;
    if (!overridden) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  return ChildProcess(pid);
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0) Kill();
    pid_ = std::exchange(o.pid_, -1);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) Kill();
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  return waitpid(pid_, &status, WNOHANG) == 0;
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

int ChildProcess::Stop(absl::Duration grace) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return Wait(grace);
}

int ChildProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  const absl::Time until = absl::Now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0) {
      pid_ = -1;
      return -1;
    }
    if (absl::Now() > until) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

absl::StatusOr<int> WaitForPortFile(const std::string& path, ChildProcess* child, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    std::ifstream f(path);
    std::string line;
    int port = 0;
    if (f && std::getline(f, line) && absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &port) && port > 0) {
      return port;
    }
    if (child != nullptr && !child->running()) {
      return absl::UnavailableError(absl::StrCat("process exited before writing ", path));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat("no port in ", path));
}

std::string SelfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

}  // namespace kvferry
