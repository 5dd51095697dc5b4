// GPU KV pools end to end (runs on a GPU host; skips itself without a CUDA
// device): two kvferryd processes import this process's GPU allocations by
// CUDA IPC handle, and pulls between them, in every compression mode, land
// bit-exact in the right blocks; on one GPU, on two GPUs where there are two,
// and between host and GPU pools. Bad registrations get clear errors.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/kv_layout.h"
#include "tests/util/daemons.h"
#include "tests/util/kv_like.h"

namespace kvferry::testing {
namespace {

// 4 layers x 2 planes x 16 tokens x 8 heads x 128 dims, bf16: 32 KiB segments.
v1::KvLayout GpuLayout() {
  v1::KvLayout l;
  l.set_num_layers(4);
  l.set_kv_planes(2);
  l.set_block_tokens(16);
  l.set_num_heads(8);
  l.set_head_dim(128);
  l.set_dtype(v1::DTYPE_BF16);
  return l;
}

std::string PciBusId(int device) {
  char id[32] = {0};
  EXPECT_EQ(cudaDeviceGetPCIBusId(id, sizeof(id), device), cudaSuccess);
  return id;
}

// A KV pool in this process's GPU memory, shared by IPC handle.
struct GpuPool {
  int device = 0;
  uint8_t* p = nullptr;
  Geometry g;
  std::string handle;
  uint64_t id = 0;

  GpuPool(int dev, uint32_t blocks, size_t slack = 0) : device(dev) {
    g = MakeGeometry(GpuLayout(), blocks).value();
    cudaSetDevice(dev);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), g.region_bytes + slack), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, g.region_bytes + slack), cudaSuccess);
    cudaIpcMemHandle_t h;
    EXPECT_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    handle.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  }
  ~GpuPool() {
    cudaSetDevice(device);
    cudaFree(p);
  }
  std::vector<uint8_t> Get() const {
    std::vector<uint8_t> v(g.region_bytes);
    EXPECT_EQ(cudaMemcpy(v.data(), p, v.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void Put(const std::vector<uint8_t>& v) {
    ASSERT_EQ(cudaMemcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  absl::Status Register(client::Client* c, const std::string& name) {
    auto r = c->RegisterGpuPool(name, GpuLayout(), g.num_blocks, handle, PciBusId(device));
    if (!r.ok()) return r.status();
    id = r->pool_id();
    return absl::OkStatus();
  }
};

// Every segment of block from[i] in `a` equals that of block to[i] in `b`.
bool SameBlocks(const Geometry& g, const std::vector<uint8_t>& a, const std::vector<uint32_t>& from,
                const std::vector<uint8_t>& b, const std::vector<uint32_t>& to) {
  for (size_t i = 0; i < from.size(); ++i) {
    for (uint32_t l = 0; l < g.layers; ++l) {
      for (uint32_t p = 0; p < g.planes; ++p) {
        if (std::memcmp(a.data() + g.SegmentOffset(l, p, from[i]), b.data() + g.SegmentOffset(l, p, to[i]),
                        g.segment_bytes) != 0) {
          return false;
        }
      }
    }
  }
  return true;
}

class GpuPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cudaGetDeviceCount(&devices_) != cudaSuccess || devices_ == 0) GTEST_SKIP() << "no CUDA device";
    const std::vector<std::string> flags = {"--chunk_bytes=1048576", "--staging_mib=32"};
    prefill_ = Daemon::Start("prefill", flags);
    decode_ = Daemon::Start("decode", flags);
    ASSERT_NE(prefill_, nullptr);
    ASSERT_NE(decode_, nullptr);
  }

  // Pulls `from` of src into `to` of dst in each mode and checks the bytes.
  void PullEveryMode(GpuPool& src, GpuPool& dst, const std::string& what) {
    std::vector<uint32_t> from(48), to(48);
    std::iota(from.begin(), from.end(), 0);
    for (size_t i = 0; i < to.size(); ++i) to[i] = static_cast<uint32_t>(to.size() - 1 - i) + 8;  // reversed, shifted
    const auto data = KvLike(codec::DType::kBF16, src.g.region_bytes / 2, 128, 11);
    src.Put(data);
    for (v1::Compression mode : {v1::COMPRESSION_RAW, v1::COMPRESSION_COMPRESSED, v1::COMPRESSION_ADAPTIVE}) {
      const std::string m = what + " " + v1::Compression_Name(mode);
      dst.Put(std::vector<uint8_t>(dst.g.region_bytes, 0));
      auto t = prefill_->client->Publish(src.id, from);
      ASSERT_TRUE(t.ok()) << t.status();
      auto id = decode_->client->Pull(*t, dst.id, to, absl::Seconds(60), mode);
      ASSERT_TRUE(id.ok()) << id.status();
      auto last = decode_->client->Watch(*id);
      ASSERT_TRUE(last.ok()) << last.status();
      ASSERT_EQ(last->state(), v1::TRANSFER_STATE_DONE) << m << ": " << last->error() << "\n"
                                                        << prefill_->LogTail() << decode_->LogTail();
      EXPECT_TRUE(SameBlocks(src.g, data, from, dst.Get(), to)) << m;
      EXPECT_EQ(last->bytes_done(), from.size() * src.g.layers * src.g.planes * src.g.segment_bytes) << m;
      if (mode == v1::COMPRESSION_RAW) {
        EXPECT_EQ(last->chunks_encoded(), 0u) << m;
      }
      if (mode == v1::COMPRESSION_COMPRESSED) {
        EXPECT_EQ(last->chunks_encoded(), last->chunks_total()) << m;
        EXPECT_LT(last->wire_bytes() * 1.2, last->bytes_done()) << m;
      }
    }
    for (auto* d : {prefill_.get(), decode_.get()}) {
      auto st = d->client->Status();
      ASSERT_TRUE(st.ok());
      EXPECT_EQ(st->send_slots_free(), st->send_slots());
      EXPECT_EQ(st->recv_slots_free(), st->recv_slots());
    }
  }

  int devices_ = 0;
  std::unique_ptr<Daemon> prefill_, decode_;
};

TEST_F(GpuPoolTest, PullsBetweenPoolsOnOneGpuAreBitExact) {
  GpuPool src(0, 64), dst(0, 64);
  ASSERT_TRUE(src.Register(prefill_->client.get(), "src").ok());
  ASSERT_TRUE(dst.Register(decode_->client.get(), "dst").ok());
  auto st = prefill_->client->Status();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->pools_size(), 1);
  EXPECT_EQ(st->pools(0).memory_kind(), v1::MEMORY_KIND_CUDA_IPC);
  // The GPU workers' device memory is reported: per worker at least a staging
  // chunk and an encoded one (defaults: 4 workers, 1 MiB chunks).
  EXPECT_GE(st->gpu_bytes(), 4u * 2 * (1u << 20));
  // A run that asks the daemons for direct transfers (--gpu_direct, a UCX with
  // CUDA transports) sets KVFERRY_EXPECT_GPU_DIRECT=1: they must be on.
  if (getenv("KVFERRY_EXPECT_GPU_DIRECT") != nullptr) {
    EXPECT_TRUE(st->gpu_direct());
  }
  PullEveryMode(src, dst, "GPU 0 -> GPU 0");
}

TEST_F(GpuPoolTest, PullsBetweenTwoGpusAreBitExact) {
  if (devices_ < 2) GTEST_SKIP() << "one CUDA device";
  GpuPool src(0, 64), dst(1, 64);
  ASSERT_TRUE(src.Register(prefill_->client.get(), "src").ok());
  ASSERT_TRUE(dst.Register(decode_->client.get(), "dst").ok());
  PullEveryMode(src, dst, "GPU 0 -> GPU 1");
}

TEST_F(GpuPoolTest, HostAndGpuPoolsPullFromEachOther) {
  GpuPool gpu(0, 16);
  ASSERT_TRUE(gpu.Register(decode_->client.get(), "gpu").ok());
  auto host = prefill_->client->CreateHostPool("host", GpuLayout(), 16);
  ASSERT_TRUE(host.ok()) << host.status();
  cli::FillKvLike(**host, 5);
  std::vector<uint32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), 0);
  auto t = prefill_->client->Publish((*host)->id(), blocks);
  ASSERT_TRUE(t.ok());
  auto id = decode_->client->Pull(*t, gpu.id, blocks, absl::Seconds(60), v1::COMPRESSION_COMPRESSED);
  ASSERT_TRUE(id.ok()) << id.status();
  auto last = decode_->client->Watch(*id);
  ASSERT_EQ(last->state(), v1::TRANSFER_STATE_DONE) << last->error();
  const std::vector<uint8_t> host_bytes((*host)->base(), (*host)->base() + (*host)->bytes());
  EXPECT_TRUE(SameBlocks(gpu.g, host_bytes, blocks, gpu.Get(), blocks)) << "host (CPU codec) -> GPU (CUDA codec)";
  // And back: GPU pool on the decode daemon -> a host pool on the prefill daemon.
  auto back = prefill_->client->CreateHostPool("back", GpuLayout(), 16);
  ASSERT_TRUE(back.ok());
  auto t2 = decode_->client->Publish(gpu.id, blocks);
  ASSERT_TRUE(t2.ok());
  auto id2 = prefill_->client->Pull(*t2, (*back)->id(), blocks, absl::Seconds(60), v1::COMPRESSION_COMPRESSED);
  ASSERT_TRUE(id2.ok()) << id2.status();
  auto last2 = prefill_->client->Watch(*id2);
  ASSERT_EQ(last2->state(), v1::TRANSFER_STATE_DONE) << last2->error();
  EXPECT_GT(last2->chunks_encoded(), 0u);
  const std::vector<uint8_t> back_bytes((*back)->base(), (*back)->base() + (*back)->bytes());
  EXPECT_TRUE(SameBlocks(gpu.g, host_bytes, blocks, back_bytes, blocks)) << "GPU (CUDA codec) -> host (CPU codec)";
}

TEST_F(GpuPoolTest, BadGpuRegistrationsGetClearErrors) {
  GpuPool pool(0, 8);
  client::Client* c = prefill_->client.get();
  auto code = [&](const std::string& handle, const std::string& device, uint32_t blocks, uint64_t offset) {
    return c->RegisterGpuPool("p", GpuLayout(), blocks, handle, device, offset).status().code();
  };
  const std::string bus = PciBusId(0);
  EXPECT_EQ(code("short", bus, 8, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(std::string(64, '\x5a'), bus, 8, 0), absl::StatusCode::kInvalidArgument);  // not a live handle
  EXPECT_EQ(code(pool.handle, "99", 8, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(pool.handle, "0000:ff:1f.7", 8, 0), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(pool.handle, "gpu zero", 8, 0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(pool.handle, bus, 9, 0), absl::StatusCode::kOutOfRange);         // larger than the allocation
  EXPECT_EQ(code(pool.handle, bus, 8, 4096), absl::StatusCode::kOutOfRange);      // past its end
  EXPECT_EQ(code(pool.handle, bus, 8, 100), absl::StatusCode::kInvalidArgument);  // unaligned
  // The good registration works after all that, and only once for the same memory.
  EXPECT_EQ(code(pool.handle, bus, 8, 0), absl::StatusCode::kOk);
  // The same memory again: the overlap check (or the driver, for a second
  // open of one handle) refuses it, and the first registration keeps working.
  auto again = c->RegisterGpuPool("q", GpuLayout(), 8, pool.handle, "0", 0);
  EXPECT_TRUE(again.status().code() == absl::StatusCode::kAlreadyExists ||
              again.status().code() == absl::StatusCode::kInvalidArgument)
      << again.status();
  auto st = c->Status();
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->pools_size(), 1);
  std::vector<uint32_t> blocks = {0, 1, 2};
  EXPECT_TRUE(c->Publish(st->pools(0).pool_id(), blocks).ok());
}

}  // namespace
}  // namespace kvferry::testing
