#!/usr/bin/env bash
# Builds self-contained binaries (libc/libm and, for CUDA, the driver's libcuda
# only) into out/static/, stripped, for GPU hosts that have no packages.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(//server:kvferryd //client:kvferry //tests:engine_test //tests:checksum_test)
if grep -q "HAS_CUDA = True" "$(bazel info output_base 2>/dev/null)/external/local_cuda/defs.bzl" 2>/dev/null ||
   [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  targets+=(//tests:checksum_cuda_test //tests:codec_cuda_test //tests:codec_gpu_bench //tests:gpu_engine_test
            //tests:gpu_pool_test)
fi
bazel build --config=static "${targets[@]}"
mkdir -p out/static
for t in "${targets[@]}"; do
  name="${t##*:}"
  path="bazel-bin/$(echo "${t#//}" | cut -d: -f1)/$name"
  install -m 0755 "$path" "out/static/$name"
  strip "out/static/$name"
done
ls -la out/static
