// The CUDA decoder reproduces the CPU reference's input for chunks the CPU
// encoder made (every dtype and size class, batched), rejects corrupted
// chunks, and reports its throughput. Needs a CUDA device (skips without one).
#include "kernels/cuda/codec_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/codec.h"
#include "tests/util/kv_like.h"

namespace kvferry::codec {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

class CudaCodec : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  }
};

std::vector<uint8_t> KvLike(DType d, size_t n, uint32_t channels, uint32_t seed) {
  return testing::KvLike(d, n, channels, seed, 1.2f);
}

struct Batch {
  std::vector<std::vector<uint8_t>> inputs, chunks;
};

// Decodes all chunks in one call; returns per-chunk status and outputs.
void DecodeOnGpu(const Batch& b, std::vector<int32_t>* status, std::vector<std::vector<uint8_t>>* outs) {
  uint64_t max_out = 1;
  for (auto& in : b.inputs) max_out = std::max<uint64_t>(max_out, in.size());
  auto dec = cuda::Decoder::Create(static_cast<int>(b.chunks.size()), max_out);
  ASSERT_TRUE(dec.ok()) << dec.status();
  std::vector<cuda::DeviceChunk> host(b.chunks.size());
  std::vector<void*> owned;
  for (size_t k = 0; k < b.chunks.size(); ++k) {
    void *in = nullptr, *out = nullptr;
    CUDA_OK(cudaMalloc(&in, std::max<size_t>(1, b.chunks[k].size())));
    CUDA_OK(cudaMalloc(&out, std::max<size_t>(1, b.inputs[k].size())));
    CUDA_OK(cudaMemcpy(in, b.chunks[k].data(), b.chunks[k].size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(out, 0xee, std::max<size_t>(1, b.inputs[k].size())));
    host[k] = {static_cast<uint8_t*>(in), b.chunks[k].size(), static_cast<uint8_t*>(out), b.inputs[k].size()};
    owned.push_back(in);
    owned.push_back(out);
  }
  cuda::DeviceChunk* dchunks = nullptr;
  int32_t* dstatus = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dchunks), host.size() * sizeof(host[0])));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dstatus), host.size() * 4));
  CUDA_OK(cudaMemcpy(dchunks, host.data(), host.size() * sizeof(host[0]), cudaMemcpyHostToDevice));
  CUDA_OK((*dec)->DecodeAsync(dchunks, static_cast<int>(host.size()), dstatus, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  status->resize(host.size());
  CUDA_OK(cudaMemcpy(status->data(), dstatus, host.size() * 4, cudaMemcpyDeviceToHost));
  outs->resize(host.size());
  for (size_t k = 0; k < host.size(); ++k) {
    (*outs)[k].resize(b.inputs[k].size());
    CUDA_OK(cudaMemcpy((*outs)[k].data(), host[k].out, b.inputs[k].size(), cudaMemcpyDeviceToHost));
  }
  for (void* p : owned) cudaFree(p);
  cudaFree(dchunks);
  cudaFree(dstatus);
}

std::vector<uint8_t> EncodeCpu(const EncodeOptions& o, const std::vector<uint8_t>& in) {
  std::vector<uint8_t> out(MaxEncodedBytes(in.size()));
  auto n = Encode(o, in.data(), in.size(), out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status();
  out.resize(n.ok() ? *n : 0);
  return out;
}

TEST_F(CudaCodec, DecodesCpuChunksOfEveryDtypeAndSizeInOneBatch) {
  Batch b;
  const DType all[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3, DType::kFP8E5M2, DType::kBytes};
  for (DType d : all) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{33}, kTileSymbols - 1, kTileSymbols, kTileSymbols + 1,
                     size_t{200001}}) {
      for (bool kv : {false, true}) {
        EncodeOptions o;
        o.dtype = d;
        if (kv) o.layout = {0, 8, 128};
        b.inputs.push_back(KvLike(d, n, 1024, static_cast<uint32_t>(n + kv)));
        b.chunks.push_back(EncodeCpu(o, b.inputs.back()));
      }
    }
  }
  // Random bytes (stored chunks) too.
  std::mt19937 rng(3);
  b.inputs.emplace_back(100000);
  for (auto& v : b.inputs.back()) v = static_cast<uint8_t>(rng());
  b.chunks.push_back(EncodeCpu(EncodeOptions{}, b.inputs.back()));
  std::vector<int32_t> status;
  std::vector<std::vector<uint8_t>> outs;
  DecodeOnGpu(b, &status, &outs);
  for (size_t k = 0; k < b.inputs.size(); ++k) {
    EXPECT_EQ(status[k], 0) << "chunk " << k << ": " << cuda::ToStatus(status[k]);
    EXPECT_TRUE(outs[k] == b.inputs[k]) << "chunk " << k << " differs";
  }
}

TEST_F(CudaCodec, CorruptedChunksFailNeverLie) {
  EncodeOptions o;
  o.layout = {0, 8, 128};
  auto in = KvLike(DType::kBF16, 3 * kTileSymbols + 100, 1024, 7);
  auto good = EncodeCpu(o, in);
  Batch b;
  std::mt19937 rng(11);
  for (int k = 0; k < 200; ++k) {
    auto bad = good;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    if (k % 10 == 0) bad.resize(rng() % bad.size());
    b.inputs.push_back(in);
    b.chunks.push_back(bad);
  }
  std::vector<int32_t> status;
  std::vector<std::vector<uint8_t>> outs;
  DecodeOnGpu(b, &status, &outs);
  int failed = 0;
  for (size_t k = 0; k < b.chunks.size(); ++k) {
    if (status[k] == 0) {
      EXPECT_TRUE(outs[k] == in) << "corrupted chunk " << k << " decoded OK to different bytes";
    } else {
      ++failed;
    }
  }
  EXPECT_GT(failed, 190);
}

TEST_F(CudaCodec, Throughput) {
  // bf16 KV-like data, CUDA events, median of 21 after warm-up.
  struct Case {
    const char* name;
    size_t chunk_bytes;
    int chunks;
  } cases[] = {{"1 x 4 MiB", 4 << 20, 1},
               {"16 x 4 MiB", 4 << 20, 16},
               {"1 x 64 MiB", 64 << 20, 1},
               {"64 x 4 MiB", 4 << 20, 64},
               {"1 x 256 MiB", 256 << 20, 1}};
  for (const auto& cs : cases) {
    auto in = KvLike(DType::kBF16, cs.chunk_bytes / 2, 1024, 5);
    EncodeOptions o;
    o.layout = {0, 8, 128};
    auto chunk = EncodeCpu(o, in);
    auto dec = cuda::Decoder::Create(cs.chunks, cs.chunk_bytes);
    ASSERT_TRUE(dec.ok());
    std::vector<cuda::DeviceChunk> host(cs.chunks);
    uint8_t *din = nullptr, *dout = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&din), chunk.size() * cs.chunks));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dout), cs.chunk_bytes * cs.chunks));
    for (int k = 0; k < cs.chunks; ++k) {
      CUDA_OK(cudaMemcpy(din + k * chunk.size(), chunk.data(), chunk.size(), cudaMemcpyHostToDevice));
      host[k] = {din + k * chunk.size(), chunk.size(), dout + k * cs.chunk_bytes, cs.chunk_bytes};
    }
    cuda::DeviceChunk* dchunks = nullptr;
    int32_t* dstatus = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dchunks), host.size() * sizeof(host[0])));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dstatus), host.size() * 4));
    CUDA_OK(cudaMemcpy(dchunks, host.data(), host.size() * sizeof(host[0]), cudaMemcpyHostToDevice));
    cudaEvent_t a, e;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&e));
    for (int i = 0; i < 3; ++i) CUDA_OK((*dec)->DecodeAsync(dchunks, cs.chunks, dstatus, nullptr));
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) {
      CUDA_OK(cudaEventRecord(a));
      CUDA_OK((*dec)->DecodeAsync(dchunks, cs.chunks, dstatus, nullptr));
      CUDA_OK(cudaEventRecord(e));
      CUDA_OK(cudaEventSynchronize(e));
      float t = 0;
      CUDA_OK(cudaEventElapsedTime(&t, a, e));
      ms.push_back(t);
    }
    std::vector<int32_t> st(cs.chunks);
    CUDA_OK(cudaMemcpy(st.data(), dstatus, st.size() * 4, cudaMemcpyDeviceToHost));
    for (int32_t v : st) EXPECT_EQ(v, 0);
    std::vector<uint8_t> back(cs.chunk_bytes);
    CUDA_OK(cudaMemcpy(back.data(), dout + (cs.chunks - 1) * cs.chunk_bytes, cs.chunk_bytes, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(back == in);
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("cuda decode bf16 %-12s ratio %.3f: median %.3f ms, %.1f GB/s of decoded bytes\n", cs.name,
                static_cast<double>(in.size()) / chunk.size(), med, cs.chunk_bytes * cs.chunks / 1e6 / med);
    cudaFree(din);
    cudaFree(dout);
    cudaFree(dchunks);
    cudaFree(dstatus);
  }
}

}  // namespace
}  // namespace kvferry::codec
