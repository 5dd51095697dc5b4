#!/usr/bin/env bash
# Builds self-contained binaries (libc/libm and, for CUDA, the driver's libcuda
# only) into out/static/, stripped, for GPU hosts that have no packages.
#
#   tools/build_static.sh            out/static/
#   tools/build_static.sh ucx-cuda   out/static-ucx-cuda/: the same, except that
#       UCX is linked shared, and a UCX with CUDA transports (PyPI's
#       libucx-cu12, tools/fetch_ucx_cuda.sh) is put beside them in ucx/. Run
#       them with LD_LIBRARY_PATH=out/static-ucx-cuda/ucx/libucx/lib and
#       UCX_TLS allowing cuda_copy,cuda_ipc: GPU pools' chunks then go on the
#       wire from device memory (kvferryd --gpu_direct).
set -euo pipefail
cd "$(dirname "$0")/.."
variant="${1:-}"
config=static
outdir=out/static
if [ "$variant" = ucx-cuda ]; then
  config=static-ucx-cuda
  outdir=out/static-ucx-cuda
elif [ -n "$variant" ]; then
  echo "usage: tools/build_static.sh [ucx-cuda]" >&2
  exit 2
fi
targets=(//server:kvferryd //client:kvferry //tests:engine_test //tests:checksum_test)
if grep -q "HAS_CUDA = True" "$(bazel info output_base 2>/dev/null)/external/local_cuda/defs.bzl" 2>/dev/null ||
   [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  targets+=(//tests:checksum_cuda_test //tests:codec_cuda_test //tests:codec_gpu_bench //tests:gpu_engine_test
            //tests:gpu_pool_test)
fi
bazel build --config=$config "${targets[@]}"
mkdir -p "$outdir"
for t in "${targets[@]}"; do
  name="${t##*:}"
  path="bazel-bin/$(echo "${t#//}" | cut -d: -f1)/$name"
  install -m 0755 "$path" "$outdir/$name"
  strip "$outdir/$name"
done
[ "$variant" = ucx-cuda ] && tools/fetch_ucx_cuda.sh "$outdir/ucx"
ls -la "$outdir"
