// The pipeline engine on GPU memory (runs on a GPU host; skips itself without
// a CUDA device): device-to-device, host-to-device and device-to-host
// transfers in every compression mode are bit-exact; paged (equal blocks),
// odd-sized and contiguous segment lists; corrupt chunks never reach device
// memory; cancelling mid-pipeline frees every staging slot. With a UCX that
// carries GPU memory, the "ucx" cases take the direct path (device staging).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "kernels/checksum.h"
#include "kernels/codec.h"
#include "tests/util/engine_util.h"
#include "tests/util/kv_like.h"
#include "transport/chunk.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/pipeline/engine.h"
#include "transport/ucx/ucx_transport.h"

namespace kvferry::pipeline {
namespace {

// Device memory freed on destruction.
struct DeviceBuffer {
  uint8_t* p = nullptr;
  size_t n = 0;
  int device = 0;
  DeviceBuffer(int dev, size_t bytes) : n(bytes), device(dev) {
    cudaSetDevice(dev);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, bytes), cudaSuccess);
  }
  ~DeviceBuffer() {
    cudaSetDevice(device);
    cudaFree(p);
  }
  void Put(const std::vector<uint8_t>& v) { ASSERT_EQ(cudaMemcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice), 0); }
  std::vector<uint8_t> Get() const {
    std::vector<uint8_t> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

// `base` cut into segments of `seg` bytes (0: one segment), in a scrambled order.
SegmentList Segments(uint8_t* base, size_t n, size_t seg, uint32_t seed) {
  if (seg == 0) return SegmentList({{base, n}});
  std::vector<Segment> s;
  for (size_t off = 0; off < n; off += seg) s.push_back({base + off, std::min(seg, n - off)});
  std::shuffle(s.begin(), s.end(), std::mt19937(seed));
  return SegmentList(s);
}

CodecSpec Bf16(Compression mode) { return {mode, codec::DType::kBF16, {}}; }

class GpuEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cudaGetDeviceCount(&devices_) != cudaSuccess || devices_ == 0) GTEST_SKIP() << "no CUDA device";
  }
  std::unique_ptr<transport::Transport> NewTransport() {
    if (GetParam() == "loopback") {
      if (!fabric_) fabric_ = transport::NewLoopbackFabric();
      return transport::CreateLoopbackTransport(fabric_).value();
    }
    return transport::CreateUcxTransport({}).value();
  }
  std::unique_ptr<Engine> NewEngine(EngineOptions o, std::vector<int> devices) {
    auto e = Engine::Create(NewTransport(), o);
    EXPECT_TRUE(e.ok()) << e.status();
    for (int d : devices) EXPECT_TRUE((*e)->PrepareDevice(d).ok());
    return std::move(e).value();
  }
  int devices_ = 0;
  std::shared_ptr<transport::LoopbackFabric> fabric_;
};

EngineOptions SmallChunks() {
  EngineOptions o;
  o.gpu_direct = true;  // taken where the transport carries GPU memory
  o.chunk_bytes = 256 << 10;
  o.staging_bytes = 16 << 20;
  o.window = 4;
  return o;
}

// With split-send on (raw planes leave while the exponents are coded) and off.
// Split-send needs host staging, so that sender stages; the receiver (and, in
// the other round, both) go direct where the transport carries GPU memory:
// a direct receiver then joins split chunks on the device.
TEST_P(GpuEngineTest, DeviceTransfersAreBitExactInEveryMode) {
  const size_t total = (3 << 20) + 4096;
  auto data = testing::KvLike(codec::DType::kBF16, total / 2, 128, 7);
  DeviceBuffer src(0, total);
  src.Put(data);
  uint64_t id = 100;
  for (bool split : {true, false}) {
    EngineOptions o = SmallChunks();
    o.split_send = split;
    o.gpu_direct = !split;
    auto tx = NewEngine(o, {0});
    o.gpu_direct = true;
    auto rx = NewEngine(o, {devices_ - 1});  // a second GPU when there is one
    // 32 KiB: paged blocks (the encoder reads the block list); 6144 + odd tail:
    // gathered on the device first; 0: one contiguous buffer.
    for (size_t seg : {size_t{32 << 10}, size_t{6144}, size_t{0}}) {
      for (Compression mode : {Compression::kRaw, Compression::kCompressed, Compression::kAdaptive}) {
        ++id;
        DeviceBuffer dst(devices_ - 1, total);
        auto sc = std::make_shared<TransferCounters>(), rc = std::make_shared<TransferCounters>();
        Result sr, rr;
        const auto deadline = absl::Now() + absl::Seconds(30);
        RecvSpec r{id, Segments(dst.p, total, seg, 5), o.chunk_bytes, deadline, rc, rr.cb()};
        r.device = devices_ - 1;
        SendSpec s{id, rx->address(), Segments(src.p, total, seg, 5), o.chunk_bytes, deadline, sc, sr.cb(), Bf16(mode)};
        s.device = 0;
        ASSERT_TRUE(rx->StartRecv(r).ok());
        ASSERT_TRUE(tx->StartSend(s).ok());
        const std::string what = std::string(CompressionName(mode)) + " seg " + std::to_string(seg);
        ASSERT_TRUE(rr.Get().ok()) << what;
        ASSERT_TRUE(sr.Get().ok()) << what;
        EXPECT_TRUE(dst.Get() == data) << what << ": destination differs from the source";
        EXPECT_EQ(rc->bytes_done.load(), total) << what;
        EXPECT_EQ(rc->chunks_encoded.load(), sc->chunks_encoded.load()) << what;
        if (mode == Compression::kRaw) {
          EXPECT_EQ(sc->chunks_encoded.load(), 0u) << what;
        }
        if (mode == Compression::kCompressed) {
          EXPECT_EQ(sc->chunks_encoded.load(), sc->chunks_total.load()) << what;
          EXPECT_LT(sc->wire_bytes.load() * 1.2, total) << what;
          if (split) {
            EXPECT_GE(sc->chunks_split.load(), 1u) << what;  // at least the first: the link was idle
          } else {
            EXPECT_EQ(sc->chunks_split.load(), 0u) << what;
          }
        }
      }
    }
    auto ts = tx->stats(), rs = rx->stats();
    EXPECT_EQ(ts.send_slots_free, ts.send_slots);
    EXPECT_EQ(rs.recv_slots_free, rs.recv_slots);
    EXPECT_EQ(ts.gpu_devices, 1u);
    // The receiver measured its GPU workers on encoded and raw chunks.
    EXPECT_GT(rx->receive_rates(devices_ - 1).decode_bps, 0.0);
    EXPECT_GT(rx->receive_rates(devices_ - 1).raw_bps, 0.0);
  }
}

// Host pools use the CPU codec, GPU pools the CUDA codec: the two must read
// each other's chunks.
TEST_P(GpuEngineTest, HostAndDeviceMemoryInterchange) {
  const EngineOptions o = SmallChunks();
  auto a = NewEngine(o, {0});
  auto b = NewEngine(o, {0});
  const size_t total = 2 << 20;
  auto data = testing::KvLike(codec::DType::kBF16, total / 2, 128, 8);
  uint64_t id = 200;
  for (bool to_gpu : {true, false}) {
    ++id;
    DeviceBuffer dev(0, total);
    std::vector<uint8_t> host = to_gpu ? data : std::vector<uint8_t>(total, 0);
    if (!to_gpu) dev.Put(data);
    auto sc = std::make_shared<TransferCounters>();
    Result sr, rr;
    RecvSpec r{id,
               Segments(to_gpu ? dev.p : host.data(), total, 32 << 10, 1),
               o.chunk_bytes,
               absl::InfiniteFuture(),
               nullptr,
               rr.cb()};
    r.device = to_gpu ? 0 : -1;
    SendSpec s{id,
               b->address(),
               Segments(to_gpu ? host.data() : dev.p, total, 32 << 10, 1),
               o.chunk_bytes,
               absl::InfiniteFuture(),
               sc,
               sr.cb(),
               Bf16(Compression::kCompressed)};
    s.device = to_gpu ? -1 : 0;
    ASSERT_TRUE(b->StartRecv(r).ok());
    ASSERT_TRUE(a->StartSend(s).ok());
    ASSERT_TRUE(rr.Get().ok()) << (to_gpu ? "host -> GPU" : "GPU -> host");
    ASSERT_TRUE(sr.Get().ok());
    EXPECT_EQ(sc->chunks_encoded.load(), sc->chunks_total.load());
    EXPECT_TRUE((to_gpu ? dev.Get() : host) == data) << (to_gpu ? "host -> GPU" : "GPU -> host");
  }
}

// A chunk that fails either check (the wire kvsum64, or the CUDA decoder's
// kvsum64 of what it decoded) fails the transfer and leaves device memory as
// it was.
TEST_P(GpuEngineTest, CorruptChunksNeverReachDeviceMemory) {
  auto rx = NewEngine(SmallChunks(), {0});
  const auto raw = testing::KvLike(codec::DType::kBF16, 32768, 128, 3);  // 64 KiB
  std::vector<uint8_t> enc(codec::MaxEncodedBytes(raw.size()));
  enc.resize(codec::Encode(codec::EncodeOptions{}, raw.data(), raw.size(), enc.data(), enc.size()).value());
  ASSERT_LT(enc.size(), raw.size());
  auto bad = enc;
  bad[bad.size() - 9] ^= 0x20;
  struct Case {
    const char* name;
    const std::vector<uint8_t>* payload;
    uint64_t sum;
    uint16_t flags;
  } cases[] = {
      {"raw chunk flipped on the wire", &raw, Kvsum64(enc.data(), 64), 0},
      {"encoded chunk flipped on the wire", &bad, Kvsum64(enc.data(), enc.size()), transport::kChunkEncoded},
      {"corrupt encoded chunk with a matching wire checksum", &bad, Kvsum64(bad.data(), bad.size()),
       transport::kChunkEncoded},
  };
  uint64_t id = 300;
  for (const auto& c : cases) {
    ++id;
    DeviceBuffer dst(0, raw.size());
    Result r;
    RecvSpec spec{id, Segments(dst.p, raw.size(), 0, 0), raw.size(), absl::Now() + absl::Seconds(10), nullptr, r.cb()};
    spec.device = 0;
    ASSERT_TRUE(rx->StartRecv(spec).ok());
    RawSender(NewTransport(), rx->address())
        .Send(id, Header({id, 0, 1, 0, c.payload->size(), c.sum, c.flags}), *c.payload);
    EXPECT_EQ(r.Get().code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_TRUE(dst.Get() == std::vector<uint8_t>(raw.size(), 0)) << c.name << ": unverified bytes reached the GPU";
  }
  // The intact chunk lands.
  DeviceBuffer dst(0, raw.size());
  Result r;
  RecvSpec spec{399, Segments(dst.p, raw.size(), 0, 0), raw.size(), absl::Now() + absl::Seconds(10), nullptr, r.cb()};
  spec.device = 0;
  ASSERT_TRUE(rx->StartRecv(spec).ok());
  RawSender(NewTransport(), rx->address())
      .Send(399, Header({399, 0, 1, 0, enc.size(), Kvsum64(enc.data(), enc.size()), transport::kChunkEncoded}), enc);
  EXPECT_TRUE(r.Get().ok());
  EXPECT_TRUE(dst.Get() == raw);
  auto st = rx->stats();
  EXPECT_EQ(st.recv_slots_free, st.recv_slots);
}

TEST_P(GpuEngineTest, CancelMidPipelineReleasesEveryStagingSlot) {
  EngineOptions o = SmallChunks();
  o.staging_bytes = 4 << 20;
  auto tx = NewEngine(o, {0});
  auto rx = NewEngine(o, {0});
  const size_t total = 64 << 20;
  DeviceBuffer src(0, total), dst(0, total);
  src.Put(testing::KvLike(codec::DType::kBF16, total / 2, 128, 4));
  auto rc = std::make_shared<TransferCounters>();
  Result sr, rr;
  RecvSpec r{700, Segments(dst.p, total, 0, 0), o.chunk_bytes, absl::InfiniteFuture(), rc, rr.cb()};
  r.device = 0;
  SendSpec s{700,     rx->address(), Segments(src.p, total, 1 << 20, 2), o.chunk_bytes, absl::InfiniteFuture(),
             nullptr, sr.cb(),       Bf16(Compression::kCompressed)};
  s.device = 0;
  ASSERT_TRUE(rx->StartRecv(r).ok());
  ASSERT_TRUE(tx->StartSend(s).ok());
  CancelMidTransferAndCheckSlots(*tx, *rx, 700, *rc, sr, rr);
}

// Direct mode is on exactly when the transport carries GPU memory and the
// option allows it; its device staging mirrors the host staging. A run meant
// to cover the direct path sets KVFERRY_EXPECT_GPU_DIRECT=1 (a UCX with CUDA
// transports, UCX_TLS allowing them).
TEST_P(GpuEngineTest, GpuDirectFollowsTheTransport) {
  auto on = NewEngine(SmallChunks(), {0});
  const bool can = on->capabilities().cuda_memory;
  if (GetParam() == "loopback") {
    EXPECT_FALSE(can);
  }
  if (GetParam() == "ucx" && std::getenv("KVFERRY_EXPECT_GPU_DIRECT") != nullptr) {
    EXPECT_TRUE(can) << "this UCX does not carry GPU memory (CUDA transports missing or not in UCX_TLS)";
  }
  EngineOptions o = SmallChunks();
  o.gpu_direct = false;
  auto off = NewEngine(o, {0});
  const auto a = on->stats(), b = off->stats();
  EXPECT_EQ(a.gpu_direct, can);
  EXPECT_FALSE(b.gpu_direct);
  EXPECT_EQ(a.gpu_bytes_allocated - b.gpu_bytes_allocated, can ? a.staging_bytes_allocated : 0);
}

TEST_P(GpuEngineTest, DeviceJobsNeedAPreparedDevice) {
  auto e = NewEngine(SmallChunks(), {});
  DeviceBuffer buf(0, 4096);
  Result r;
  RecvSpec spec{800, Segments(buf.p, 4096, 0, 0), 4096, absl::InfiniteFuture(), nullptr, r.cb()};
  spec.device = 0;
  EXPECT_EQ(e->StartRecv(spec).code(), absl::StatusCode::kFailedPrecondition);
  EngineOptions none = SmallChunks();
  none.gpu_workers = 0;
  auto plain = Engine::Create(NewTransport(), none).value();
  EXPECT_EQ(plain->PrepareDevice(0).code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Transports, GpuEngineTest, ::testing::Values("loopback", "ucx"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvferry::pipeline
