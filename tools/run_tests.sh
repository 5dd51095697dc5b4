#!/usr/bin/env bash
# Runs every test target and prints one summary line: "N passed, N failed".
# Test targets: each Bazel cc_test, and each libFuzzer target run for a bounded
# time (tools/fuzz.sh). With SANITIZE=1 (CI), the Bazel tests run again under
# --config=asan (ASan+UBSan+LSan) and --config=tsan, each counted separately.
set -uo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds="${1:-15}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

passed=0
failed=0
bazel_tests() {
  bazel test --config=ci "$@" //tests/... 2>&1 | tee "$log"
  passed=$((passed + $(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")))
  failed=$((failed + $(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE)' "$log")))
  if ! grep -qE 'Executed [0-9]+ out of' "$log"; then
    echo "bazel test $* did not run (build failure?)"
    failed=$((failed + 1))
  fi
}
bazel_tests
if [ "${SANITIZE:-0}" = "1" ]; then
  bazel_tests --config=asan
  bazel_tests --config=tsan
fi

fuzz_log="$(mktemp)"
tools/fuzz.sh "$fuzz_seconds" 2>&1 | tee "$fuzz_log"
passed=$((passed + $(grep -c '^fuzz .* PASSED' "$fuzz_log")))
failed=$((failed + $(grep -c '^fuzz .* FAILED' "$fuzz_log")))
rm -f "$fuzz_log"

echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
