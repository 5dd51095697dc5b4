#!/usr/bin/env bash
# Runs on a GPU host from the repo root with the binaries of tools/build_static.sh
# in out/static/ (or $BIN): checks CUDA output against the CPU reference, the
# GPU-pool data path, the demo and benchmarks, and prints what it measured.
#   tools/gpu_check.sh [RESULT_DIR] [all|codec|pipeline|split|direct]
# split: GPU pools, compressed, split-send on vs off side by side (alternating
# runs), over TCP loopback and, where `ip` and `tc` exist, a 25 Gbit/s link.
# direct: GPU pools straight from GPU memory (--gpu_direct) with the binaries
# of `tools/build_static.sh ucx-cuda` ($DIRECT_BIN, default
# out/static-ucx-cuda, with their ucx/), tests then a bench alternating with
# the staged binaries of $BIN. Not part of `all`.
set -uo pipefail
B="$(cd "${BIN:-out/static}" && pwd)"
R="${1:-out/gpu}"
WHAT="${2:-all}"
mkdir -p "$R"
R="$(cd "$R" && pwd)"
status=0
step() { echo; echo "=== $*"; }
run() { "$@" || { echo "FAILED: $*"; status=1; }; }
sanitize() { if command -v compute-sanitizer >/dev/null; then run compute-sanitizer --error-exitcode=1 "$@"; fi; }

step "host"
date -u +%Y-%m-%dT%H:%MZ
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || status=1
nproc
export UCX_TLS="${UCX_TLS:-tcp,self}" UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" UCX_WARN_UNUSED_ENV_VARS=n

if [ "$WHAT" = all ] || [ "$WHAT" = codec ]; then
  step "kvsum64: CPU reference tests"
  run $B/checksum_test
  step "kvsum64: CUDA equals CPU, byte for byte; GPU throughput"
  run $B/checksum_cuda_test --gtest_also_run_disabled_tests
  sanitize $B/checksum_cuda_test --gtest_filter='*Matches*'
  step "codec: CUDA encoder and decoder vs CPU reference"
  run $B/codec_cuda_test
  sanitize $B/codec_cuda_test
  step "codec: GPU benchmark on real KV (KV_DIR=${KV_DIR:-kv}), checked against the CPU"
  run $B/codec_gpu_bench --kv_dir="${KV_DIR:-kv}"
fi

if [ "$WHAT" = all ] || [ "$WHAT" = pipeline ]; then
  step "pipeline engine over UCX (static binary)"
  run $B/engine_test
  step "pipeline engine on GPU memory (loopback and UCX), then under compute-sanitizer"
  run $B/gpu_engine_test
  sanitize $B/gpu_engine_test --gtest_filter='*loopback'
  step "GPU pools: two kvferryd processes importing CUDA IPC handles"
  work="$(mktemp -d)"  # the test starts server/kvferryd from its working directory
  mkdir -p "$work/server" && cp "$B/kvferryd" "$work/server/kvferryd"
  (cd "$work" && TEST_TMPDIR="$work" "$B/gpu_pool_test") || { echo "FAILED: gpu_pool_test"; status=1; }
  if command -v compute-sanitizer >/dev/null; then
    step "GPU pools under compute-sanitizer, daemons included (--target-processes all)"
    (cd "$work" && TEST_TMPDIR="$work" compute-sanitizer --target-processes all --error-exitcode=1 \
      "$B/gpu_pool_test" --gtest_filter='*OneGpu*:*HostAndGpu*') || { echo "FAILED: sanitized gpu_pool_test"; status=1; }
  fi
  step "demo"
  run $B/kvferry demo --kvferryd=$B/kvferryd
  step "bench: host and GPU pools, raw / compressed / adaptive (no ucx_perftest on this host)"
  run $B/kvferry bench --kvferryd=$B/kvferryd --memory=host,gpu --sizes=${BENCH_SIZES:-64M,256M,1G} \
    --perftest= --rounds=1 --kv_dir="${KV_DIR:-kv}" --json="$R/bench.json"
fi
if [ "$WHAT" = all ] || [ "$WHAT" = split ]; then
  links=("")
  if command -v tc >/dev/null && command -v ip >/dev/null; then links+=(25gbit); fi
  for link in "${links[@]}"; do
    for round in 1 2; do
      for split in false true; do
        step "split-send $split, GPU pools, ${link:-TCP loopback}, round $round"
        run $B/kvferry bench --kvferryd=$B/kvferryd --memory=gpu --modes=raw,compressed --sizes=${SPLIT_SIZES:-64M,256M} \
          --perftest= --rounds=1 --kv_dir="${KV_DIR:-kv}" ${link:+--link=$link} --daemon_flags=--split_send=$split \
          --json="$R/split-${link:-loopback}-$split-$round.json"
      done
    done
  done
fi
if [ "$WHAT" = direct ]; then
  D="$(cd "${DIRECT_BIN:-out/static-ucx-cuda}" && pwd)"
  cuda_tls=tcp,cuda_copy,cuda_ipc,self,sm
  direct() { LD_LIBRARY_PATH="$D/ucx/libucx/lib" UCX_TLS=$cuda_tls "$@"; }
  step "direct: gpu_engine_test, the UCX cases must run direct (UCX_TLS=$cuda_tls)"
  direct env KVFERRY_EXPECT_GPU_DIRECT=1 $D/gpu_engine_test || { echo "FAILED: direct gpu_engine_test"; status=1; }
  if command -v compute-sanitizer >/dev/null; then
    step "direct: the same under compute-sanitizer (memory errors; UCX's own CUDA API probes are not reported)"
    direct compute-sanitizer --report-api-errors no --error-exitcode=1 $D/gpu_engine_test --gtest_filter='*ucx' ||
      { echo "FAILED: sanitized direct gpu_engine_test"; status=1; }
  fi
  step "direct: gpu_pool_test, two kvferryd processes with --gpu_direct"
  work="$(mktemp -d)"
  mkdir -p "$work/server" && cp "$D/kvferryd" "$work/server/kvferryd"
  (cd "$work" && direct env KVFERRY_TEST_DAEMON_FLAGS=--gpu_direct KVFERRY_EXPECT_GPU_DIRECT=1 TEST_TMPDIR="$work" \
    $D/gpu_pool_test) || { echo "FAILED: direct gpu_pool_test"; status=1; }
  for round in 1 2; do
    step "direct: bench GPU pools, direct, round $round"
    direct $D/kvferry bench --kvferryd=$D/kvferryd --memory=gpu --sizes=${DIRECT_SIZES:-64M,256M,1G} --perftest= \
      --rounds=1 --kv_dir="${KV_DIR:-kv}" --daemon_flags=--gpu_direct=true --json="$R/direct-$round.json" || status=1
    step "direct: bench GPU pools, staged ($B, UCX_TLS=$UCX_TLS), round $round"
    run $B/kvferry bench --kvferryd=$B/kvferryd --memory=gpu --sizes=${DIRECT_SIZES:-64M,256M,1G} --perftest= \
      --rounds=1 --kv_dir="${KV_DIR:-kv}" --json="$R/staged-$round.json"
  done
fi
echo
[ $status -eq 0 ] && echo "gpu_check: all passed" || echo "gpu_check: FAILURES"
exit $status
