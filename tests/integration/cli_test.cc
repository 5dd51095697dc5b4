// The `kvferry` CLI as a user runs it: the demo end to end, the pool/publish/
// pull/get flow between two real daemons, and clear failures on bad usage.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/util/daemons.h"

namespace kvferry::testing {
namespace {

struct CliRun {
  int code;
  std::string output;
};

CliRun Cli(const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(60)) {
  static int n = 0;
  const std::string log = absl::StrCat(TmpDir(), "/cli-", n++, ".log");
  std::vector<std::string> argv = {"client/kvferry"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = ChildProcess::Spawn(argv, {}, log);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {-1, ""};
  const int code = child->Wait(timeout);
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  return {code, ss.str()};
}

TEST(Cli, DemoRunsEndToEndAndVerifies) {
  CliRun r = Cli({"demo", "--demo_blocks=4", "--kvferryd=server/kvferryd"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("verified: 4 blocks bit-exact"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("daemons stopped cleanly"), std::string::npos) << r.output;
}

TEST(Cli, PoolPublishPullGetBetweenTwoDaemons) {
  auto p = Daemon::Start("prefill");
  auto d = Daemon::Start("decode");
  ASSERT_TRUE(p && d);
  const std::vector<std::string> pool = {"--layout=2,2,16,2,64", "--dtype=bf16", "--blocks=8"};
  auto create = [&](const Daemon& dm, const std::string& name) {
    std::vector<std::string> a = {"pool", "create", "--daemon=" + dm.address, "--name=" + name};
    a.insert(a.end(), pool.begin(), pool.end());
    return Cli(a);
  };
  CliRun c1 = create(*p, "src");
  ASSERT_EQ(c1.code, 0) << c1.output;
  CliRun c2 = create(*d, "dst");
  ASSERT_EQ(c2.code, 0) << c2.output;
  EXPECT_NE(c1.output.find("pool 1 created"), std::string::npos) << c1.output;

  const std::string ticket = TmpDir() + "/ticket.json";
  CliRun pub = Cli({"publish", "--daemon=" + p->address, "--pool=1", "--block_ids=0-3", "--ticket=" + ticket});
  ASSERT_EQ(pub.code, 0) << pub.output;
  CliRun pull = Cli({"pull", "--daemon=" + d->address, "--pool=1", "--block_ids=4-7", "--ticket=" + ticket});
  ASSERT_EQ(pull.code, 0) << pull.output;
  EXPECT_NE(pull.output.find("DONE"), std::string::npos) << pull.output;
  // "transfer <id> started" -> get <id>
  const size_t at = pull.output.find("transfer ");
  ASSERT_NE(at, std::string::npos);
  const std::string id = pull.output.substr(at + 9, 16);
  CliRun get = Cli({"get", id, "--daemon=" + d->address});
  EXPECT_EQ(get.code, 0) << get.output;
  EXPECT_NE(get.output.find("DONE"), std::string::npos) << get.output;
  CliRun st = Cli({"status", "--daemon=" + d->address});
  EXPECT_EQ(st.code, 0) << st.output;
  EXPECT_NE(st.output.find("role=decode"), std::string::npos) << st.output;
  // Debian's UCX carries no GPU memory: GPU chunks would be staged.
  EXPECT_NE(st.output.find("gpu_direct=no"), std::string::npos) << st.output;
  // The same ticket again: it was delivered, so the daemon refuses it.
  CliRun again = Cli({"pull", "--daemon=" + d->address, "--pool=1", "--block_ids=4-7", "--ticket=" + ticket});
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_NE(again.output.find("NOT_FOUND"), std::string::npos) << again.output;
  // Segments made by `pool create` outlive the command: clean them up.
  for (const std::string& o : {c1.output, c2.output}) {
    const size_t s = o.find("shm /");
    if (s != std::string::npos) shm_unlink(o.substr(s + 4, o.find(',', s) - s - 4).c_str());
  }
}

// `kvferry bench --link`: the decode daemon in its own network namespace
// behind a tc-shaped veth pair; every mode delivers bit-exact, and the bench
// removes what it created. Needs root and network namespaces.
TEST(Cli, BenchComparesModesOverAShapedLinkAndCleansUp) {
  auto ns_list = [] {
    const std::string log = absl::StrCat(TmpDir(), "/netns.log");
    auto c = ChildProcess::Spawn({"/usr/sbin/ip", "netns", "list"}, {}, log);
    if (!c.ok()) return std::string("?");
    c->Wait(absl::Seconds(10));
    std::ifstream f(log);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  if (geteuid() != 0 || access("/usr/sbin/ip", X_OK) != 0 || access("/usr/sbin/tc", X_OK) != 0) {
    GTEST_SKIP() << "needs root and iproute2";
  }
  {
    const std::string probe = absl::StrCat("kvferry-probe-", getpid());
    auto add = ChildProcess::Spawn({"/usr/sbin/ip", "netns", "add", probe}, {}, "/dev/null");
    if (!add.ok() || add->Wait(absl::Seconds(10)) != 0) GTEST_SKIP() << "network namespaces not available here";
    auto del = ChildProcess::Spawn({"/usr/sbin/ip", "netns", "del", probe}, {}, "/dev/null");
    ASSERT_TRUE(del.ok());
    del->Wait(absl::Seconds(10));
  }
  const std::string png = absl::StrCat(TmpDir(), "/bench.png");
  CliRun r = Cli({"bench", "--kvferryd=server/kvferryd", "--link=1gbit", "--sizes=1M", "--iters=1", "--rounds=1",
                  "--perftest=", "--plot=" + png},
                 absl::Seconds(120));
  EXPECT_EQ(r.code, 0) << r.output;
  {
    std::ifstream f(png, std::ios::binary);
    std::string head(8, '\0');
    f.read(head.data(), 8);
    EXPECT_EQ(head, std::string("\x89PNG\r\n\x1a\n", 8)) << "--plot wrote no PNG";
  }
  EXPECT_NE(r.output.find("veth shaped to 1gbit"), std::string::npos) << r.output;
  // The namespace this bench made (other runs on the host may have their own).
  const size_t at = r.output.find("(decode in ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string ns = r.output.substr(at + 11, r.output.find(')', at) - at - 11);
  EXPECT_EQ(ns.rfind("kvferry-", 0), 0u) << ns;
  for (const char* mode : {" raw ", " compressed ", " adaptive "}) {
    EXPECT_NE(r.output.find(mode), std::string::npos) << mode << "\n" << r.output;
  }
  size_t exact = 0;
  for (size_t at = r.output.find("bit-exact"); at != std::string::npos; at = r.output.find("bit-exact", at + 1)) {
    ++exact;
  }
  EXPECT_EQ(exact, 3u) << r.output;
  EXPECT_EQ(r.output.find("MISMATCH"), std::string::npos) << r.output;
  EXPECT_EQ(ns_list().find(ns), std::string::npos) << "namespace " << ns << " left behind";
}

TEST(Cli, BadUsageFailsClearly) {
  CliRun unknown = Cli({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.output.find("unknown command"), std::string::npos) << unknown.output;
  CliRun none = Cli({});
  EXPECT_EQ(none.code, 2);
  CliRun no_daemon = Cli({"status", "--daemon=127.0.0.1:1"}, absl::Seconds(30));
  EXPECT_EQ(no_daemon.code, 1);
  EXPECT_NE(no_daemon.output.find("no kvferryd answering"), std::string::npos) << no_daemon.output;
  CliRun bad_ticket = Cli({"pull", "--ticket=/nonexistent/ticket.json", "--pool=1", "--block_ids=0"});
  EXPECT_EQ(bad_ticket.code, 1);
  EXPECT_NE(bad_ticket.output.find("cannot read"), std::string::npos) << bad_ticket.output;
  CliRun bad_blocks = Cli({"publish", "--pool=1", "--block_ids=3-1"});
  EXPECT_EQ(bad_blocks.code, 1);
  EXPECT_NE(bad_blocks.output.find("bad block list"), std::string::npos) << bad_blocks.output;
  CliRun bad_layout = Cli({"pool", "create", "--name=x", "--blocks=4", "--layout=1,2,3"});
  EXPECT_EQ(bad_layout.code, 1);
  EXPECT_NE(bad_layout.output.find("LAYERS,PLANES"), std::string::npos) << bad_layout.output;
  CliRun help = Cli({"--help"});
  EXPECT_NE(help.output.find("Commands:"), std::string::npos) << help.output;
}

}  // namespace
}  // namespace kvferry::testing

namespace kvferry::testing {
namespace {

TEST(Cli, CodecRoundTripsFilesAndRejectsBadInput) {
  const std::string dir = TmpDir();
  // KV-like bf16 data, 64K elements.
  std::vector<uint8_t> data(1 << 17);
  std::mt19937 rng(1);
  for (size_t i = 0; i < data.size(); i += 2) {
    data[i] = static_cast<uint8_t>(rng());
    data[i + 1] = static_cast<uint8_t>(0x3c + rng() % 5);  // narrow exponent range
  }
  const std::string in = dir + "/kv.bf16", z = dir + "/kv.kvz", back = dir + "/kv.out";
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  CliRun c = Cli({"codec", "compress", in, z, "--dtype=bf16", "--kv_layout=64,8,128"});
  ASSERT_EQ(c.code, 0) << c.output;
  CliRun d = Cli({"codec", "decompress", z, back});
  ASSERT_EQ(d.code, 0) << d.output;
  std::ifstream f(back, std::ios::binary);
  std::vector<uint8_t> got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, data);
  CliRun s = Cli({"codec", "stats", in, "--dtype=bf16"});
  EXPECT_EQ(s.code, 0) << s.output;
  EXPECT_NE(s.output.find("order-0 bound"), std::string::npos) << s.output;

  // Bad input: clear errors, non-zero exits, no output file left behind.
  EXPECT_EQ(Cli({"codec", "compress", in, z, "--dtype=bf17"}).code, 1);
  EXPECT_EQ(Cli({"codec", "compress", in, z, "--dtype=fp32", "--kv_layout=1,2"}).code, 1);
  CliRun tpu = Cli({"codec", "compress", in, z, "--device=tpu"});
  EXPECT_EQ(tpu.code, 1);
  EXPECT_NE(tpu.output.find("cpu or cuda"), std::string::npos) << tpu.output;
  // --device=cuda: on a GPU host the chunk equals the CPU's; elsewhere a clear error.
  const std::string zg = dir + "/gpu.kvz";
  CliRun cuda = Cli({"codec", "compress", in, zg, "--device=cuda"});
  if (cuda.code == 0) {
    std::ifstream a(z, std::ios::binary), b(zg, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}), std::string(std::istreambuf_iterator<char>(b), {}));
  } else {
    EXPECT_EQ(cuda.code, 1);
    EXPECT_TRUE(cuda.output.find("no CUDA device") != std::string::npos ||
                cuda.output.find("without CUDA") != std::string::npos)
        << cuda.output;
    EXPECT_FALSE(std::ifstream(zg).good());
  }
  // Truncated and corrupted chunks.
  std::ifstream zf(z, std::ios::binary);
  std::string chunk((std::istreambuf_iterator<char>(zf)), std::istreambuf_iterator<char>());
  const std::string trunc = dir + "/trunc.kvz", bad = dir + "/bad.kvz", never = dir + "/never.out";
  std::ofstream(trunc, std::ios::binary) << chunk.substr(0, chunk.size() / 2);
  std::string flipped = chunk;
  flipped[chunk.size() - 100] ^= 0x55;
  std::ofstream(bad, std::ios::binary) << flipped;
  for (const std::string& broken : {trunc, bad}) {
    CliRun r = Cli({"codec", "decompress", broken, never});
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("DATA_LOSS"), std::string::npos) << r.output;
    EXPECT_FALSE(std::ifstream(never).good()) << "no output for a corrupt chunk";
  }
  CliRun odd = Cli({"codec", "compress", trunc, z, "--dtype=fp32"});  // not a whole number of fp32
  if (chunk.size() / 2 % 4 != 0) {
    EXPECT_EQ(odd.code, 1) << odd.output;
  }
  EXPECT_EQ(Cli({"codec", "decompress", dir + "/missing.kvz", never}).code, 1);
  EXPECT_EQ(Cli({"codec", "compress", in}).code, 2);
}

}  // namespace
}  // namespace kvferry::testing
