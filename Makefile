# kvferry: the two Quick start commands are `make demo` and `make test`.
# Both install missing Debian packages first (tools/install_deps.sh), then build.

BAZEL ?= bazel
FUZZ_SECONDS ?= 15

.PHONY: all deps build demo test fuzz bench static static-ucx-cuda format clean

all: build

deps:
	@tools/install_deps.sh

build: deps
	$(BAZEL) build //...

# Two daemons on loopback, host memory: fill, publish, pull, verify, report.
demo: build
	bazel-bin/client/kvferry demo --kvferryd=bazel-bin/server/kvferryd

# Unit + integration tests (Bazel), then bounded libFuzzer runs; ends with
# one line "N passed, N failed" counting test targets.
test: deps
	@tools/run_tests.sh $(FUZZ_SECONDS)

# Longer fuzzing: make fuzz FUZZ_SECONDS=600
fuzz: deps
	@tools/fuzz.sh $(FUZZ_SECONDS)

# Host-to-host throughput through two daemons vs ucx_perftest.
bench: build
	bazel-bin/client/kvferry bench --kvferryd=bazel-bin/server/kvferryd --json=bench.json --plot=bench.png

# Binaries that need only libc (and the NVIDIA driver), in out/static/.
static: deps
	tools/build_static.sh

# The same with UCX shared, and PyPI's UCX with CUDA transports beside them in
# out/static-ucx-cuda/ucx/ (GPU pools straight from GPU memory: --gpu_direct).
static-ucx-cuda: deps
	tools/build_static.sh ucx-cuda

format:
	find . -path ./bazel-\* -prune -o \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) -print | xargs clang-format -i

clean:
	$(BAZEL) clean
	rm -rf out
