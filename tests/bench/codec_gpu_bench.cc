// GPU codec benchmark: encodes and decodes real KV data on the GPU, checks every
// GPU chunk against the CPU encoder byte for byte (the first set's again after
// the timed calls) and every decode against the input, and prints a table:
// ratio, distance to the order-0 bound, encode and decode throughput (CUDA
// events after warm-up, median of --reps calls, inputs
// rotated over >= 256 MiB so L2 does not flatter small sizes) next to a
// device-to-device copy of the same bytes measured the same way.
//
//   codec_gpu_bench [--kv_dir=DIR] [--reps=21] [--quick] [--dtype=D] [--call=C] [--mode=M] [--queued]
//                   [--no_promise] [--hold_mib=N]
//
// Calls say what a caller that knows its chunks would: their dtype
// (EncodeAsync's dtype), and, order-0 calls whose chunks all take the
// encoder's one-pass path (bf16 of at least plan::kSampleMinElements
// elements: 32 MiB and up), that they do (one_pass_only); --no_promise times
// them without either.
//
// Modes: order-0, kv-aware, and reuse (bf16): each chunk coded with the
// order-0 table the encoder chose for other data in an earlier call
// (EncodeReusingTablesAsync; the CPU reference gets the same table). The
// other data is the same real KV from a third of the way into its period, so
// each chunk's table comes from other prompts' KV. reuse-own: the table
// counted over the chunk's own data (its first 2^24 - 2048 elements at most,
// so that the planned call counts every element, not a sample): the speed of
// reuse without tiles that a table misses (RAW).
//
// Each call is timed from an idle stream, so the host's launches are part of
// its time. --queued holds the stream until the call is all launched: GPU time
// only. The timed calls name one descriptor array, rewritten before each
// (untimed), as a caller that keeps its arrays does; the coder then replays
// one CUDA graph for them. The first call on that array, which records the
// graph, is printed apart ("first call", encode / decode).
//
// Calls 32M, 128M and 2x64M run on request (--call) only. --call=C1,C2,...
// runs the calls named, in that order, each as often as named.
//
// --hold_mib=N holds N MiB of device memory for the whole run before
// anything else is allocated, so that every buffer and workspace lies
// elsewhere in memory: how much a call's time depends on where its memory
// lies (docs/performance.md).
//
// DIR holds tools/kv_capture.py's files (default ~/.cache/kvferry/kv). Real KV
// is repeated to fill each call; without it the bench warns and uses synthetic
// KV-like data.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "kernels/codec.h"
#include "kernels/cuda/codec_cuda.h"
#include "tests/util/kv_like.h"

namespace kvferry::codec {
namespace {

#define CHECK_CUDA(x)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

bool ReadFile(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !out->empty();
}

struct Source {
  std::string name;
  DType dtype;
  std::vector<uint8_t> data;  // one period, repeated to fill a call
  Layout layout;
};

std::vector<uint8_t> Fill(const std::vector<uint8_t>& period, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t off = 0; off < bytes; off += period.size()) {
    std::memcpy(out.data() + off, period.data(), std::min(period.size(), bytes - off));
  }
  return out;
}

// Holds the stream for 2 ms so that a call's launches are all queued before
// its first kernel runs (--queued: GPU time without host launch gaps).
void CUDART_CB HoldStream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Shape {
  const char* name;
  size_t chunk_bytes;
  int chunks;
  bool on_request = false;  // run only when --call names it
};

int Run(int argc, char** argv) {
  std::string dir = std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/kvferry/kv";
  int reps = 21;
  bool quick = false, queued = false, promise = true;
  long hold_mib = 0;
  std::string only_dtype, only_call, only_mode;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--kv_dir=", 0) == 0) {
      dir = a.substr(9);
    } else if (a.rfind("--reps=", 0) == 0) {
      reps = std::max(1, std::atoi(a.c_str() + 7));
    } else if (a.rfind("--dtype=", 0) == 0) {
      only_dtype = a.substr(8);
    } else if (a.rfind("--call=", 0) == 0) {
      only_call = a.substr(7);
    } else if (a.rfind("--mode=", 0) == 0) {
      only_mode = a.substr(7);
    } else if (a == "--queued") {
      queued = true;
    } else if (a == "--no_promise") {
      promise = false;
    } else if (a == "--quick") {
      quick = true;
    } else if (a.rfind("--hold_mib=", 0) == 0) {
      hold_mib = std::max(0L, std::atol(a.c_str() + 11));
    } else {
      std::fprintf(
          stderr,
          "usage: codec_gpu_bench [--kv_dir=DIR] [--reps=N] [--quick] [--dtype=bf16|fp16|fp8_e4m3|fp8_e5m2|fp32]\n"
          "                       [--call=C[,C...], C one of 1M|4M|16x4M|64M|256M|32M|128M|2x64M] "
          "[--mode=order-0|kv-aware|reuse|reuse-own] "
          "[--queued]\n"
          "                       [--no_promise] [--hold_mib=N]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "codec_gpu_bench: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, L2 %d MiB\n", prop.name, prop.l2CacheSize >> 20);
  void* held = nullptr;
  if (hold_mib > 0) {
    CHECK_CUDA(cudaMalloc(&held, static_cast<size_t>(hold_mib) << 20));
    std::printf("holding %ld MiB of device memory for the run\n", hold_mib);
  }

  // Real KV: all prompts of one dtype concatenated; layout tokens x 3 heads x 64.
  const Layout kv_layout{0, 3, 64};
  std::vector<Source> sources;
  for (auto [name, dtype] : {std::pair<const char*, DType>{"bf16", DType::kBF16},
                             {"fp16", DType::kFP16},
                             {"fp8_e4m3", DType::kFP8E4M3},
                             {"fp8_e5m2", DType::kFP8E5M2}}) {
    Source s{name, dtype, {}, kv_layout};
    for (const char* prompt : {"prose", "code", "chat"}) {
      std::vector<uint8_t> part;
      if (ReadFile(dir + "/" + prompt + "." + name, &part)) s.data.insert(s.data.end(), part.begin(), part.end());
    }
    if (s.data.empty()) {
      std::printf("WARNING: no real KV in %s (run tools/kv_capture.py); %s uses synthetic KV-like data\n",
                  dir.c_str(), name);
      s.data = testing::KvLike(dtype, 1 << 21, 192, 1, 1.2f);
      s.name += " (synthetic)";
    }
    sources.push_back(std::move(s));
  }
  {  // fp32: the real bf16 values widened (their exponents are real; low mantissa bits are zero)
    Source s{"fp32", DType::kFP32, {}, kv_layout};
    const auto& bf = sources[0].data;
    s.data.resize(bf.size() * 2);
    for (size_t i = 0; i < bf.size() / 2; ++i) {
      s.data[4 * i + 2] = bf[2 * i];
      s.data[4 * i + 3] = bf[2 * i + 1];
    }
    s.name = sources[0].name == "bf16" ? "fp32 (bf16 widened)" : "fp32 (synthetic)";
    sources.push_back(std::move(s));
  }

  std::vector<Shape> shapes = {{"1M", 1 << 20, 1},           {"4M", 4 << 20, 1},          {"16x4M", 4 << 20, 16},
                               {"64M", 64 << 20, 1},         {"256M", 256 << 20, 1},      {"32M", 32 << 20, 1, true},
                               {"128M", 128 << 20, 1, true}, {"2x64M", 64 << 20, 2, true}};
  if (quick) shapes = {{"4M", 4 << 20, 1}, {"64M", 64 << 20, 1}};
  if (!only_call.empty()) {  // the calls named, in their order (a call may be named twice)
    std::vector<Shape> named;
    for (size_t at = 0; at <= only_call.size();) {
      const size_t end = std::min(only_call.find(',', at), only_call.size());
      const std::string name = only_call.substr(at, end - at);
      auto it = std::find_if(shapes.begin(), shapes.end(), [&](const Shape& sh) { return sh.name == name; });
      if (it == shapes.end()) {
        std::fprintf(stderr, "codec_gpu_bench: no call named '%s'\n", name.c_str());
        return 2;
      }
      named.push_back(*it);
      at = end + 1;
    }
    shapes = named;
  }
  std::printf("\n%-20s %-9s %-8s %7s %9s %10s %10s %10s %10s %9s %s\n", "data", "call", "mode", "ratio", "vs bound",
              "enc GB/s", "dec GB/s", "enc us", "dec us", "copy GB/s", "check");
  int failures = 0;
  for (const Source& src : sources) {
    if (!only_dtype.empty() && src.name.rfind(only_dtype, 0) != 0) continue;
    for (const Shape& sh : shapes) {
      if (src.dtype != DType::kBF16 && sh.chunk_bytes < (4u << 20)) continue;  // small sizes: bf16 only
      if (only_call.empty() && sh.on_request) continue;
      for (const char* mode : {"order-0", "kv-aware", "reuse", "reuse-own"}) {
        if (!only_mode.empty() && only_mode != mode) continue;
        if (only_mode.empty() && std::strcmp(mode, "reuse-own") == 0) continue;  // on request only
        const bool kv = std::strcmp(mode, "kv-aware") == 0, own = std::strcmp(mode, "reuse-own") == 0;
        const bool reuse = own || std::strcmp(mode, "reuse") == 0;
        if (reuse && src.dtype != DType::kBF16) continue;
        const size_t call_bytes = sh.chunk_bytes * sh.chunks;
        const int sets = static_cast<int>(std::max<size_t>(2, ((256u << 20) + call_bytes - 1) / call_bytes));
        // Chunk k of a call takes period offset k * chunk_bytes, so chunks differ.
        const auto host = Fill(src.data, sh.chunk_bytes * sh.chunks);
        EncodeOptions o;
        o.dtype = src.dtype;
        if (kv) o.layout = src.layout;
        o.channel_groups = kv;
        // Reuse: the data an earlier call planned its tables for, and those
        // tables (as the CPU plans them; the GPU's are checked to be the same).
        std::vector<uint8_t> plan_host;
        std::vector<FrequencyTable> tables(sh.chunks);
        const size_t plan_bytes =
            own ? std::min(sh.chunk_bytes, 2 * (plan::kSampleMinElements - 2048)) : sh.chunk_bytes;
        if (reuse) {
          std::vector<uint8_t> period = src.data;
          if (!own) std::rotate(period.begin(), period.begin() + period.size() / 3 / 4096 * 4096, period.end());
          plan_host = Fill(period, call_bytes);
          for (int k = 0; k < sh.chunks; ++k) {
            std::vector<uint8_t> chunk(MaxEncodedBytes(plan_bytes));
            auto n = Encode(o, plan_host.data() + k * sh.chunk_bytes, plan_bytes, chunk.data(), chunk.size());
            auto t = n.ok() ? TableOf(chunk.data(), *n) : absl::StatusOr<FrequencyTable>(n.status());
            if (!t.ok()) {
              std::fprintf(stderr, "cpu plan for reuse: %s\n", t.status().ToString().c_str());
              return 1;
            }
            tables[k] = *t;
          }
        }
        // CPU reference for every chunk of the call.
        std::vector<std::vector<uint8_t>> cpu(sh.chunks);
        double bound = 0;
        size_t cpu_total = 0;
        for (int k = 0; k < sh.chunks; ++k) {
          const uint8_t* in = host.data() + k * sh.chunk_bytes;
          o.table = reuse ? &tables[k] : nullptr;
          cpu[k].resize(MaxEncodedBytes(sh.chunk_bytes));
          auto n = Encode(o, in, sh.chunk_bytes, cpu[k].data(), cpu[k].size());
          if (!n.ok()) {
            std::fprintf(stderr, "cpu encode: %s\n", n.status().ToString().c_str());
            return 1;
          }
          cpu[k].resize(*n);
          cpu_total += *n;
          bound += *Order0BoundBytes(src.dtype, in, sh.chunk_bytes);
        }
        uint8_t *din = nullptr, *dchunk = nullptr, *dout = nullptr;
        const size_t cap = MaxEncodedBytes(sh.chunk_bytes);
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&din), call_bytes * sets));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dchunk), cap * sh.chunks * sets));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dout), call_bytes * sets));
        for (int s = 0; s < sets; ++s) {
          CHECK_CUDA(cudaMemcpy(din + s * call_bytes, host.data(), call_bytes, cudaMemcpyHostToDevice));
        }
        auto enc = cuda::Encoder::Create(sh.chunks, sh.chunk_bytes);
        auto dec = cuda::Decoder::Create(sh.chunks, sh.chunk_bytes);
        if (!enc.ok() || !dec.ok()) {
          std::fprintf(stderr, "create: %s %s\n", enc.status().ToString().c_str(), dec.status().ToString().c_str());
          return 1;
        }
        std::vector<cuda::EncodeChunk> ec(sh.chunks * sets);
        std::vector<cuda::DeviceChunk> dc(sh.chunks * sets);
        for (int s = 0; s < sets; ++s) {
          for (int k = 0; k < sh.chunks; ++k) {
            auto& e = ec[s * sh.chunks + k];
            e.in.data = din + s * call_bytes + k * sh.chunk_bytes;
            e.bytes = sh.chunk_bytes;
            e.dtype = static_cast<uint8_t>(src.dtype);
            e.channel_groups = kv;
            e.heads = kv ? src.layout.heads : 0;
            e.head_dim = kv ? src.layout.head_dim : 0;
            e.out = dchunk + (s * sh.chunks + k) * cap;
            e.out_capacity = cap;
            auto& d = dc[s * sh.chunks + k];
            d.data = e.out;
            d.bytes = cpu[k].size();  // checked below against the GPU's sizes
            d.out.data = dout + s * call_bytes + k * sh.chunk_bytes;
            d.out_capacity = sh.chunk_bytes;
          }
        }
        cuda::EncodeChunk* dec_args = nullptr;
        cuda::DeviceChunk* ddc_args = nullptr;
        int32_t* dstatus = nullptr;
        uint64_t* dsizes = nullptr;
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dec_args), sizeof(ec[0]) * ec.size()));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&ddc_args), sizeof(dc[0]) * dc.size()));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dstatus), 4 * sh.chunks * sets));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dsizes), 8 * sh.chunks * sets));
        CHECK_CUDA(cudaMemcpy(dec_args, ec.data(), sizeof(ec[0]) * ec.size(), cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(ddc_args, dc.data(), sizeof(dc[0]) * dc.size(), cudaMemcpyHostToDevice));
        cudaStream_t stream;
        CHECK_CUDA(cudaStreamCreate(&stream));
        // The timed calls name one descriptor array, as a caller that keeps
        // its arrays does (a daemon's control block): each rep first copies
        // set s's descriptors into it, untimed. So the coder replays one
        // graph for them (kernels/cuda/call_graphs.h). Each rep's status and
        // sizes are checked after it.
        cuda::EncodeChunk* call_enc = nullptr;
        cuda::DeviceChunk* call_dec = nullptr;
        int32_t* call_status = nullptr;
        uint64_t* call_sizes = nullptr;
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&call_enc), sizeof(ec[0]) * sh.chunks));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&call_dec), sizeof(dc[0]) * sh.chunks));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&call_status), 4 * sh.chunks));
        CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&call_sizes), 8 * sh.chunks));
        cudaEvent_t a, b;
        CHECK_CUDA(cudaEventCreate(&a));
        CHECK_CUDA(cudaEventCreate(&b));
        // One call's time from an idle stream (or queued), in ms.
        auto time_one = [&](auto&& call, int s) {
          if (queued) CHECK_CUDA(cudaLaunchHostFunc(stream, HoldStream, nullptr));
          CHECK_CUDA(cudaEventRecord(a, stream));
          call(s);
          CHECK_CUDA(cudaEventRecord(b, stream));
          CHECK_CUDA(cudaEventSynchronize(b));
          float t = 0;
          CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
          return t;
        };
        auto timed = [&](auto&& load, auto&& call, auto&& verify) {
          for (int s = 0; s < std::min(sets, 3); ++s) load(s), call(s);  // warm-up
          std::vector<float> ms;
          for (int r = 0; r < reps; ++r) {
            load(r % sets);
            ms.push_back(time_one(call, r % sets));
            verify();
          }
          return Median(ms);
        };
        // Every chunk one-pass (the encoder refuses the promise otherwise).
        const bool one_pass = promise && !kv && !reuse && src.dtype == DType::kBF16 &&
                              sh.chunk_bytes >= 2 * plan::kSampleMinElements && sh.chunk_bytes % 4096 == 0;
        // An encode call of the mode on these descriptors, sizes and statuses.
        auto encode_on = [&](const cuda::EncodeChunk* args, uint64_t* sizes, int32_t* st) {
          if (reuse) {
            CHECK_CUDA((*enc)->EncodeReusingTablesAsync(args, sh.chunks, sizes, st, stream));
          } else {
            CHECK_CUDA((*enc)->EncodeAsync(args, sh.chunks, sizes, st, stream, nullptr, /*channel_groups=*/kv, one_pass,
                                           promise ? static_cast<uint8_t>(src.dtype) : 0));
          }
        };
        auto encode = [&](int s) {
          encode_on(dec_args + s * sh.chunks, dsizes + s * sh.chunks, dstatus + s * sh.chunks);
        };
        auto decode = [&](int s) {
          CHECK_CUDA((*dec)->DecodeAsync(ddc_args + s * sh.chunks, sh.chunks, dstatus + s * sh.chunks, stream));
        };
        auto copy = [&](int s) {
          CHECK_CUDA(cudaMemcpyAsync(dout + s * call_bytes, din + s * call_bytes, call_bytes,
                                     cudaMemcpyDeviceToDevice, stream));
        };
        auto load_enc = [&](int s) {
          CHECK_CUDA(cudaMemcpyAsync(call_enc, dec_args + s * sh.chunks, sizeof(ec[0]) * sh.chunks,
                                     cudaMemcpyDeviceToDevice, stream));
        };
        auto load_dec = [&](int s) {
          CHECK_CUDA(cudaMemcpyAsync(call_dec, ddc_args + s * sh.chunks, sizeof(dc[0]) * sh.chunks,
                                     cudaMemcpyDeviceToDevice, stream));
        };
        auto encode_call = [&](int) { encode_on(call_enc, call_sizes, call_status); };
        auto decode_call = [&](int) { CHECK_CUDA((*dec)->DecodeAsync(call_dec, sh.chunks, call_status, stream)); };
        std::string check = "ok";
        if (reuse) {  // the planned call: set 0's inputs hold the other data for it
          CHECK_CUDA(cudaMemcpy(din, plan_host.data(), call_bytes, cudaMemcpyHostToDevice));
          std::vector<cuda::EncodeChunk> pec(ec.begin(), ec.begin() + sh.chunks);
          for (auto& e : pec) e.bytes = plan_bytes;
          cuda::EncodeChunk* plan_args = nullptr;
          CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&plan_args), sizeof(pec[0]) * pec.size()));
          CHECK_CUDA(cudaMemcpy(plan_args, pec.data(), sizeof(pec[0]) * pec.size(), cudaMemcpyHostToDevice));
          CHECK_CUDA((*enc)->EncodeAsync(plan_args, sh.chunks, dsizes, dstatus, stream, nullptr, false));
          CHECK_CUDA(cudaStreamSynchronize(stream));
          std::vector<int32_t> pst(sh.chunks);
          std::vector<uint64_t> psz(sh.chunks);
          CHECK_CUDA(cudaMemcpy(pst.data(), dstatus, 4 * sh.chunks, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(psz.data(), dsizes, 8 * sh.chunks, cudaMemcpyDeviceToHost));
          for (int k = 0; k < sh.chunks && check == "ok"; ++k) {
            std::vector<uint8_t> g(pst[k] == 0 ? psz[k] : 0);
            CHECK_CUDA(cudaMemcpy(g.data(), dchunk + k * cap, g.size(), cudaMemcpyDeviceToHost));
            auto t = TableOf(g.data(), g.size());
            if (!t.ok() || !std::equal(std::begin(t->freq), std::end(t->freq), std::begin(tables[k].freq))) {
              check = "PLANNED TABLE != CPU TABLE";
            }
          }
          CHECK_CUDA(cudaMemcpy(din, host.data(), call_bytes, cudaMemcpyHostToDevice));
          cudaFree(plan_args);
        }
        // Encode every set once, check against the CPU, then time; set 0's
        // chunks are checked again after the timed calls (state carried from
        // one call on the encoder to the next would show there).
        for (int s = 0; s < sets; ++s) encode(s);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        std::vector<int32_t> st(sh.chunks * sets);
        std::vector<uint64_t> sizes(sh.chunks * sets);
        auto check_set0 = [&](const char* what) {
          CHECK_CUDA(cudaMemcpy(st.data(), dstatus, 4 * st.size(), cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(sizes.data(), dsizes, 8 * sizes.size(), cudaMemcpyDeviceToHost));
          for (int k = 0; k < sh.chunks && check == "ok"; ++k) {
            std::vector<uint8_t> g(sizes[k]);
            CHECK_CUDA(cudaMemcpy(g.data(), dchunk + k * cap, g.size(), cudaMemcpyDeviceToHost));
            if (st[k] != 0) {
              check = std::string("ENCODE STATUS ") + std::to_string(st[k]) + what;
            } else if (g != cpu[k]) {
              check = std::string("GPU CHUNK != CPU CHUNK") + what;
            }
          }
        };
        check_set0("");
        std::vector<int32_t> call_st(sh.chunks);
        std::vector<uint64_t> call_sz(sh.chunks);
        auto verify_encode = [&] {
          CHECK_CUDA(cudaMemcpy(call_st.data(), call_status, 4 * sh.chunks, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(call_sz.data(), call_sizes, 8 * sh.chunks, cudaMemcpyDeviceToHost));
          for (int k = 0; k < sh.chunks && check == "ok"; ++k) {
            if (call_st[k] != 0 || call_sz[k] != cpu[k].size()) check = "TIMED ENCODE STATUS OR SIZE";
          }
        };
        auto verify_decode = [&] {
          CHECK_CUDA(cudaMemcpy(call_st.data(), call_status, 4 * sh.chunks, cudaMemcpyDeviceToHost));
          for (int k = 0; k < sh.chunks && check == "ok"; ++k) {
            if (call_st[k] != 0) check = "TIMED DECODE STATUS " + std::to_string(call_st[k]);
          }
        };
        // The first call on the descriptor array records its graph.
        load_enc(0);
        const float enc_first_ms = time_one(encode_call, 0);
        verify_encode();
        const float enc_ms = timed(load_enc, encode_call, verify_encode);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        check_set0(" (AFTER REPEATS)");
        load_dec(0);
        const float dec_first_ms = time_one(decode_call, 0);
        verify_decode();
        const float dec_ms = timed(load_dec, decode_call, verify_decode);
        const float copy_ms = timed([](int) {}, copy, [] {});
        CHECK_CUDA(cudaStreamSynchronize(stream));
        if (check == "ok") {
          // The copy timing wrote the input into dout too: clear it, decode once more, compare.
          std::vector<uint8_t> back(call_bytes);
          CHECK_CUDA(cudaMemsetAsync(dout, 0, call_bytes, stream));
          decode(0);
          CHECK_CUDA(cudaStreamSynchronize(stream));
          CHECK_CUDA(cudaMemcpy(back.data(), dout, call_bytes, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(st.data(), dstatus, 4 * sh.chunks, cudaMemcpyDeviceToHost));
          for (int k = 0; k < sh.chunks && check == "ok"; ++k) {
            if (st[k] != 0) check = "DECODE STATUS " + std::to_string(st[k]);
          }
          if (check == "ok" && back != host) check = "DECODE != INPUT";
        }
        if (check != "ok") ++failures;
        const double gb = static_cast<double>(call_bytes) / 1e6;
        uint64_t raw_tiles = 0, tiles = 0;  // of the call's chunks (the CPU's, which the GPU's equal)
        for (const auto& c : cpu) {
          auto info = Inspect(c.data(), c.size());
          if (info.ok()) raw_tiles += info->raw_tiles, tiles += info->tiles;
        }
        std::printf(
            "%-20s %-9s %-8s %7.4f %+8.2f%% %10.1f %10.1f %10.1f %10.1f %9.1f %s (RAW tiles %llu of %llu; first "
            "call %.0f / %.0f us)\n",
            src.name.c_str(), sh.name, mode, static_cast<double>(call_bytes) / cpu_total,
            100.0 * (static_cast<double>(cpu_total) - bound) / bound, gb / enc_ms, gb / dec_ms, enc_ms * 1000,
            dec_ms * 1000, gb / copy_ms, check.c_str(), static_cast<unsigned long long>(raw_tiles),
            static_cast<unsigned long long>(tiles), enc_first_ms * 1000, dec_first_ms * 1000);
        std::fflush(stdout);
        cudaFree(din);
        cudaFree(dchunk);
        cudaFree(dout);
        cudaFree(dec_args);
        cudaFree(ddc_args);
        cudaFree(dstatus);
        cudaFree(dsizes);
        cudaFree(call_enc);
        cudaFree(call_dec);
        cudaFree(call_status);
        cudaFree(call_sizes);
        cudaStreamDestroy(stream);
        cudaEventDestroy(a);
        cudaEventDestroy(b);
      }
    }
  }
  std::printf("\nratio = input / chunk bytes; vs bound = chunk bytes over the order-0 entropy bound of exponent "
              "plane + raw plane; GB/s of uncompressed bytes\n%s\n",
              failures == 0 ? "codec_gpu_bench: all checks passed" : "codec_gpu_bench: CHECK FAILURES");
  if (held != nullptr) cudaFree(held);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvferry::codec

int main(int argc, char** argv) { return kvferry::codec::Run(argc, argv); }
