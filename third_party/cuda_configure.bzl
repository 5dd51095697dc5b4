"""Repository rule: detects the CUDA toolkit and the static Abseil archives.

Generates @local_cuda with:
  defs.bzl: HAS_CUDA, NVCC, STATIC_ABSL_LIBS
  BUILD:    :cuda_headers and :cudart (empty when CUDA is absent)
Set KVFERRY_NO_CUDA=1 to force a CPU-only build; CUDA_PATH to point elsewhere.
"""

def _impl(ctx):
    cuda_path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(cuda_path + "/bin/nvcc")
    has_cuda = nvcc.exists and ctx.os.environ.get("KVFERRY_NO_CUDA", "0") != "1"

    libdir = ctx.path("/usr/lib/x86_64-linux-gnu")
    absl = []
    if libdir.exists:
        for f in libdir.readdir():
            if f.basename.startswith("libabsl_") and f.basename.endswith(".a"):
                absl.append(f.basename)
    absl = sorted(absl)

    ctx.file("defs.bzl", "HAS_CUDA = %s\nNVCC = %r\nCUDA_PATH = %r\nSTATIC_ABSL_LIBS = %r\n" % (
        has_cuda,
        str(nvcc) if has_cuda else "",
        cuda_path,
        absl,
    ))
    if has_cuda:
        ctx.symlink(cuda_path + "/include", "include")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "include/**/*.inl"]),
    includes = ["include"],
)
cc_library(
    name = "cudart",
    linkopts = ["-L{cuda}/lib64", "-l:libcudart_static.a", "-ldl", "-lrt", "-pthread"],
    deps = [":cuda_headers"],
)
""".format(cuda = cuda_path)
    else:
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
"""
    ctx.file("BUILD", build)

cuda_configure = repository_rule(
    implementation = _impl,
    environ = ["CUDA_PATH", "KVFERRY_NO_CUDA"],
    local = True,
)
