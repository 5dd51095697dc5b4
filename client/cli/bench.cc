// `kvferry bench`: host-to-host throughput through two daemons on loopback,
// beside ucx_perftest (tag_bw) on the same loopback in the same run.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cli/cluster.h"
#include "client/cli/codec_gpu.h"
#include "client/cli/commands.h"
#include "client/cli/kv_data.h"
#include "client/cli/plot.h"
#include "client/client.h"

ABSL_DECLARE_FLAG(std::string, kvferryd);
ABSL_DECLARE_FLAG(bool, keep_workdir);
ABSL_FLAG(std::string, sizes, "1M,4M,16M,64M,256M,1G", "bench: transfer sizes (K, M, G suffixes; multiples of 1M).");
ABSL_FLAG(uint32_t, iters, 0, "bench: iterations per size (0: auto, about 2 GiB per size, 3..50).");
ABSL_FLAG(std::string, perftest, "ucx_perftest", "bench: ucx_perftest binary ('' to skip the baseline).");
ABSL_FLAG(std::string, json, "", "bench: also write the results as JSON to this file.");
ABSL_FLAG(std::string, plot, "", "bench: also draw the end-to-end GB/s per size and mode as a PNG bar chart here.");
ABSL_FLAG(std::string, daemon_flags, "", "bench: extra kvferryd flags, space separated.");
ABSL_FLAG(std::string, link, "",
          "bench: shape the link to this rate (tc tbf syntax: 1gbit, 2500mbit, 10gbit). The decode daemon then runs "
          "in its own network namespace, joined to the prefill daemon's by a veth pair shaped on both ends; "
          "needs root and iproute2. Created and removed by the bench.");
ABSL_FLAG(std::string, modes, "raw,compressed,adaptive",
          "bench: compression modes to compare (raw, compressed, adaptive).");
ABSL_FLAG(std::string, kv_dir, "", "bench: real bf16 KV captures (tools/kv_capture.py; default ~/.cache/kvferry/kv).");
ABSL_FLAG(std::string, memory, "host",
          "bench: pool memory to compare: host (shared memory) and/or gpu (CUDA IPC pools on --gpu_device; "
          "needs CUDA), e.g. host,gpu.");
ABSL_FLAG(int32_t, gpu_device, 0, "bench: CUDA device of the GPU pools (both daemons).");
ABSL_FLAG(uint32_t, rounds, 3, "bench: rounds per size, alternating kvferry and ucx_perftest (medians reported).");

namespace kvferry::cli {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

absl::StatusOr<uint64_t> ParseSize(absl::string_view s) {
  uint64_t mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        mult = 1ull << 10;
        s.remove_suffix(1);
        break;
      case 'M':
      case 'm':
        mult = 1ull << 20;
        s.remove_suffix(1);
        break;
      case 'G':
      case 'g':
        mult = 1ull << 30;
        s.remove_suffix(1);
        break;
    }
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v == 0 || v > (64ull << 30) / mult) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", s, "'"));
  }
  return v * mult;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string Which(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return access(prog.c_str(), X_OK) == 0 ? prog : "";
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string p = absl::StrCat(dir, "/", prog);
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Runs ucx_perftest tag_bw between two processes on loopback; returns GB/s
// (10^9 bytes/s) from its "Final:" line (average bandwidth, MB/s = 2^20 B/s).
absl::StatusOr<double> PerftestGBps(const std::string& bin, uint64_t size, uint32_t iters, const std::string& dir) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = FreePort();
    const std::string log = absl::StrCat(dir, "/perftest-", size, ".log");
    auto server =
        ChildProcess::Spawn({bin, "-p", std::to_string(port)}, UcxLoopbackEnv(), dir + "/perftest-server.log");
    if (!server.ok()) return server.status();
    absl::SleepFor(absl::Milliseconds(300));
    auto client = ChildProcess::Spawn({bin, "127.0.0.1", "-p", std::to_string(port), "-t", "tag_bw", "-s",
                                       std::to_string(size), "-n", std::to_string(iters), "-w", "2"},
                                      UcxLoopbackEnv(), log);
    if (!client.ok()) return client.status();
    client->Wait(absl::Seconds(600));
    server->Stop(absl::Seconds(2));
    std::ifstream f(log);
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("Final:", 0) != 0) continue;
      std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      double mbps = 0;
      if (cols.size() >= 7 && absl::SimpleAtod(cols[5], &mbps)) return mbps * kMiB / 1e9;
    }
  }
  return absl::UnavailableError("ucx_perftest produced no result");
}

// A veth pair between this namespace (10.231.0.1) and a new one (10.231.0.2),
// both ends shaped with tbf to `rate`. Removed on destruction.
class ShapedLink {
 public:
  ~ShapedLink() {
    if (!ns_.empty()) Run({ip_, "netns", "del", ns_}, true);
    if (!dev_.empty()) Run({ip_, "link", "del", dev_}, true);  // gone with the namespace normally
  }
  absl::Status Create(const std::string& rate) {
    if (geteuid() != 0) return absl::PermissionDeniedError("--link needs root (network namespaces, tc)");
    ip_ = Which("ip");
    tc_ = Which("tc");
    if (ip_.empty() || tc_.empty()) {
      return absl::NotFoundError("--link needs iproute2's ip and tc (Debian: apt-get install iproute2)");
    }
    const std::string tag = std::to_string(getpid() % 100000);
    const std::string ns = "kvferry-" + tag, a = "kvf" + tag + "a", b = "kvf" + tag + "b";
    std::vector<std::vector<std::string>> steps = {
        {ip_, "netns", "add", ns},
        {ip_, "link", "add", a, "type", "veth", "peer", "name", b},
        {ip_, "link", "set", b, "netns", ns},
        {ip_, "addr", "add", "10.231.0.1/24", "dev", a},
        {ip_, "link", "set", a, "up"},
        {ip_, "netns", "exec", ns, ip_, "addr", "add", "10.231.0.2/24", "dev", b},
        {ip_, "netns", "exec", ns, ip_, "link", "set", b, "up"},
        {ip_, "netns", "exec", ns, ip_, "link", "set", "lo", "up"},
        {tc_, "qdisc", "add", "dev", a, "root", "tbf", "rate", rate, "burst", "1mbit", "latency", "50ms"},
        {ip_, "netns", "exec", ns, tc_, "qdisc", "add", "dev", b, "root", "tbf", "rate", rate, "burst", "1mbit",
         "latency", "50ms"},
    };
    for (size_t i = 0; i < steps.size(); ++i) {
      if (i == 1) ns_ = ns;
      if (i == 2) dev_ = a;
      auto st = Run(steps[i], false);
      if (!st.ok()) return st;
    }
    here_dev_ = a;
    there_dev_ = b;
    return absl::OkStatus();
  }
  const std::string& ns() const { return ns_; }
  const std::string& ip() const { return ip_; }
  const std::string& here_dev() const { return here_dev_; }
  const std::string& there_dev() const { return there_dev_; }

 private:
  static absl::Status Run(const std::vector<std::string>& argv, bool quiet) {
    auto child = ChildProcess::Spawn(argv, {}, quiet ? "/dev/null" : "");
    if (!child.ok()) return child.status();
    if (child->Wait(absl::Seconds(20)) != 0) {
      return absl::InternalError(absl::StrCat("'", absl::StrJoin(argv, " "), "' failed"));
    }
    return absl::OkStatus();
  }
  std::string ip_, tc_, ns_, dev_, here_dev_, there_dev_;
};

}  // namespace

int RunBench(const std::vector<std::string>&) {
  std::vector<uint64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    auto v = ParseSize(s);
    if (!v.ok() || *v % kMiB != 0) {
      std::cerr << "kvferry bench: --sizes: '" << s << "' is not a positive multiple of 1M\n";
      return 2;
    }
    sizes.push_back(*v);
  }
  if (sizes.empty()) return std::cerr << "kvferry bench: no sizes\n", 2;
  std::vector<std::pair<std::string, v1::Compression>> modes;
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    if (m == "raw") {
      modes.push_back({"raw", v1::COMPRESSION_RAW});
    } else if (m == "compressed") {
      modes.push_back({"compressed", v1::COMPRESSION_COMPRESSED});
    } else if (m == "adaptive") {
      modes.push_back({"adaptive", v1::COMPRESSION_ADAPTIVE});
    } else {
      std::cerr << "kvferry bench: --modes: '" << m << "' is not raw, compressed or adaptive\n";
      return 2;
    }
  }
  if (modes.empty()) return std::cerr << "kvferry bench: no modes\n", 2;
  std::vector<std::string> memory_kinds = absl::StrSplit(absl::GetFlag(FLAGS_memory), ',', absl::SkipEmpty());
  for (const auto& m : memory_kinds) {
    if (m != "host" && m != "gpu") return std::cerr << "kvferry bench: --memory: '" << m << "' is not host or gpu\n", 2;
  }
  if (memory_kinds.empty()) return std::cerr << "kvferry bench: no memory kinds\n", 2;
  const uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  auto bin = FindKvferryd(absl::GetFlag(FLAGS_kvferryd));
  if (!bin.ok()) return std::cerr << "kvferry bench: " << bin.status() << "\n", 1;
  auto dir = MakeWorkDir("kvferry-bench");
  if (!dir.ok()) return std::cerr << "kvferry bench: " << dir.status() << "\n", 1;
  std::string perftest = absl::GetFlag(FLAGS_perftest).empty() ? "" : Which(absl::GetFlag(FLAGS_perftest));
  if (!absl::GetFlag(FLAGS_perftest).empty() && perftest.empty()) {
    std::cerr << "kvferry bench: " << absl::GetFlag(FLAGS_perftest)
              << " not found (Debian: apt-get install ucx-utils); pass --perftest= to skip the baseline\n";
    return 1;
  }

  std::vector<std::string> extra = absl::StrSplit(absl::GetFlag(FLAGS_daemon_flags), ' ', absl::SkipEmpty());
  ShapedLink link;
  absl::StatusOr<std::vector<LocalDaemon>> daemons;
  const std::string link_rate = absl::GetFlag(FLAGS_link);
  if (!link_rate.empty()) {
    if (auto st = link.Create(link_rate); !st.ok()) return std::cerr << "kvferry bench: --link: " << st << "\n", 1;
    auto env = [](const std::string& dev) {
      return std::vector<std::string>{"UCX_TLS=tcp", "UCX_NET_DEVICES=" + dev, "UCX_WARN_UNUSED_ENV_VARS=n"};
    };
    daemons = StartDaemons(*bin,
                           {{"prefill", "10.231.0.1", {}, env(link.here_dev())},
                            {"decode", "10.231.0.2", {link.ip(), "netns", "exec", link.ns()}, env(link.there_dev())}},
                           *dir, extra);
  } else {
    daemons = StartLocalDaemons(*bin, {"prefill", "decode"}, *dir, extra);
  }
  if (!daemons.ok()) return std::cerr << "kvferry bench: " << daemons.status() << "\n", 1;
  auto pc = client::Client::Connect((*daemons)[0].address);
  auto dc = client::Client::Connect((*daemons)[1].address);
  if (!pc.ok() || !dc.ok()) return std::cerr << "kvferry bench: cannot reach the daemons\n", 1;

  // 1 MiB blocks: 1 layer x 1 plane x 512 tokens x 8 heads x 128 dims, bf16.
  v1::KvLayout layout = client::ParseLayout("1,1,512,8,128", v1::DTYPE_BF16).value();
  const uint32_t blocks = static_cast<uint32_t>(max_size / kMiB);
  auto ppool = (*pc)->CreateHostPool("bench-src", layout, blocks);
  auto dpool = (*dc)->CreateHostPool("bench-dst", layout, blocks);
  if (!ppool.ok() || !dpool.ok()) {
    std::cerr << "kvferry bench: pool: " << (ppool.ok() ? dpool.status() : ppool.status()) << "\n";
    return 1;
  }
  std::string kv_dir = absl::GetFlag(FLAGS_kv_dir);
  if (kv_dir.empty()) kv_dir = std::string(getenv("HOME") ? getenv("HOME") : ".") + "/.cache/kvferry/kv";
  std::string data_name = "real bf16 KV from " + kv_dir;
  if (const int files = FillRealKv(**ppool, kv_dir); files == 0) {
    std::fprintf(stderr,
                 "kvferry bench: WARNING: no real KV captures (*.bf16) in %s; using synthetic KV-like data "
                 "(python3 tools/kv_capture.py writes real ones)\n",
                 kv_dir.c_str());
    FillKvLike(**ppool, 7);
    data_name = "synthetic KV-like bf16";
  }

  // The pools each memory kind pulls between. GPU pools: this process plays
  // the GPU worker, owning two device buffers shared by CUDA IPC; the host
  // pools serve as the source data and as the scratch space for checking.
  struct Memory {
    std::string name;
    uint64_t src = 0, dst = 0;
    std::unique_ptr<GpuBuffer> gsrc, gdst;
  };
  std::vector<Memory> memories;
  for (const auto& kind : memory_kinds) {
    Memory m;
    m.name = kind;
    if (kind == "host") {
      m.src = (*ppool)->id();
      m.dst = (*dpool)->id();
    } else {
      const int dev = absl::GetFlag(FLAGS_gpu_device);
      auto s = GpuBuffer::Create(dev, (*ppool)->bytes());
      auto d = GpuBuffer::Create(dev, (*dpool)->bytes());
      if (!s.ok() || !d.ok()) {
        return std::cerr << "kvferry bench: GPU pools: " << (s.ok() ? d.status() : s.status()) << "\n", 1;
      }
      m.gsrc = std::move(s).value();
      m.gdst = std::move(d).value();
      if (auto st = m.gsrc->CopyIn((*ppool)->base(), (*ppool)->bytes()); !st.ok()) {
        return std::cerr << "kvferry bench: " << st << "\n", 1;
      }
      auto rs = (*pc)->RegisterGpuPool("bench-gpu-src", layout, blocks, m.gsrc->ipc_handle(), m.gsrc->pci_bus_id());
      auto rd = (*dc)->RegisterGpuPool("bench-gpu-dst", layout, blocks, m.gdst->ipc_handle(), m.gdst->pci_bus_id());
      if (!rs.ok() || !rd.ok()) {
        return std::cerr << "kvferry bench: GPU pool: " << (rs.ok() ? rd.status() : rs.status()) << "\n", 1;
      }
      m.src = rs->pool_id();
      m.dst = rd->pool_id();
    }
    memories.push_back(std::move(m));
  }

  auto env = UcxLoopbackEnv();
  const std::string kinds = absl::StrJoin(memory_kinds, " and ");
  if (link_rate.empty()) {
    std::printf("kvferry bench: two daemons on loopback, %s pools, UCX %s, data: %s\n", kinds.c_str(),
                getenv("UCX_TLS") ? getenv("UCX_TLS") : "UCX_TLS=tcp (default here)", data_name.c_str());
  } else {
    std::printf(
        "kvferry bench: two daemons in two network namespaces (decode in %s), veth shaped to %s (tc tbf), %s "
        "pools, UCX tcp, data: %s\n",
        link.ns().c_str(), link_rate.c_str(), kinds.c_str(), data_name.c_str());
  }
  std::printf("%-5s %10s %-10s %6s %10s %10s %8s %8s %10s %16s %8s %s\n", "mem", "size", "mode", "iters/rd", "e2e GB/s",
              "xfer GB/s", "wire x", "encoded", "1st ms", "ucx_perftest GB/s", "ratio", "verified");
  const bool tty = isatty(2);
  std::string json = absl::StrFormat("{\n  \"data\": \"%s\",\n  \"results\": [\n", data_name);
  int rc = 0;
  bool first_row = true;
  std::map<uint64_t, double> base_gbps;  // per size
  BarChart chart;
  chart.title = data_name.find("real") == 0 ? "kvferry bench: real bf16 kv" : "kvferry bench: synthetic bf16";
  if (!link_rate.empty()) chart.title += ", link " + link_rate;
  chart.y_label = "gb/s";
  for (const auto& m : modes) chart.series.push_back(m.first);
  for (size_t ki = 0; ki < memories.size(); ++ki)
    for (size_t si = 0; si < sizes.size(); ++si) {
      for (size_t mi = 0; mi < modes.size(); ++mi) {
        Memory& mem = memories[ki];
        const uint64_t size = sizes[si];
        const auto& [mode_name, mode] = modes[mi];
        uint32_t iters = absl::GetFlag(FLAGS_iters);
        if (iters == 0) iters = static_cast<uint32_t>(std::clamp<uint64_t>((2048 * kMiB) / size, 3, 50));
        const uint32_t n = static_cast<uint32_t>(size / kMiB);
        std::vector<uint32_t> ids(n);
        for (uint32_t i = 0; i < n; ++i) ids[i] = i;
        std::vector<double> e2e, xfer, base_runs, wire_x, encoded, first_ms;
        bool verified = true;
        if (mem.gdst) {
          if (auto st = mem.gdst->Zero(); !st.ok()) return std::cerr << "kvferry bench: " << st << "\n", 1;
        } else {
          std::memset((*dpool)->base(), 0, (*dpool)->bytes());
        }
        const uint32_t rounds = std::max(1u, absl::GetFlag(FLAGS_rounds));
        // Rounds alternate kvferry and ucx_perftest so that both see the same
        // machine conditions; each reports the median of its samples.
        for (uint32_t round = 0; round < rounds; ++round) {
          for (uint32_t it = 0; it <= iters; ++it) {  // iteration 0 warms up (and verifies in round 0)
            const absl::Time t0 = absl::Now();
            auto ticket = (*pc)->Publish(mem.src, ids);
            if (!ticket.ok()) return std::cerr << "kvferry bench: publish: " << ticket.status() << "\n", 1;
            auto id = (*dc)->Pull(*ticket, mem.dst, ids, absl::ZeroDuration(), mode);
            if (!id.ok()) return std::cerr << "kvferry bench: pull: " << id.status() << "\n", 1;
            auto last = (*dc)->Watch(*id);
            const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
            if (!last.ok() || last->state() != v1::TRANSFER_STATE_DONE) {
              std::cerr << "kvferry bench: transfer failed: " << (last.ok() ? last->error() : last.status().ToString())
                        << "\n";
              return 1;
            }
            if (it == 0) {
              if (round == 0) {
                if (mem.gdst && !mem.gdst->CopyOut((*dpool)->base(), (*dpool)->bytes()).ok()) verified = false;
                for (uint32_t b = 0; b < n; ++b) verified &= SameBlock(**ppool, b, **dpool, b);
              }
              continue;
            }
            e2e.push_back(size / 1e9 / secs);
            xfer.push_back(size / 1e9 / (last->elapsed_us() / 1e6));
            wire_x.push_back(last->wire_bytes() ? static_cast<double>(last->bytes_done()) / last->wire_bytes() : 0);
            encoded.push_back(last->chunks_total() ? 100.0 * last->chunks_encoded() / last->chunks_total() : 0);
            first_ms.push_back(last->first_payload_us() / 1e3);
            if (tty) {
              std::fprintf(stderr, "\r  %llu MiB %s: round %u/%u, %u/%u", static_cast<unsigned long long>(size / kMiB),
                           mode_name.c_str(), round + 1, rounds, it, iters);
            }
          }
          if (!perftest.empty() && mi == 0 && ki == 0) {  // one baseline per size
            auto b = PerftestGBps(perftest, size, iters, *dir);
            if (b.ok()) {
              base_runs.push_back(*b);
            } else {
              std::cerr << "kvferry bench: ucx_perftest: " << b.status() << "\n";
            }
          }
        }
        if (tty) std::fprintf(stderr, "\r%50s\r", "");
        auto median = [](std::vector<double>& v) {
          std::sort(v.begin(), v.end());
          return v.empty() ? 0.0 : v[v.size() / 2];
        };
        if (mi == 0 && ki == 0) base_gbps[size] = median(base_runs);
        const double med = median(e2e), med_x = median(xfer), base = base_gbps[size];
        const double wx = median(wire_x), enc = median(encoded), fms = median(first_ms);
        const std::string size_s =
            size >= (1ull << 30) ? absl::StrCat(size >> 30, " GiB") : absl::StrCat(size >> 20, " MiB");
        std::printf("%-5s %10s %-10s %6u %10.2f %10.2f %8.3f %7.0f%% %10.2f %16s %8s %s\n", mem.name.c_str(),
                    size_s.c_str(), mode_name.c_str(), iters, med, med_x, wx, enc, fms,
                    base > 0 ? absl::StrFormat("%.2f", base).c_str() : "-",
                    base > 0 ? absl::StrFormat("%.2f", med / base).c_str() : "-", verified ? "bit-exact" : "MISMATCH");
        std::fflush(stdout);
        if (!verified) rc = 1;
        if (mi == 0) {
          chart.groups.push_back(absl::StrCat(mem.name, " ", size_s));
          chart.values.emplace_back(modes.size(), 0.0);
        }
        chart.values.back()[mi] = med;
        json += absl::StrFormat(
            "%s    {\"memory\": \"%s\", \"bytes\": %d, \"mode\": \"%s\", \"iters\": %d, \"e2e_gbps_median\": %.4f, "
            "\"transfer_gbps_median\": %.4f, \"wire_ratio\": %.4f, \"encoded_chunks_pct\": %.1f, "
            "\"first_payload_ms\": %.3f, \"ucx_perftest_gbps\": %.4f, \"ratio\": %.4f, \"verified\": %s}",
            first_row ? "" : ",\n", mem.name, size, mode_name, iters, med, med_x, wx, enc, fms, base,
            base > 0 ? med / base : 0.0, verified ? "true" : "false");
        first_row = false;
      }
    }
  json += "\n";
  json += "  ]\n}\n";
  std::printf(
      "e2e: Publish -> Pull -> done as seen by the decode worker (median); xfer: the daemon's transfer time;\n"
      "wire x: raw bytes / bytes on the wire; encoded: chunks sent as codec chunks; 1st ms: transfer start to the\n"
      "first verified payload at the receiver; ratio: e2e / ucx_perftest tag_bw average bandwidth, medians over\n"
      "rounds (1 GB = 10^9 bytes).\n");
  if (!absl::GetFlag(FLAGS_plot).empty()) {
    if (auto st = WriteBarChartPng(absl::GetFlag(FLAGS_plot), chart); !st.ok()) {
      std::cerr << "kvferry bench: --plot: " << st << "\n";
      rc = 1;
    }
  }
  if (!absl::GetFlag(FLAGS_json).empty()) {
    std::ofstream f(absl::GetFlag(FLAGS_json));
    f << json;
  }
  ppool->reset();
  dpool->reset();
  for (auto& dm : *daemons) {
    if (dm.process.Stop() != 0) {
      std::fprintf(stderr, "%s daemon did not stop cleanly (log %s)\n", dm.role.c_str(), dm.log_path.c_str());
      rc = 1;
    }
  }
  if (!absl::GetFlag(FLAGS_keep_workdir) && rc == 0) std::system(("rm -rf '" + *dir + "'").c_str());
  return rc;
}

}  // namespace kvferry::cli
