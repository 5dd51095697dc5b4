"""cuda_library: compiles .cu files with nvcc (sm_90 SASS + compute_90 PTX) into a
static archive wrapped by a cc_library. Only used when @local_cuda found nvcc."""

load("@local_cuda//:defs.bzl", "NVCC")

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + [h for h in native.glob(["**/*.h", "**/*.cuh"]) if h not in hdrs] + hdrs,
            outs = [obj],
            # A private TMPDIR: nvcc names its temporaries after its PID, which
            # is the same in every sandbox, so two concurrent compiles sharing
            # /tmp could delete each other's files.
            cmd = "t=$$(mktemp -d) && " +
                  ("TMPDIR=$$t %s -c -std=c++17 -O3 -Xcompiler -fPIC " % NVCC) +
                  "-gencode=arch=compute_90,code=sm_90 " +
                  "-gencode=arch=compute_90,code=compute_90 " +
                  "-I. -I$(GENDIR) $(location %s) -o $@; " % src +
                  "r=$$?; rm -rf $$t; exit $$r",
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        linkstatic = True,
        **kwargs
    )
