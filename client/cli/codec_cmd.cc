// `kvferry codec compress|decompress|stats`: the codec on files.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/cli/codec_gpu.h"
#include "client/cli/commands.h"
#include "kernels/codec.h"

ABSL_FLAG(std::string, dtype, "bf16", "Element type: bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, bytes.");
ABSL_FLAG(std::string, kv_layout, "", "codec: KV layout TOKENS,HEADS,HEAD_DIM of the data (enables KV-aware mode).");
ABSL_FLAG(std::string, device, "cpu", "codec: cpu or cuda.");
ABSL_FLAG(int32_t, codec_threads, 0, "codec: CPU worker threads (0: up to 8).");
ABSL_FLAG(uint64_t, codec_chunk_bytes, 0,
          "codec stats: code the input as independent chunks of this many bytes (0: one chunk), as the "
          "data plane does.");

namespace kvferry::cli {
namespace {

absl::StatusOr<std::vector<uint8_t>> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

absl::Status WriteFile(const std::string& path, const uint8_t* data, size_t n) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
    if (!f) return absl::InternalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError("cannot rename to " + path);
  return absl::OkStatus();
}

absl::StatusOr<codec::EncodeOptions> OptionsFromFlags() {
  codec::EncodeOptions o;
  auto d = codec::ParseDType(absl::GetFlag(FLAGS_dtype).c_str());
  if (!d.ok()) return d.status();
  o.dtype = *d;
  o.threads = absl::GetFlag(FLAGS_codec_threads);
  const std::string l = absl::GetFlag(FLAGS_kv_layout);
  if (!l.empty()) {
    std::vector<std::string> p = absl::StrSplit(l, ',');
    if (p.size() != 3 || !absl::SimpleAtoi(p[0], &o.layout.tokens) || !absl::SimpleAtoi(p[1], &o.layout.heads) ||
        !absl::SimpleAtoi(p[2], &o.layout.head_dim) || o.layout.heads == 0 || o.layout.head_dim == 0) {
      return absl::InvalidArgumentError("--kv_layout must be TOKENS,HEADS,HEAD_DIM with positive HEADS, HEAD_DIM");
    }
  }
  const std::string dev = absl::GetFlag(FLAGS_device);
  if (dev != "cpu" && dev != "cuda") return absl::InvalidArgumentError("--device must be cpu or cuda");
  return o;
}

template <typename Fn>
double MedianSeconds(int reps, Fn fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int Fail(const absl::Status& s) {
  std::cerr << "kvferry codec: " << s << "\n";
  return 1;
}

}  // namespace

int RunCodec(const std::vector<std::string>& args) {
  if (args.size() < 3 || (args[1] != "stats" && args.size() < 4)) {
    std::cerr << "usage: kvferry codec compress|decompress IN OUT | stats IN  [--dtype=bf16] [--kv_layout=T,H,D]"
                 " [--device=cpu|cuda]\n";
    return 2;
  }
  const std::string& verb = args[1];
  const std::string dev = absl::GetFlag(FLAGS_device);
  if (dev != "cpu" && dev != "cuda") return Fail(absl::InvalidArgumentError("--device must be cpu or cuda"));
  const bool cuda = dev == "cuda";
  auto in = ReadFile(args[2]);
  if (!in.ok()) return Fail(in.status());
  if (verb == "decompress") {
    auto info = codec::Inspect(in->data(), in->size());
    if (!info.ok()) return Fail(info.status());
    std::vector<uint8_t> out(info->original_bytes);
    auto n = cuda ? GpuDecode(in->data(), in->size(), out.data(), out.size())
                  : codec::Decode(in->data(), in->size(), out.data(), out.size(), absl::GetFlag(FLAGS_codec_threads));
    if (!n.ok()) return Fail(n.status());
    if (auto st = WriteFile(args[3], out.data(), *n); !st.ok()) return Fail(st);
    std::printf("%zu -> %zu bytes (%s)\n", in->size(), *n, codec::DTypeName(info->dtype));
    return 0;
  }
  auto o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  std::vector<uint8_t> out(codec::MaxEncodedBytes(in->size()));
  if (verb == "compress") {
    auto n = cuda ? GpuEncode(*o, in->data(), in->size(), out.data(), out.size())
                  : codec::Encode(*o, in->data(), in->size(), out.data(), out.size());
    if (!n.ok()) return Fail(n.status());
    if (auto st = WriteFile(args[3], out.data(), *n); !st.ok()) return Fail(st);
    std::printf("%zu -> %zu bytes, ratio %.4f\n", in->size(), *n, static_cast<double>(in->size()) / *n);
    return 0;
  }
  if (verb != "stats") return std::cerr << "kvferry codec: unknown verb '" << verb << "'\n", 2;
  // Stats: code the input as chunks (the data plane's unit), in order-0 and,
  // with a layout, KV-aware mode; report sizes against the order-0 bound.
  const uint64_t es = codec::Info(o->dtype)->bytes;
  uint64_t chunk = absl::GetFlag(FLAGS_codec_chunk_bytes);
  if (chunk == 0 || chunk > in->size()) chunk = in->size();
  chunk = std::max<uint64_t>(es, chunk / es * es);
  std::vector<uint8_t> back(in->size());
  auto run = [&](const codec::EncodeOptions& opts, uint64_t* total, uint32_t* grouped) -> absl::Status {
    *total = 0;
    *grouped = 0;
    for (uint64_t off = 0; off < in->size(); off += chunk) {
      const uint64_t len = std::min<uint64_t>(chunk, in->size() - off);
      auto c = codec::Encode(opts, in->data() + off, len, out.data(), out.size());
      if (!c.ok()) return c.status();
      *total += *c;
      *grouped += codec::Inspect(out.data(), *c)->channel_groups ? 1 : 0;
      auto d = codec::Decode(out.data(), *c, back.data() + off, len, opts.threads);
      if (!d.ok()) return d.status();
    }
    return back == *in ? absl::OkStatus() : absl::DataLossError("round trip mismatch");
  };
  codec::EncodeOptions plain = *o;
  plain.layout = {};
  uint64_t plain_bytes = 0, kv_bytes = 0;
  uint32_t grouped = 0, ignored = 0;
  if (auto st = run(plain, &plain_bytes, &ignored); !st.ok()) return Fail(st);
  const bool kv = o->layout.channels() > 0;
  if (kv) {
    if (auto st = run(*o, &kv_bytes, &grouped); !st.ok()) return Fail(st);
  }
  double bound = 0;
  for (uint64_t off = 0; off < in->size(); off += chunk) {
    auto b = codec::Order0BoundBytes(o->dtype, in->data() + off, std::min<uint64_t>(chunk, in->size() - off));
    if (!b.ok()) return Fail(b.status());
    bound += *b;
  }
  // Throughput on the first chunk (median of 5), single call as the data plane makes it.
  const uint64_t len = std::min<uint64_t>(chunk, in->size());
  auto c = codec::Encode(*o, in->data(), len, out.data(), out.size());
  if (!c.ok()) return Fail(c.status());
  const double enc = MedianSeconds(5, [&] { (void)codec::Encode(*o, in->data(), len, out.data(), out.size()); });
  const double dec = MedianSeconds(5, [&] { (void)codec::Decode(out.data(), *c, back.data(), len, o->threads); });
  const uint64_t chunks = (in->size() + chunk - 1) / chunk;
  std::printf("input           %s, %zu bytes, %llu chunk(s) of %llu bytes\n", codec::DTypeName(o->dtype), in->size(),
              static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(chunk));
  std::printf("order-0 bound   %.0f bytes, ratio %.4f\n", bound, in->size() / bound);
  std::printf("order-0 codec   %llu bytes, ratio %.4f, %+.2f%% vs bound\n",
              static_cast<unsigned long long>(plain_bytes), static_cast<double>(in->size()) / plain_bytes,
              100.0 * (plain_bytes / bound - 1));
  if (kv) {
    std::printf("KV-aware codec  %llu bytes, ratio %.4f, %+.2f%% vs order-0 codec (%u of %llu chunks grouped)\n",
                static_cast<unsigned long long>(kv_bytes), static_cast<double>(in->size()) / kv_bytes,
                100.0 * (static_cast<double>(kv_bytes) / plain_bytes - 1), grouped,
                static_cast<unsigned long long>(chunks));
  }
  std::printf(
      "cpu %s thread(s) encode %.3f GB/s, decode %.3f GB/s (uncompressed bytes, one %llu-byte chunk, median of 5)\n",
      o->threads > 0 ? std::to_string(o->threads).c_str() : "auto", len / enc / 1e9, len / dec / 1e9,
      static_cast<unsigned long long>(len));
  if (cuda) {
    // The same chunk on the GPU: its bytes must equal the CPU's; device-resident timing.
    std::vector<uint8_t> gpu(codec::MaxEncodedBytes(len));
    double genc = 0, gdec = 0;
    auto g = GpuEncode(*o, in->data(), len, gpu.data(), gpu.size(), &genc);
    if (!g.ok()) return Fail(g.status());
    if (*g != *c || !std::equal(gpu.begin(), gpu.begin() + *g, out.begin())) {
      return Fail(absl::InternalError("the CUDA encoder's chunk differs from the CPU encoder's"));
    }
    auto d = GpuDecode(gpu.data(), *g, back.data(), len, &gdec);
    if (!d.ok()) return Fail(d.status());
    std::printf("cuda encode %.1f GB/s, decode %.1f GB/s (device-resident, one %llu-byte chunk, CUDA events, "
                "median of 5; chunk equals the CPU's)\n",
                len / genc / 1e9, len / gdec / 1e9, static_cast<unsigned long long>(len));
  }
  return 0;
}

}  // namespace kvferry::cli
