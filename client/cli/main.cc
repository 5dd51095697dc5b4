// kvferry: command-line client of kvferryd (status, pools, publish, pull,
// watch, cancel) plus the demo and the benchmark.
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "client/cli/commands.h"
#include "client/client.h"

ABSL_FLAG(std::string, daemon, "127.0.0.1:50051", "Address of the local kvferryd (host:port).");
ABSL_FLAG(std::string, name, "", "pool create/register: pool name.");
ABSL_FLAG(std::string, shm, "", "pool register: POSIX shm name of an existing segment (/name).");
ABSL_FLAG(uint64_t, offset, 0, "pool register: byte offset of the pool in the segment.");
ABSL_FLAG(std::string, layout, "32,2,16,8,128", "Pool layout LAYERS,PLANES,BLOCK_TOKENS,HEADS,HEAD_DIM.");
ABSL_DECLARE_FLAG(std::string, dtype);  // defined with the codec command
ABSL_FLAG(uint32_t, blocks, 0, "pool create/register: number of blocks in the pool.");
ABSL_FLAG(uint64_t, pool, 0, "publish/pull/pool unregister: pool id.");
ABSL_FLAG(std::string, block_ids, "", "publish/pull: block ids, e.g. 0-63 or 3,5,9.");
ABSL_FLAG(uint32_t, ttl_ms, 0, "publish: lease time (0: daemon default).");
ABSL_FLAG(std::string, ticket, "-", "pull: ticket file written by publish ('-': stdin); publish: where to write it.");
ABSL_FLAG(uint32_t, deadline_ms, 0, "pull: transfer deadline (0: daemon default).");
ABSL_FLAG(bool, wait, true, "pull: follow the transfer until it ends.");

namespace {

using kvferry::client::Client;
namespace v1 = kvferry::v1;

constexpr char kUsage[] =
    "kvferry: client for kvferryd, the KV-cache transfer daemon.\n"
    "\n"
    "Usage: kvferry COMMAND [flags]\n"
    "\n"
    "Commands:\n"
    "  status                           daemon status (--daemon)\n"
    "  pool create                      create a shm segment and register it as a host pool\n"
    "                                   (--name --layout --dtype --blocks); the segment outlives the command\n"
    "  pool register                    register an existing segment (--name --shm --offset --layout --dtype "
    "--blocks)\n"
    "  pool unregister                  (--pool)\n"
    "  publish                          publish blocks under a lease, write the ticket as JSON\n"
    "                                   (--pool --block_ids [--ttl_ms] [--ticket=FILE|-])\n"
    "  pull                             pull a ticket into local blocks (--ticket --pool --block_ids\n"
    "                                   [--deadline_ms] [--wait])\n"
    "  watch ID | get ID | cancel ID    follow, show or cancel a transfer (hex id)\n"
    "  demo                             two daemons on loopback: fill, publish, pull, verify, report\n"
    "  bench                            host-to-host throughput vs ucx_perftest (see `kvferry bench --help`)\n"
    "  codec compress|decompress IN OUT lossless KV codec on files (--dtype --kv_layout=T,H,D --device=cpu)\n"
    "  codec stats IN                   ratio, order-0 entropy bound and throughput of IN\n"
    "\n"
    "Exit status: 0 on success, 1 on a failed operation, 2 on bad usage.";

int Fail(const absl::Status& s, const char* what) {
  std::cerr << "kvferry " << what << ": " << s << "\n";
  return 1;
}

std::unique_ptr<Client> ConnectOrDie() {
  auto c = Client::Connect(absl::GetFlag(FLAGS_daemon));
  if (!c.ok()) {
    std::cerr << "kvferry: " << c.status() << "\n";
    std::exit(1);
  }
  return std::move(c).value();
}

void PrintTransfer(const v1::TransferStatus& s) {
  std::printf("transfer %016llx %-9s %llu/%llu bytes %u/%u chunks %.3f s%s%s\n",
              static_cast<unsigned long long>(s.transfer_id()), kvferry::client::StateName(s.state()).c_str(),
              static_cast<unsigned long long>(s.bytes_done()), static_cast<unsigned long long>(s.total_bytes()),
              s.chunks_done(), s.chunks_total(), s.elapsed_us() / 1e6,
              s.error().empty() ? "" : " error: ", s.error().c_str());
}

int ExitFor(const v1::TransferStatus& s) { return s.state() == v1::TRANSFER_STATE_DONE ? 0 : 1; }

bool ParseId(const std::string& s, uint64_t* id) { return absl::SimpleHexAtoi(s, id) && *id != 0; }

int CmdStatus() {
  auto c = ConnectOrDie();
  auto st = c->Status();
  if (!st.ok()) return Fail(st.status(), "status");
  std::printf("kvferryd %s role=%s peer=%s transport=%s\n", st->version().c_str(), st->role().c_str(),
              st->peer_address().c_str(), st->transport().c_str());
  std::printf(
      "leases=%u active_transfers=%u active_sends=%u done=%llu failed=%llu bytes_sent=%llu bytes_received=%llu\n",
      st->active_leases(), st->active_transfers(), st->active_sends(),
      static_cast<unsigned long long>(st->transfers_done()), static_cast<unsigned long long>(st->transfers_failed()),
      static_cast<unsigned long long>(st->bytes_sent()), static_cast<unsigned long long>(st->bytes_received()));
  std::printf("staging=%llu bytes send_slots=%u/%u free recv_slots=%u/%u free gpu_workers=%llu bytes gpu_direct=%s\n",
              static_cast<unsigned long long>(st->staging_bytes()), st->send_slots_free(), st->send_slots(),
              st->recv_slots_free(), st->recv_slots(), static_cast<unsigned long long>(st->gpu_bytes()),
              st->gpu_direct() ? "yes" : "no");
  for (const auto& p : st->pools()) {
    std::printf("pool %llu '%s': %u blocks, %s, %llu bytes\n", static_cast<unsigned long long>(p.pool_id()),
                p.name().c_str(), p.num_blocks(), kvferry::LayoutString(p.layout()).c_str(),
                static_cast<unsigned long long>(p.region_bytes()));
  }
  return 0;
}

absl::StatusOr<v1::KvLayout> LayoutFromFlags() {
  auto dt = kvferry::client::ParseDType(absl::GetFlag(FLAGS_dtype));
  if (!dt.ok()) return dt.status();
  return kvferry::client::ParseLayout(absl::GetFlag(FLAGS_layout), *dt);
}

int CmdPool(const std::vector<std::string>& args) {
  const std::string sub = args.size() > 1 ? args[1] : "";
  if (sub == "unregister") {
    auto c = ConnectOrDie();
    auto st = c->UnregisterPool(absl::GetFlag(FLAGS_pool));
    if (!st.ok()) return Fail(st, "pool unregister");
    std::printf("pool %llu unregistered\n", static_cast<unsigned long long>(absl::GetFlag(FLAGS_pool)));
    return 0;
  }
  if (sub != "create" && sub != "register") {
    std::cerr << "kvferry pool: want create, register or unregister\n";
    return 2;
  }
  auto layout = LayoutFromFlags();
  if (!layout.ok()) return Fail(layout.status(), "pool");
  if (absl::GetFlag(FLAGS_name).empty() || absl::GetFlag(FLAGS_blocks) == 0) {
    std::cerr << "kvferry pool " << sub << ": --name and --blocks are required\n";
    return 2;
  }
  auto c = ConnectOrDie();
  if (sub == "create") {
    auto pool = c->CreateHostPool(absl::GetFlag(FLAGS_name), *layout, absl::GetFlag(FLAGS_blocks));
    if (!pool.ok()) return Fail(pool.status(), "pool create");
    (*pool)->Detach();
    std::printf("pool %llu created: shm %s, %zu bytes\n", static_cast<unsigned long long>((*pool)->id()),
                (*pool)->shm_name().c_str(), (*pool)->bytes());
    return 0;
  }
  v1::RegisterPoolRequest req;
  req.set_name(absl::GetFlag(FLAGS_name));
  req.set_memory_kind(v1::MEMORY_KIND_HOST_SHM);
  req.set_shm_name(absl::GetFlag(FLAGS_shm));
  req.set_offset_bytes(absl::GetFlag(FLAGS_offset));
  req.set_num_blocks(absl::GetFlag(FLAGS_blocks));
  *req.mutable_layout() = *layout;
  auto r = c->RegisterPool(req);
  if (!r.ok()) return Fail(r.status(), "pool register");
  std::printf("pool %llu registered: %llu bytes\n", static_cast<unsigned long long>(r->pool_id()),
              static_cast<unsigned long long>(r->region_bytes()));
  return 0;
}

int CmdPublish() {
  auto blocks = kvferry::client::ParseBlockList(absl::GetFlag(FLAGS_block_ids));
  if (!blocks.ok()) return Fail(blocks.status(), "publish");
  auto c = ConnectOrDie();
  auto t = c->Publish(absl::GetFlag(FLAGS_pool), *blocks, absl::Milliseconds(absl::GetFlag(FLAGS_ttl_ms)));
  if (!t.ok()) return Fail(t.status(), "publish");
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(*t, &json, opts);
  const std::string out = absl::GetFlag(FLAGS_ticket);
  if (out == "-") {
    std::cout << json;
  } else {
    std::ofstream f(out);
    f << json;
    if (!f) return Fail(absl::InternalError("cannot write " + out), "publish");
    std::cerr << "ticket written to " << out << "\n";
  }
  return 0;
}

int Follow(Client* c, uint64_t id) {
  auto last = c->Watch(id, [](const v1::TransferStatus& s) { PrintTransfer(s); });
  if (!last.ok()) return Fail(last.status(), "watch");
  return ExitFor(*last);
}

int CmdPull() {
  const std::string in = absl::GetFlag(FLAGS_ticket);
  std::stringstream buf;
  if (in == "-") {
    buf << std::cin.rdbuf();
  } else {
    std::ifstream f(in);
    if (!f) return Fail(absl::NotFoundError("cannot read " + in), "pull");
    buf << f.rdbuf();
  }
  v1::Ticket ticket;
  auto js = google::protobuf::util::JsonStringToMessage(buf.str(), &ticket);
  if (!js.ok()) return Fail(absl::InvalidArgumentError("ticket is not valid JSON: " + js.ToString()), "pull");
  auto blocks = kvferry::client::ParseBlockList(absl::GetFlag(FLAGS_block_ids));
  if (!blocks.ok()) return Fail(blocks.status(), "pull");
  auto c = ConnectOrDie();
  auto id = c->Pull(ticket, absl::GetFlag(FLAGS_pool), *blocks, absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms)));
  if (!id.ok()) return Fail(id.status(), "pull");
  std::printf("transfer %016llx started\n", static_cast<unsigned long long>(*id));
  return absl::GetFlag(FLAGS_wait) ? Follow(c.get(), *id) : 0;
}

int CmdTransfer(const std::string& cmd, const std::vector<std::string>& args) {
  uint64_t id = 0;
  if (args.size() < 2 || !ParseId(args[1], &id)) {
    std::cerr << "kvferry " << cmd << ": want a transfer id (hex)\n";
    return 2;
  }
  auto c = ConnectOrDie();
  if (cmd == "watch") return Follow(c.get(), id);
  auto s = cmd == "get" ? c->GetTransfer(id) : c->Cancel(id);
  if (!s.ok()) return Fail(s.status(), cmd.c_str());
  PrintTransfer(*s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig cfg;
  cfg.contains_helpshort_flags = [](absl::string_view f) { return f.find("client/cli/") != absl::string_view::npos; };
  cfg.contains_help_flags = cfg.contains_helpshort_flags;
  absl::SetFlagsUsageConfig(cfg);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  if (args.empty()) {
    std::cerr << kUsage << "\n";
    return 2;
  }
  const std::string& cmd = args[0];
  if (cmd == "status") return CmdStatus();
  if (cmd == "pool") return CmdPool(args);
  if (cmd == "publish") return CmdPublish();
  if (cmd == "pull") return CmdPull();
  if (cmd == "watch" || cmd == "get" || cmd == "cancel") return CmdTransfer(cmd, args);
  if (cmd == "demo") return kvferry::cli::RunDemo(args);
  if (cmd == "bench") return kvferry::cli::RunBench(args);
  if (cmd == "codec") return kvferry::cli::RunCodec(args);
  std::cerr << "kvferry: unknown command '" << cmd << "'\n\n" << kUsage << "\n";
  return 2;
}
