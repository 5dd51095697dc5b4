// transport/gpu with CUDA: IPC import, pinning, and ChunkWorker on the CUDA codec.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/codec_cuda.h"
#include "transport/gpu/gpu.h"

namespace kvferry::gpu {
namespace {

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("CUDA %s: %s", what, cudaGetErrorString(e)));
}

#define KVF_CUDA(call, what)                                  \
  do {                                                        \
    if (auto st_ = Cuda((call), what); !st_.ok()) return st_; \
  } while (0)

template <typename T>
cudaError_t DeviceAlloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <typename T>
cudaError_t HostAlloc(T** p, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// cuMemGetAddressRange through the runtime's driver entry point: the binary
// needs no link against libcuda.
using GetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

absl::StatusOr<GetAddressRangeFn> AddressRangeFn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  KVF_CUDA(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q),
           "driver entry point cuMemGetAddressRange");
  if (q != cudaDriverEntryPointSuccess || fn == nullptr) {
    return absl::InternalError("the CUDA driver has no cuMemGetAddressRange");
  }
  return reinterpret_cast<GetAddressRangeFn>(fn);
}

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<int> ResolveDevice(absl::string_view device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError("no CUDA device on this host");
  }
  if (device.empty()) return absl::InvalidArgumentError("GPU device is empty (PCI bus id or ordinal)");
  int ordinal = -1;
  if (absl::SimpleAtoi(device, &ordinal)) {
    if (ordinal < 0 || ordinal >= count) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GPU device %d out of range: this daemon sees %d device(s)", ordinal, count));
    }
    return ordinal;
  }
  if (device.size() > 32 || !std::all_of(device.begin(), device.end(), [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
      })) {
    return absl::InvalidArgumentError("GPU device must be a PCI bus id like 0000:65:00.0 or an ordinal");
  }
  const std::string id(device);
  if (cudaDeviceGetByPCIBusId(&ordinal, id.c_str()) != cudaSuccess) {
    cudaGetLastError();
    return absl::NotFoundError(absl::StrFormat("no CUDA device with PCI bus id %s on this host", id));
  }
  return ordinal;
}

absl::StatusOr<std::unique_ptr<IpcMapping>> IpcMapping::Open(absl::string_view handle, int device) {
  if (handle.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CUDA IPC handle must be %d bytes, got %d", kIpcHandleBytes, handle.size()));
  }
  KVF_CUDA(cudaSetDevice(device), "set device");
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  if (cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot open the CUDA IPC handle on device %d: %s (a handle from cudaIpcGetMemHandle in a live "
                        "process on this host?)",
                        device, cudaGetErrorString(e)));
  }
  auto m = std::unique_ptr<IpcMapping>(new IpcMapping());
  m->base_ = static_cast<uint8_t*>(p);
  m->device_ = device;
  auto fn = AddressRangeFn();
  if (!fn.ok()) return fn.status();  // ~IpcMapping closes the handle
  CUdeviceptr range_base = 0;
  size_t range_size = 0;
  if ((*fn)(&range_base, &range_size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
    return absl::InternalError("cannot query the size of the imported allocation");
  }
  const uint64_t skip = reinterpret_cast<CUdeviceptr>(p) - range_base;
  m->size_ = range_size > skip ? range_size - skip : 0;
  return m;
}

IpcMapping::~IpcMapping() {
  if (base_ != nullptr) {
    cudaSetDevice(device_);
    cudaIpcCloseMemHandle(base_);
  }
}

absl::StatusOr<std::unique_ptr<PinnedRange>> PinnedRange::Pin(void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) return absl::InvalidArgumentError("nothing to pin");
  KVF_CUDA(cudaHostRegister(data, bytes, cudaHostRegisterPortable), "pin staging memory");
  auto r = std::unique_ptr<PinnedRange>(new PinnedRange());
  r->data_ = data;
  return r;
}

PinnedRange::~PinnedRange() {
  if (data_ != nullptr) cudaHostUnregister(data_);
}

// Control block, mirrored in pinned host memory and on the device: the call's
// chunk descriptor, its results, and a block-pointer list.
struct Control {
  codec::cuda::EncodeChunk encode;
  codec::cuda::DeviceChunk decode;
  uint64_t size;
  int32_t status;
  uint64_t estimate;  // split-send
};

struct ChunkWorker::Impl {
  cudaStream_t stream = nullptr;
  cudaStream_t side = nullptr;  // split-send: the raw plane's copy to host, while the exponents are coded
  cudaEvent_t planned = nullptr, lead = nullptr;
  std::unique_ptr<codec::cuda::Encoder> encoder;
  std::unique_ptr<codec::cuda::Decoder> decoder;
  uint64_t max_chunk = 0;
  uint8_t* stage = nullptr;    // device: a gathered raw chunk, or a decoded one before verification
  uint8_t* encoded = nullptr;  // device: an encoded chunk
  Control* ctl = nullptr;      // device
  Control* host = nullptr;     // pinned host
  uint8_t** ptrs = nullptr;    // device block-pointer list
  uint8_t** host_ptrs = nullptr;
  uint64_t max_ptrs = 0;

  ~Impl() {
    for (void* p :
         {static_cast<void*>(stage), static_cast<void*>(encoded), static_cast<void*>(ctl), static_cast<void*>(ptrs)}) {
      if (p != nullptr) cudaFree(p);
    }
    if (host != nullptr) cudaFreeHost(host);
    if (host_ptrs != nullptr) cudaFreeHost(host_ptrs);
    for (cudaEvent_t e : {planned, lead}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    for (cudaStream_t s : {stream, side}) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }

  absl::Status Sync(const char* what) { return Cuda(cudaStreamSynchronize(stream), what); }

  // Enqueues copies between the ranges, in order, and one flat buffer:
  // gather (into `flat`) or scatter (from it). `kind` says where `flat` is.
  absl::Status CopyRanges(const std::vector<DeviceRange>& ranges, uint8_t* flat, bool gather, cudaMemcpyKind kind,
                          const char* what) {
    uint64_t pos = 0;
    for (const auto& r : ranges) {
      KVF_CUDA(gather ? cudaMemcpyAsync(flat + pos, r.data, r.len, kind, stream)
                      : cudaMemcpyAsync(r.data, flat + pos, r.len, kind, stream),
               what);
      pos += r.len;
    }
    return absl::OkStatus();
  }
};

ChunkWorker::ChunkWorker(std::unique_ptr<Impl> impl, int device) : impl_(std::move(impl)), device_(device) {}

uint64_t ChunkWorker::device_bytes() const {
  const Impl& w = *impl_;
  return w.max_chunk + codec::MaxSplitEncodedBytes(w.max_chunk) + sizeof(Control) + w.max_ptrs * sizeof(uint8_t*) +
         w.encoder->workspace_bytes() + w.decoder->workspace_bytes();
}
ChunkWorker::~ChunkWorker() {
  cudaSetDevice(device_);
  impl_.reset();
}

absl::StatusOr<std::unique_ptr<ChunkWorker>> ChunkWorker::Create(int device, uint64_t max_chunk_bytes) {
  if (max_chunk_bytes == 0) return absl::InvalidArgumentError("chunk size must be positive");
  KVF_CUDA(cudaSetDevice(device), "set device");
  auto impl = std::make_unique<Impl>();
  impl->max_chunk = max_chunk_bytes;
  impl->max_ptrs = max_chunk_bytes / 64 + 1;
  KVF_CUDA(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "stream");
  KVF_CUDA(cudaStreamCreateWithFlags(&impl->side, cudaStreamNonBlocking), "stream");
  KVF_CUDA(cudaEventCreateWithFlags(&impl->planned, cudaEventDisableTiming), "event");
  KVF_CUDA(cudaEventCreateWithFlags(&impl->lead, cudaEventDisableTiming), "event");
  KVF_CUDA(DeviceAlloc(&impl->stage, max_chunk_bytes), "allocate staging");
  KVF_CUDA(DeviceAlloc(&impl->encoded, codec::MaxSplitEncodedBytes(max_chunk_bytes)), "allocate staging");
  KVF_CUDA(DeviceAlloc(&impl->ctl, sizeof(Control)), "allocate control");
  KVF_CUDA(DeviceAlloc(&impl->ptrs, impl->max_ptrs * sizeof(uint8_t*)), "allocate block list");
  KVF_CUDA(HostAlloc(&impl->host, sizeof(Control)), "allocate pinned control");
  KVF_CUDA(HostAlloc(&impl->host_ptrs, impl->max_ptrs * sizeof(uint8_t*)), "allocate pinned block list");
  auto enc = codec::cuda::Encoder::Create(1, max_chunk_bytes);
  if (!enc.ok()) return enc.status();
  impl->encoder = std::move(enc).value();
  auto dec = codec::cuda::Decoder::Create(1, max_chunk_bytes);
  if (!dec.ok()) return dec.status();
  impl->decoder = std::move(dec).value();
  return std::unique_ptr<ChunkWorker>(new ChunkWorker(std::move(impl), device));
}

absl::Status ChunkWorker::ToHost(const std::vector<DeviceRange>& src, uint8_t* host) {
  KVF_CUDA(cudaSetDevice(device_), "set device");
  if (auto st = impl_->CopyRanges(src, host, true, cudaMemcpyDeviceToHost, "copy to host"); !st.ok()) return st;
  return impl_->Sync("copy to host");
}

absl::Status ChunkWorker::FromHost(const uint8_t* host, const std::vector<DeviceRange>& dst) {
  KVF_CUDA(cudaSetDevice(device_), "set device");
  auto st = impl_->CopyRanges(dst, const_cast<uint8_t*>(host), false, cudaMemcpyHostToDevice, "copy to device");
  if (!st.ok()) return st;
  return impl_->Sync("copy to device");
}

absl::StatusOr<uint64_t> ChunkWorker::Encode(const codec::EncodeOptions& options, const std::vector<DeviceRange>& src,
                                             uint64_t len, uint8_t* out) {
  Impl& w = *impl_;
  if (len == 0 || len > w.max_chunk) return absl::InvalidArgumentError("chunk size out of the worker's range");
  KVF_CUDA(cudaSetDevice(device_), "set device");
  codec::cuda::EncodeChunk c{};
  // The encoder reads one aligned buffer, or a list of equal blocks (a paged
  // KV cache) with no copy; anything else is gathered on the device first.
  const bool equal_blocks = src.size() > 1 && src.size() <= w.max_ptrs && src[0].len % 64 == 0 &&
                            src[0].len < (1ull << 32) && std::all_of(src.begin(), src.end(), [&](const DeviceRange& r) {
                              return r.len == src[0].len && Aligned16(r.data);
                            });
  if (src.size() == 1 && Aligned16(src[0].data)) {
    c.in.data = src[0].data;
  } else if (equal_blocks) {
    for (size_t i = 0; i < src.size(); ++i) w.host_ptrs[i] = src[i].data;
    KVF_CUDA(cudaMemcpyAsync(w.ptrs, w.host_ptrs, src.size() * sizeof(uint8_t*), cudaMemcpyHostToDevice, w.stream),
             "copy block list");
    c.in.blocks = w.ptrs;
    c.in.count = static_cast<uint32_t>(src.size());
    c.in.block_bytes = src[0].len;
  } else {
    if (auto st = w.CopyRanges(src, w.stage, true, cudaMemcpyDeviceToDevice, "gather"); !st.ok()) return st;
    c.in.data = w.stage;
  }
  c.bytes = len;
  c.dtype = static_cast<uint8_t>(options.dtype);
  c.channel_groups = options.channel_groups ? 1 : 0;
  c.tokens = options.layout.tokens;
  c.heads = options.layout.heads;
  c.head_dim = options.layout.head_dim;
  c.out = w.encoded;
  const bool split = static_cast<bool>(options.on_raw_plane);
  c.out_capacity = split ? codec::MaxSplitEncodedBytes(len) : codec::MaxEncodedBytes(len);
  c.allow_stored = split ? 0 : 1;
  w.host->encode = c;
  KVF_CUDA(cudaMemcpyAsync(&w.ctl->encode, &w.host->encode, sizeof(c), cudaMemcpyHostToDevice, w.stream),
           "copy chunk descriptor");
  codec::cuda::SplitPoint sp{w.planned, &w.ctl->estimate};
  KVF_CUDA(w.encoder->EncodeAsync(&w.ctl->encode, 1, &w.ctl->size, &w.ctl->status, w.stream, split ? &sp : nullptr),
           "encode launch");
  uint64_t lead = 0;  // raw plane bytes already on the host
  bool taken = false;
  if (split) {
    // While the exponents are coded on the stream, the side stream brings the
    // raw plane (final once tables are planned) and the estimate to the host.
    const auto info = codec::Info(options.dtype);
    if (!info.ok()) return info.status();
    const uint64_t n = len / info->bytes;
    const uint64_t raw_plane = (n + 7) / 8 * info->raw_bits;
    KVF_CUDA(cudaStreamWaitEvent(w.side, w.planned, 0), "wait for the split");
    KVF_CUDA(cudaMemcpyAsync(&w.host->estimate, &w.ctl->estimate, sizeof(uint64_t), cudaMemcpyDeviceToHost, w.side),
             "copy estimate");
    if (raw_plane > 0 && raw_plane < len) {
      KVF_CUDA(cudaMemcpyAsync(out + codec::kHeaderBytes, w.encoded + codec::kHeaderBytes, raw_plane,
                               cudaMemcpyDeviceToHost, w.side),
               "copy raw plane to host");
    }
    KVF_CUDA(cudaEventRecord(w.lead, w.side), "record");
    KVF_CUDA(cudaEventSynchronize(w.lead), "wait for the raw plane");
    // A zero estimate: the chunk fails or goes STORED; nothing to take.
    if (w.host->estimate != 0 && raw_plane > 0 && raw_plane < len) {
      lead = raw_plane;
      taken = options.on_raw_plane(raw_plane, w.host->estimate);
    }
  }
  KVF_CUDA(cudaMemcpyAsync(&w.host->size, &w.ctl->size, sizeof(uint64_t) + sizeof(int32_t), cudaMemcpyDeviceToHost,
                           w.stream),
           "copy encode result");
  if (auto st = w.Sync("encode"); !st.ok()) return st;
  if (w.host->status != 0) return codec::cuda::ToStatus(w.host->status);
  const uint64_t size = w.host->size;
  if (size > c.out_capacity || (lead > 0 && size < codec::kHeaderBytes + lead)) {
    return absl::InternalError("CUDA encoder reported an impossible size");
  }
  if (size >= len && !taken) return size;  // not smaller: the caller sends the raw bytes instead
  // The header, and what follows the raw plane when that is on the host already.
  const uint64_t head = lead > 0 ? codec::kHeaderBytes : size;
  KVF_CUDA(cudaMemcpyAsync(out, w.encoded, head, cudaMemcpyDeviceToHost, w.stream), "copy chunk to host");
  if (lead > 0) {
    const uint64_t rest = codec::kHeaderBytes + lead;
    KVF_CUDA(cudaMemcpyAsync(out + rest, w.encoded + rest, size - rest, cudaMemcpyDeviceToHost, w.stream),
             "copy chunk to host");
  }
  if (auto st = w.Sync("copy chunk to host"); !st.ok()) return st;
  return size;
}

absl::Status ChunkWorker::Decode(const uint8_t* in, uint64_t in_len, const std::vector<DeviceRange>& dst,
                                 uint64_t raw_len) {
  Impl& w = *impl_;
  // Header and directory on the CPU first: sizes decide what the GPU may touch.
  auto info = codec::Inspect(in, in_len);
  if (!info.ok()) return info.status();
  if (info->original_bytes != raw_len || raw_len > w.max_chunk) {
    return absl::DataLossError(
        absl::StrFormat("codec chunk decodes to %d bytes, expected %d", info->original_bytes, raw_len));
  }
  KVF_CUDA(cudaSetDevice(device_), "set device");
  KVF_CUDA(cudaMemcpyAsync(w.encoded, in, in_len, cudaMemcpyHostToDevice, w.stream), "copy chunk to device");
  codec::cuda::DeviceChunk c{};
  c.data = w.encoded;
  c.bytes = in_len;
  c.out.data = w.stage;
  c.out_capacity = raw_len;
  w.host->decode = c;
  KVF_CUDA(cudaMemcpyAsync(&w.ctl->decode, &w.host->decode, sizeof(c), cudaMemcpyHostToDevice, w.stream),
           "copy chunk descriptor");
  KVF_CUDA(w.decoder->DecodeAsync(&w.ctl->decode, 1, &w.ctl->status, w.stream), "decode launch");
  KVF_CUDA(cudaMemcpyAsync(&w.host->status, &w.ctl->status, sizeof(int32_t), cudaMemcpyDeviceToHost, w.stream),
           "copy decode result");
  if (auto st = w.Sync("decode"); !st.ok()) return st;
  if (w.host->status != 0) return codec::cuda::ToStatus(w.host->status);
  // Verified: now into the destination blocks.
  if (auto st = w.CopyRanges(dst, w.stage, false, cudaMemcpyDeviceToDevice, "scatter"); !st.ok()) return st;
  return w.Sync("scatter");
}

}  // namespace kvferry::gpu
