// `kvferry codec --device=cuda` on top of kernels/cuda/codec_cuda.h.
#include "client/cli/codec_gpu.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/codec_cuda.h"

namespace kvferry::cli {
namespace {

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}

// Device buffers freed on scope exit.
class DeviceMem {
 public:
  ~DeviceMem() {
    for (void* p : ptrs_) cudaFree(p);
  }
  template <typename T>
  absl::StatusOr<T*> Alloc(size_t bytes) {
    void* p = nullptr;
    if (auto st = Cuda(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "malloc"); !st.ok()) return st;
    ptrs_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  std::vector<void*> ptrs_;
};

absl::Status HaveDevice() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    return absl::UnavailableError("--device=cuda: no CUDA device on this host; use --device=cpu");
  }
  return absl::OkStatus();
}

// Runs `call` once, then `reps` times between CUDA events; median seconds.
template <typename Fn>
absl::Status Time(Fn call, int reps, double* seconds) {
  if (seconds == nullptr) return absl::OkStatus();
  cudaEvent_t a, b;
  if (auto st = Cuda(cudaEventCreate(&a), "event"); !st.ok()) return st;
  if (auto st = Cuda(cudaEventCreate(&b), "event"); !st.ok()) return st;
  std::vector<float> ms;
  for (int i = 0; i < std::max(1, reps); ++i) {
    cudaEventRecord(a);
    call();
    cudaEventRecord(b);
    if (auto st = Cuda(cudaEventSynchronize(b), "timing"); !st.ok()) return st;
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  *seconds = ms[ms.size() / 2] / 1e3;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<size_t> GpuEncode(const codec::EncodeOptions& o, const uint8_t* in, size_t n, uint8_t* out, size_t cap,
                                 double* seconds, int reps) {
  if (auto st = HaveDevice(); !st.ok()) return st;
  if (cap < codec::MaxEncodedBytes(n)) return absl::InvalidArgumentError("output capacity too small");
  DeviceMem mem;
  auto din = mem.Alloc<uint8_t>(n);
  auto dout = mem.Alloc<uint8_t>(codec::MaxEncodedBytes(n));
  auto dchunk = mem.Alloc<codec::cuda::EncodeChunk>(sizeof(codec::cuda::EncodeChunk));
  auto dsize = mem.Alloc<uint64_t>(8);
  auto dstatus = mem.Alloc<int32_t>(4);
  for (const absl::Status& st : {din.status(), dout.status(), dchunk.status(), dsize.status(), dstatus.status()}) {
    if (!st.ok()) return st;
  }
  auto enc = codec::cuda::Encoder::Create(1, std::max<size_t>(n, 1));
  if (!enc.ok()) return enc.status();
  codec::cuda::EncodeChunk c;
  c.in.data = *din;
  c.bytes = n;
  c.dtype = static_cast<uint8_t>(o.dtype);
  c.channel_groups = o.channel_groups;
  c.tokens = o.layout.tokens;
  c.heads = o.layout.heads;
  c.head_dim = o.layout.head_dim;
  c.out = *dout;
  c.out_capacity = codec::MaxEncodedBytes(n);
  if (auto st = Cuda(cudaMemcpy(*din, in, n, cudaMemcpyHostToDevice), "copy"); !st.ok()) return st;
  if (auto st = Cuda(cudaMemcpy(*dchunk, &c, sizeof(c), cudaMemcpyHostToDevice), "copy"); !st.ok()) return st;
  auto call = [&] {
    (void)(*enc)->EncodeAsync(*dchunk, 1, *dsize, *dstatus, nullptr, nullptr, c.channel_groups != 0, false, c.dtype);
  };
  call();
  if (auto st = Cuda(cudaDeviceSynchronize(), "encode"); !st.ok()) return st;
  int32_t status = 0;
  uint64_t size = 0;
  if (auto st = Cuda(cudaMemcpy(&status, *dstatus, 4, cudaMemcpyDeviceToHost), "copy"); !st.ok()) return st;
  if (status != 0) return codec::cuda::ToStatus(status);
  if (auto st = Cuda(cudaMemcpy(&size, *dsize, 8, cudaMemcpyDeviceToHost), "copy"); !st.ok()) return st;
  if (auto st = Cuda(cudaMemcpy(out, *dout, size, cudaMemcpyDeviceToHost), "copy"); !st.ok()) return st;
  if (auto st = Time(call, reps, seconds); !st.ok()) return st;
  return static_cast<size_t>(size);
}

absl::StatusOr<size_t> GpuDecode(const uint8_t* in, size_t n, uint8_t* out, size_t cap, double* seconds, int reps) {
  if (auto st = HaveDevice(); !st.ok()) return st;
  auto info = codec::Inspect(in, n);  // header and directory, checked on the CPU first
  if (!info.ok()) return info.status();
  if (info->original_bytes > cap) return absl::InvalidArgumentError("output capacity too small");
  DeviceMem mem;
  auto din = mem.Alloc<uint8_t>(n);
  auto dout = mem.Alloc<uint8_t>(info->original_bytes);
  auto dchunk = mem.Alloc<codec::cuda::DeviceChunk>(sizeof(codec::cuda::DeviceChunk));
  auto dstatus = mem.Alloc<int32_t>(4);
  for (const absl::Status& st : {din.status(), dout.status(), dchunk.status(), dstatus.status()}) {
    if (!st.ok()) return st;
  }
  auto dec = codec::cuda::Decoder::Create(1, std::max<uint64_t>(info->original_bytes, 1));
  if (!dec.ok()) return dec.status();
  codec::cuda::DeviceChunk c;
  c.data = *din;
  c.bytes = n;
  c.out.data = *dout;
  c.out_capacity = info->original_bytes;
  if (auto st = Cuda(cudaMemcpy(*din, in, n, cudaMemcpyHostToDevice), "copy"); !st.ok()) return st;
  if (auto st = Cuda(cudaMemcpy(*dchunk, &c, sizeof(c), cudaMemcpyHostToDevice), "copy"); !st.ok()) return st;
  auto call = [&] { (void)(*dec)->DecodeAsync(*dchunk, 1, *dstatus, nullptr); };
  call();
  if (auto st = Cuda(cudaDeviceSynchronize(), "decode"); !st.ok()) return st;
  int32_t status = 0;
  if (auto st = Cuda(cudaMemcpy(&status, *dstatus, 4, cudaMemcpyDeviceToHost), "copy"); !st.ok()) return st;
  if (status != 0) return codec::cuda::ToStatus(status);
  if (auto st = Cuda(cudaMemcpy(out, *dout, info->original_bytes, cudaMemcpyDeviceToHost), "copy"); !st.ok()) {
    return st;
  }
  if (auto st = Time(call, reps, seconds); !st.ok()) return st;
  return static_cast<size_t>(info->original_bytes);
}

absl::StatusOr<std::unique_ptr<GpuBuffer>> GpuBuffer::Create(int device, size_t bytes) {
  if (auto st = HaveDevice(); !st.ok()) return st;
  if (auto st = Cuda(cudaSetDevice(device), "set device"); !st.ok()) return st;
  auto b = std::unique_ptr<GpuBuffer>(new GpuBuffer());
  b->device_ = device;
  b->bytes_ = bytes;
  void* p = nullptr;
  if (auto st = Cuda(cudaMalloc(&p, bytes), "malloc"); !st.ok()) return st;
  b->data_ = static_cast<uint8_t*>(p);
  cudaIpcMemHandle_t h;
  if (auto st = Cuda(cudaIpcGetMemHandle(&h, p), "IPC handle"); !st.ok()) return st;
  b->handle_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  char bus[32] = {0};
  if (auto st = Cuda(cudaDeviceGetPCIBusId(bus, sizeof(bus), device), "PCI bus id"); !st.ok()) return st;
  b->bus_id_ = bus;
  return b;
}

GpuBuffer::~GpuBuffer() {
  if (data_ != nullptr) {
    cudaSetDevice(device_);
    cudaFree(data_);
  }
}

absl::Status GpuBuffer::CopyIn(const uint8_t* host, size_t n) {
  return Cuda(cudaMemcpy(data_, host, std::min(n, bytes_), cudaMemcpyHostToDevice), "copy");
}
absl::Status GpuBuffer::CopyOut(uint8_t* host, size_t n) const {
  return Cuda(cudaMemcpy(host, data_, std::min(n, bytes_), cudaMemcpyDeviceToHost), "copy");
}
absl::Status GpuBuffer::Zero() { return Cuda(cudaMemset(data_, 0, bytes_), "memset"); }

}  // namespace kvferry::cli
