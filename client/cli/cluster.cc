#include "client/cli/cluster.h"

#include <stdlib.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace kvferry::cli {

absl::StatusOr<std::string> FindKvferryd(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  const std::string dir = SelfDir();
  for (const std::string& p : {dir + "/kvferryd", dir + "/../server/kvferryd"}) {
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return absl::NotFoundError("cannot find kvferryd next to this binary; pass --kvferryd=PATH");
}

std::vector<std::string> UcxLoopbackEnv() {
  std::vector<std::string> env;
  if (getenv("UCX_TLS") == nullptr) env.push_back("UCX_TLS=tcp");
  if (getenv("UCX_NET_DEVICES") == nullptr) env.push_back("UCX_NET_DEVICES=lo");
  env.push_back("UCX_WARN_UNUSED_ENV_VARS=n");
  return env;
}

absl::StatusOr<std::string> MakeWorkDir(const std::string& prefix) {
  const char* tmp = getenv("TMPDIR");
  std::string tmpl = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", prefix, "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, " failed"));
  return tmpl;
}

absl::StatusOr<std::vector<LocalDaemon>> StartLocalDaemons(const std::string& kvferryd,
                                                           const std::vector<std::string>& roles,
                                                           const std::string& workdir,
                                                           const std::vector<std::string>& extra_flags) {
  std::vector<DaemonLaunch> launches;
  for (const auto& role : roles) launches.push_back({role, "127.0.0.1", {}, UcxLoopbackEnv()});
  return StartDaemons(kvferryd, launches, workdir, extra_flags);
}

absl::StatusOr<std::vector<LocalDaemon>> StartDaemons(const std::string& kvferryd,
                                                      const std::vector<DaemonLaunch>& launches,
                                                      const std::string& workdir,
                                                      const std::vector<std::string>& extra_flags) {
  std::vector<LocalDaemon> out;
  for (const auto& l : launches) {
    LocalDaemon d;
    d.role = l.role;
    d.log_path = absl::StrCat(workdir, "/", l.role, ".log");
    const std::string port_file = absl::StrCat(workdir, "/", l.role, ".port");
    std::vector<std::string> argv = l.prefix;
    for (const std::string& a :
         {kvferryd, "--listen=" + l.host + ":0", "--port_file=" + port_file, "--role=" + l.role}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    auto child = ChildProcess::Spawn(argv, l.env, d.log_path);
    if (!child.ok()) return child.status();
    d.process = std::move(child).value();
    auto port = WaitForPortFile(port_file, &d.process, absl::Seconds(20));
    if (!port.ok()) {
      return absl::Status(port.status().code(),
                          absl::StrCat(l.role, " daemon: ", port.status().message(), " (log: ", d.log_path, ")"));
    }
    d.address = absl::StrCat(l.host, ":", *port);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace kvferry::cli
