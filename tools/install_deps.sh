#!/usr/bin/env bash
# Installs what kvferry needs to build and test on Debian 12 (apt only).
# Idempotent: installs only packages that are missing; prints nothing else
# when everything is present.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java          # Bazel 4.2.3 + rules_java, offline
  g++ make
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libucx-dev ucx-utils libnuma-dev          # UCX data plane, ucx_perftest
  libspdlog-dev libfmt-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libssl-dev zlib1g-dev libre2-dev libc-ares-dev   # static link of gRPC
  clang libclang-rt-14-dev                  # libFuzzer
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; then
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
