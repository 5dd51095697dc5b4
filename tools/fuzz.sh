#!/usr/bin/env bash
# Builds the fuzz targets under clang + libFuzzer with ASan/UBSan and runs each
# for a bounded time on its seed corpus. Prints "fuzz <target> PASSED|FAILED".
#   tools/fuzz.sh [SECONDS_PER_TARGET]
set -uo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-15}"
out=out/fuzz
mkdir -p "$out"

CXX="${FUZZ_CXX:-clang++}"
FLAGS=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I. -DSPDLOG_HEADER_ONLY -DSPDLOG_FMT_EXTERNAL -DFMT_HEADER_ONLY)
LIBS=($(pkg-config --libs absl_status absl_statusor absl_synchronization absl_str_format absl_flat_hash_map \
        absl_time absl_strings) -pthread)

declare -A SOURCES=(
  [chunk_header]="tests/fuzz/chunk_header_fuzz.cc transport/chunk.cc"
  [ucx_address]="tests/fuzz/ucx_address_fuzz.cc transport/ucx/address.cc kernels/cpu/checksum.cc"
  [codec_decode]="tests/fuzz/codec_decode_fuzz.cc kernels/cpu/codec.cc kernels/cpu/checksum.cc"
  [codec_roundtrip]="tests/fuzz/codec_roundtrip_fuzz.cc kernels/cpu/codec.cc kernels/cpu/checksum.cc"
  [chunk_receive]="tests/fuzz/chunk_receive_fuzz.cc transport/chunk.cc transport/pipeline/engine.cc
                   transport/pipeline/segments.cc transport/loopback/loopback_transport.cc
                   kernels/cpu/checksum.cc kernels/cpu/codec.cc common/log.cc transport/gpu/gpu_none.cc"
)

status=0
for target in chunk_header ucx_address chunk_receive codec_decode codec_roundtrip; do
  bin="$out/${target}_fuzz"
  # shellcheck disable=SC2086
  if ! "$CXX" "${FLAGS[@]}" ${SOURCES[$target]} "${LIBS[@]}" -o "$bin" 2>"$out/$target.build.log"; then
    echo "fuzz $target FAILED (build; see $out/$target.build.log)"
    status=1
    continue
  fi
  work="$out/corpus/$target"
  mkdir -p "$work"
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
       "$work" "tests/fuzz/corpus/$target" >"$out/$target.log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$target.log" | grep -o '[0-9]*$')
    echo "fuzz $target PASSED (${runs:-?} executions in ${seconds} s)"
  else
    echo "fuzz $target FAILED (see $out/$target.log)"
    tail -30 "$out/$target.log"
    status=1
  fi
done
exit $status
