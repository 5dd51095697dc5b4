// The `kvferry` CLI as a user runs it: the demo end to end, the pool/publish/
// pull/get flow between two real daemons, and clear failures on bad usage.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <fstream>
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
