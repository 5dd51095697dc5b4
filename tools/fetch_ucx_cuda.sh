#!/usr/bin/env bash
# Puts a UCX with CUDA transports (cuda_copy, cuda_ipc) into DIR: the shared
# libraries of PyPI's libucx-cu12 wheel (UCX 1.22, built by the RAPIDS
# project), in the wheel's own layout, which its run paths expect:
#   DIR/libucx/lib/libucp.so.0 ...   (LD_LIBRARY_PATH)
#   DIR/libucx/lib/ucx/*.so.0        (modules: cuda, cma; found beside libuct)
#   DIR/libucx_cu12.libs/            (the CUDA runtime its memory hooks use)
#   DIR/libucx/bin/ucx_info          (ucx_info -d lists the transports)
# Needs pip and PyPI; at run time the NVIDIA driver's libcuda and libnvidia-ml.
#
#   tools/fetch_ucx_cuda.sh DIR
set -euo pipefail
dir="${1:?usage: tools/fetch_ucx_cuda.sh DIR}"
version=1.22.0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetching libucx-cu12==$version from PyPI"
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "libucx-cu12==$version"
wheel="$(ls "$tmp"/libucx_cu12-*.whl)"
mkdir -p "$dir"
python3 - "$wheel" "$dir" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        # Each library once, under its soname (the wheel stores copies, not links).
        keep = (n.startswith("libucx/lib/") and n.endswith(".so.0")) or n.startswith("libucx_cu12.libs/") \
            or n in ("libucx/bin/ucx_info", "libucx/UCX_WHEEL_VERSION.txt")
        if keep:
            z.extract(n, out)
PY
chmod +x "$dir/libucx/bin/ucx_info"
echo "UCX $(cat "$dir/libucx/UCX_WHEEL_VERSION.txt") with CUDA transports in $dir/libucx/lib"
