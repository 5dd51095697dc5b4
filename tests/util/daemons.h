// Test helpers: real kvferryd processes on port 0, clients, small KV pools.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli/kv_data.h"
#include "client/client.h"
#include "common/process.h"

namespace kvferry::testing {

inline std::string TmpDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

// A kvferryd started as a child process; stopped (SIGTERM) on destruction.
struct Daemon {
  std::string role, address, log;
  ChildProcess process;
  std::unique_ptr<client::Client> client;

  static std::unique_ptr<Daemon> Start(const std::string& role, std::vector<std::string> flags = {}) {
    static int counter = 0;
    auto d = std::make_unique<Daemon>();
    d->role = role;
    const std::string base = absl::StrCat(TmpDir(), "/", role, "-", getpid(), "-", counter++);
    d->log = base + ".log";
    std::vector<std::string> argv = {"server/kvferryd", "--listen=127.0.0.1:0", "--port_file=" + base + ".port",
                                     "--role=" + role, "--log_level=debug"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    // A GPU host's run can add daemon flags to every test daemon, e.g.
    // KVFERRY_TEST_DAEMON_FLAGS=--gpu_direct.
    if (const char* extra = getenv("KVFERRY_TEST_DAEMON_FLAGS")) {
      for (absl::string_view f : absl::StrSplit(extra, ' ', absl::SkipEmpty())) argv.emplace_back(f);
    }
    auto child = ChildProcess::Spawn(argv, {}, d->log);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return nullptr;
    d->process = std::move(child).value();
    auto port = WaitForPortFile(base + ".port", &d->process, absl::Seconds(20));
    EXPECT_TRUE(port.ok()) << port.status() << " (log " << d->log << ")";
    if (!port.ok()) return nullptr;
    d->address = absl::StrCat("127.0.0.1:", *port);
    auto c = client::Client::Connect(d->address);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    d->client = std::move(c).value();
    return d;
  }

  // The last `lines` lines of the daemon's log, for failure messages.
  std::string LogTail(int lines = 40) const {
    std::ifstream in(log);
    std::vector<std::string> all;
    for (std::string l; std::getline(in, l);) all.push_back(std::move(l));
    std::ostringstream out;
    out << "--- last lines of " << role << " log ---\n";
    for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size(); ++i) {
      out << all[i] << "\n";
    }
    return out.str();
  }

  ~Daemon() {
    client.reset();
    if (process.pid() > 0) process.Stop();
  }
};

// 4 layers x 2 planes x 16 tokens x 2 heads x 64 dims, bf16: 4 KiB segments.
inline v1::KvLayout SmallLayout() {
  v1::KvLayout l;
  l.set_num_layers(4);
  l.set_kv_planes(2);
  l.set_block_tokens(16);
  l.set_num_heads(2);
  l.set_head_dim(64);
  l.set_dtype(v1::DTYPE_BF16);
  return l;
}

inline void FillRandom(uint8_t* p, size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
}

using cli::SameBlock;

}  // namespace kvferry::testing
