#!/usr/bin/env bash
# Runs on a GPU host from the repo root with the binaries of tools/build_static.sh
# in out/static/: checks CUDA output against the CPU reference, runs the UCX
# tests, the demo and a short benchmark, and prints what it measured.
#   tools/gpu_check.sh [RESULT_DIR]
set -uo pipefail
B=out/static
R="${1:-out/gpu}"
mkdir -p "$R"
status=0
step() { echo; echo "=== $*"; }
run() { "$@" || { echo "FAILED: $*"; status=1; }; }

step "host"
date -u +%Y-%m-%dT%H:%MZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || status=1
nproc
export UCX_TLS="${UCX_TLS:-tcp}" UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" UCX_WARN_UNUSED_ENV_VARS=n

step "kvsum64: CPU reference tests"
run $B/checksum_test
step "kvsum64: CUDA equals CPU, byte for byte; GPU throughput"
run $B/checksum_cuda_test --gtest_also_run_disabled_tests
if command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck"
  run compute-sanitizer --error-exitcode=1 $B/checksum_cuda_test --gtest_filter='*Matches*'
fi
step "codec: CUDA encoder and decoder vs CPU reference"
run $B/codec_cuda_test
if command -v compute-sanitizer >/dev/null; then
  run compute-sanitizer --error-exitcode=1 $B/codec_cuda_test
fi
step "codec: GPU benchmark on real KV (KV_DIR=${KV_DIR:-kv}), checked against the CPU"
run $B/codec_gpu_bench --kv_dir="${KV_DIR:-kv}"
step "pipeline engine over UCX (static binary)"
run $B/engine_test
step "demo"
run $B/kvferry demo --kvferryd=$B/kvferryd
step "bench (no ucx_perftest on this host)"
run $B/kvferry bench --kvferryd=$B/kvferryd --sizes=1M,16M,64M,256M,1G --perftest= --json="$R/bench.json"
echo
[ $status -eq 0 ] && echo "gpu_check: all passed" || echo "gpu_check: FAILURES"
exit $status
