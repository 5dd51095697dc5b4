// `kvferry demo`: the main job on an embedded default. Two daemons on loopback
// (prefill, decode), host pools, a KV-like request published on one side and
// pulled into different blocks on the other, verified end to end.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <numeric>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cli/cluster.h"
#include "client/cli/commands.h"
#include "client/cli/kv_data.h"
#include "client/client.h"

ABSL_FLAG(std::string, kvferryd, "", "demo/bench: path of the kvferryd binary (default: next to kvferry).");
ABSL_FLAG(uint32_t, demo_blocks, 64, "demo: blocks in the request (16 tokens each).");
ABSL_FLAG(bool, keep_workdir, false, "demo/bench: keep the daemons' logs and port files.");

namespace kvferry::cli {

int RunDemo(const std::vector<std::string>&) {
  const uint32_t n = absl::GetFlag(FLAGS_demo_blocks);
  const uint32_t pool_blocks = 2 * n;
  if (n == 0 || n > 4096) {
    std::cerr << "kvferry demo: --demo_blocks must be in [1, 4096]\n";
    return 2;
  }
  auto bin = FindKvferryd(absl::GetFlag(FLAGS_kvferryd));
  if (!bin.ok()) return std::cerr << "kvferry demo: " << bin.status() << "\n", 1;
  auto dir = MakeWorkDir("kvferry-demo");
  if (!dir.ok()) return std::cerr << "kvferry demo: " << dir.status() << "\n", 1;

  std::printf("kvferry demo: prefill and decode daemons on loopback, host memory\n");
  auto daemons = StartLocalDaemons(*bin, {"prefill", "decode"}, *dir);
  if (!daemons.ok()) return std::cerr << "kvferry demo: " << daemons.status() << "\n", 1;
  LocalDaemon& p = (*daemons)[0];
  LocalDaemon& d = (*daemons)[1];
  std::printf("  prefill kvferryd at %s (pid %d), decode kvferryd at %s (pid %d)\n", p.address.c_str(), p.process.pid(),
              d.address.c_str(), d.process.pid());

  int rc = 0;
  {
    auto pc = client::Client::Connect(p.address);
    auto dc = client::Client::Connect(d.address);
    if (!pc.ok() || !dc.ok()) return std::cerr << "kvferry demo: cannot reach the daemons\n", 1;

    v1::KvLayout layout = client::ParseLayout("32,2,16,8,128", v1::DTYPE_BF16).value();
    auto ppool = (*pc)->CreateHostPool("prefill-kv", layout, pool_blocks);
    auto dpool = (*dc)->CreateHostPool("decode-kv", layout, pool_blocks);
    if (!ppool.ok() || !dpool.ok()) {
      std::cerr << "kvferry demo: pool: " << (ppool.ok() ? dpool.status() : ppool.status()) << "\n";
      return 1;
    }
    const Geometry& g = (*ppool)->geometry();
    const uint64_t block_bytes = g.segment_bytes * g.layers * g.planes;
    std::printf("  layout: %s; block = %.1f MiB (%u segments of %llu KiB)\n", LayoutString(layout).c_str(),
                block_bytes / 1048576.0, g.layers * g.planes, static_cast<unsigned long long>(g.segment_bytes >> 10));
    std::printf("  pools: %u blocks each (%.0f MiB), prefill pool id %llu, decode pool id %llu\n", pool_blocks,
                g.region_bytes / 1048576.0, static_cast<unsigned long long>((*ppool)->id()),
                static_cast<unsigned long long>((*dpool)->id()));

    absl::Time t = absl::Now();
    FillKvLike(**ppool, /*seed=*/1);
    std::memset((*dpool)->base(), 0, (*dpool)->bytes());
    std::printf("  filled the prefill pool with KV-like bf16 data (per-channel scale) in %.2f s\n",
                absl::ToDoubleSeconds(absl::Now() - t));

    // The request's blocks: every other block on the prefill side, landing in
    // the upper half of the decode pool in reverse order.
    std::vector<uint32_t> src(n), dst(n);
    for (uint32_t i = 0; i < n; ++i) {
      src[i] = 2 * i;
      dst[i] = pool_blocks - 1 - i;
    }
    auto ticket = (*pc)->Publish((*ppool)->id(), src);
    if (!ticket.ok()) return std::cerr << "kvferry demo: publish: " << ticket.status() << "\n", 1;
    std::printf(
        "  published %u blocks (%u tokens), key %.8s..., lease until %s\n", n, n * 16, ticket->transfer_key().c_str(),
        absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(ticket->expires_unix_ms()), absl::LocalTimeZone()).c_str());

    const absl::Time t0 = absl::Now();
    auto id = (*dc)->Pull(*ticket, (*dpool)->id(), dst);
    if (!id.ok()) return std::cerr << "kvferry demo: pull: " << id.status() << "\n", 1;
    uint32_t shown = 0;
    const bool tty = isatty(1);  // redraw one line on a terminal, a line per step in logs
    auto last = (*dc)->Watch(*id, [&](const v1::TransferStatus& s) {
      if (s.chunks_total() > 0 && s.chunks_done() >= shown) {
        std::printf("%s  pulling transfer %016llx: %u/%u chunks%s", tty ? "\r" : "",
                    static_cast<unsigned long long>(s.transfer_id()), s.chunks_done(), s.chunks_total(),
                    tty ? "" : "\n");
        std::fflush(stdout);
        shown = s.chunks_done() + std::max(1u, s.chunks_total() / (tty ? 10 : 4));
      }
    });
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    if (tty) std::printf("\n");
    if (!last.ok()) return std::cerr << "kvferry demo: watch: " << last.status() << "\n", 1;
    if (last->state() != v1::TRANSFER_STATE_DONE) {
      std::cerr << "kvferry demo: transfer " << client::StateName(last->state()) << ": " << last->error() << "\n";
      rc = 1;
    }

    uint32_t same = 0;
    for (uint32_t i = 0; i < n; ++i) same += SameBlock(**ppool, src[i], **dpool, dst[i]) ? 1 : 0;
    // Blocks that were not part of the request must be untouched (zero).
    bool untouched = true;
    for (uint32_t b = 0; b < pool_blocks - n && untouched; ++b) {
      for (uint32_t l = 0; l < g.layers && untouched; ++l) {
        for (uint32_t pl = 0; pl < g.planes && untouched; ++pl) {
          const uint8_t* s = (*dpool)->segment(l, pl, b);
          untouched = s[0] == 0 && std::memcmp(s, s + 1, g.segment_bytes - 1) == 0;
        }
      }
    }

    std::printf("report:\n");
    std::printf("  bytes       %llu (%.1f MiB)\n", static_cast<unsigned long long>(last->total_bytes()),
                last->total_bytes() / 1048576.0);
    std::printf("  chunks      %u\n", last->chunks_done());
    std::printf("  seconds     %.4f (pull to done, as seen by the decode worker)\n", secs);
    std::printf("  throughput  %.2f GB/s\n", last->total_bytes() / 1e9 / secs);
    std::printf("  verified: %u blocks bit-exact%s\n", same,
                same == n ? "" : absl::StrFormat(" of %u (MISMATCH)", n).c_str());
    if (!untouched) std::printf("  ERROR: blocks outside the request were written\n");
    if (same != n || !untouched) rc = 1;
  }

  int stop_rc = 0;
  for (auto& dm : *daemons) {
    const int code = dm.process.Stop();
    if (code != 0) {
      std::fprintf(stderr, "  %s daemon exited with %d (log: %s)\n", dm.role.c_str(), code, dm.log_path.c_str());
      stop_rc = 1;
    }
  }
  if (stop_rc == 0) std::printf("  daemons stopped cleanly\n");
  if (!absl::GetFlag(FLAGS_keep_workdir) && rc == 0 && stop_rc == 0) {
    std::system(("rm -rf '" + *dir + "'").c_str());
  } else {
    std::printf("  logs in %s\n", dir->c_str());
  }
  return rc != 0 ? rc : stop_rc;
}

}  // namespace kvferry::cli
