// CPU kvsum64 throughput (Google Benchmark): bazel run //tests:checksum_bench
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/checksum.h"

static void BM_Kvsum64(benchmark::State& state) {
  std::vector<uint8_t> buf(static_cast<size_t>(state.range(0)), 0x5a);
  for (auto _ : state) benchmark::DoNotOptimize(kvferry::Kvsum64(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Kvsum64)->Arg(4096)->Arg(1 << 20)->Arg(4 << 20)->Arg(64 << 20);

static void BM_Kvsum64Scalar(benchmark::State& state) {
  std::vector<uint8_t> buf(4096, 0x5a);
  for (auto _ : state) benchmark::DoNotOptimize(kvferry::Kvsum64BlockDigestScalar(buf.data(), buf.size(), 0));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 4096);
}
BENCHMARK(BM_Kvsum64Scalar);

BENCHMARK_MAIN();
