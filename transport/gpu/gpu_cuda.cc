// transport/gpu with CUDA: IPC import, pinning, and ChunkWorker on the CUDA codec.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/checksum_cuda.h"
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
  uint64_t sum;       // Checksum
  uint8_t header[codec::kHeaderBytes];  // DecodeFrom
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

  // CopyRanges, then waits for it.
  absl::Status CopyRangesAndSync(const std::vector<DeviceRange>& ranges, uint8_t* flat, bool gather,
                                 cudaMemcpyKind kind, const char* what) {
    if (auto st = CopyRanges(ranges, flat, gather, kind, what); !st.ok()) return st;
    return Sync(what);
  }

  // Fills the encoder's view of the input and options. The encoder reads one
  // aligned buffer, or a list of equal blocks (a paged KV cache) with no copy;
  // anything else is gathered on the device first.
  absl::Status EncodeInput(const codec::EncodeOptions& options, const std::vector<DeviceRange>& src, uint64_t len,
                           codec::cuda::EncodeChunk* c) {
    if (len == 0 || len > max_chunk) return absl::InvalidArgumentError("chunk size out of the worker's range");
    const bool equal_blocks = src.size() > 1 && src.size() <= max_ptrs && src[0].len % 64 == 0 &&
                              src[0].len < (1ull << 32) && std::all_of(src.begin(), src.end(), [&](const DeviceRange& r) {
                                return r.len == src[0].len && Aligned16(r.data);
                              });
    if (src.size() == 1 && Aligned16(src[0].data)) {
      c->in.data = src[0].data;
    } else if (equal_blocks) {
      for (size_t i = 0; i < src.size(); ++i) host_ptrs[i] = src[i].data;
      KVF_CUDA(cudaMemcpyAsync(ptrs, host_ptrs, src.size() * sizeof(uint8_t*), cudaMemcpyHostToDevice, stream),
               "copy block list");
      c->in.blocks = ptrs;
      c->in.count = static_cast<uint32_t>(src.size());
      c->in.block_bytes = src[0].len;
    } else {
      if (auto st = CopyRanges(src, stage, true, cudaMemcpyDeviceToDevice, "gather"); !st.ok()) return st;
      c->in.data = stage;
    }
    c->bytes = len;
    c->dtype = static_cast<uint8_t>(options.dtype);
    c->channel_groups = options.channel_groups ? 1 : 0;
    c->tokens = options.layout.tokens;
    c->heads = options.layout.heads;
    c->head_dim = options.layout.head_dim;
    return absl::OkStatus();
  }

  // Launches the encoder on the descriptor in host->encode; with `split`, it
  // also records the split point.
  absl::Status LaunchEncode(bool split) {
    KVF_CUDA(cudaMemcpyAsync(&ctl->encode, &host->encode, sizeof(host->encode), cudaMemcpyHostToDevice, stream),
             "copy chunk descriptor");
    codec::cuda::SplitPoint sp{planned, &ctl->estimate};
    KVF_CUDA(encoder->EncodeAsync(&ctl->encode, 1, &ctl->size, &ctl->status, stream, split ? &sp : nullptr,
                                  host->encode.channel_groups != 0, false, host->encode.dtype),
             "encode launch");
    return absl::OkStatus();
  }

  // Waits for the encoder and returns the chunk's size (its status checked).
  absl::StatusOr<uint64_t> EncodeResult() {
    KVF_CUDA(cudaMemcpyAsync(&host->size, &ctl->size, sizeof(uint64_t) + sizeof(int32_t), cudaMemcpyDeviceToHost,
                             stream),
             "copy encode result");
    if (auto st = Sync("encode"); !st.ok()) return st;
    if (host->status != 0) return codec::cuda::ToStatus(host->status);
    return host->size;
  }

  // Decodes the chunk at device `in` into stage, then (verified only) into dst.
  absl::Status DecodeDevice(const uint8_t* in, uint64_t in_len, const std::vector<DeviceRange>& dst, uint64_t raw_len) {
    codec::cuda::DeviceChunk c{};
    c.data = in;
    c.bytes = in_len;
    c.out.data = stage;
    c.out_capacity = raw_len;
    host->decode = c;
    KVF_CUDA(cudaMemcpyAsync(&ctl->decode, &host->decode, sizeof(c), cudaMemcpyHostToDevice, stream),
             "copy chunk descriptor");
    KVF_CUDA(decoder->DecodeAsync(&ctl->decode, 1, &ctl->status, stream), "decode launch");
    KVF_CUDA(cudaMemcpyAsync(&host->status, &ctl->status, sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
             "copy decode result");
    if (auto st = Sync("decode"); !st.ok()) return st;
    if (host->status != 0) return codec::cuda::ToStatus(host->status);
    // Verified: now into the destination blocks.
    if (auto st = CopyRanges(dst, stage, false, cudaMemcpyDeviceToDevice, "scatter"); !st.ok()) return st;
    return Sync("scatter");
  }

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
  return impl_->CopyRangesAndSync(src, host, true, cudaMemcpyDeviceToHost, "copy to host");
}

absl::Status ChunkWorker::FromHost(const uint8_t* host, const std::vector<DeviceRange>& dst) {
  KVF_CUDA(cudaSetDevice(device_), "set device");
  return impl_->CopyRangesAndSync(dst, const_cast<uint8_t*>(host), false, cudaMemcpyHostToDevice, "copy to device");
}

absl::StatusOr<uint64_t> ChunkWorker::Encode(const codec::EncodeOptions& options, const std::vector<DeviceRange>& src,
                                             uint64_t len, uint8_t* out) {
  Impl& w = *impl_;
  KVF_CUDA(cudaSetDevice(device_), "set device");
  codec::cuda::EncodeChunk c{};
  if (auto st = w.EncodeInput(options, src, len, &c); !st.ok()) return st;
  c.out = w.encoded;
  const bool split = static_cast<bool>(options.on_raw_plane);
  c.out_capacity = split ? codec::MaxSplitEncodedBytes(len) : codec::MaxEncodedBytes(len);
  c.allow_stored = split ? 0 : 1;
  w.host->encode = c;
  if (auto st = w.LaunchEncode(split); !st.ok()) return st;
  uint64_t lead = 0;  // raw plane bytes already on the host
  bool taken = false;
  if (split) {
    // While the exponents are coded on the stream, the side stream brings the
    // raw plane (final once tables are planned) and the estimate to the host.
    const auto info = codec::Info(options.dtype);
    if (!info.ok()) return info.status();
    const uint64_t n = len / info->bytes;
    const uint64_t raw_plane =
        codec::plan::RawPlaneBytes(n, info->raw_bits, codec::plan::TileLog2(info->bytes, n));
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
  auto result = w.EncodeResult();
  if (!result.ok()) return result.status();
  const uint64_t size = *result;
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
  return w.DecodeDevice(w.encoded, in_len, dst, raw_len);
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Allocate(int device, uint64_t bytes) {
  KVF_CUDA(cudaSetDevice(device), "set device");
  auto b = std::unique_ptr<DeviceBuffer>(new DeviceBuffer());
  KVF_CUDA(DeviceAlloc(&b->data_, bytes), "allocate device staging");
  b->size_ = bytes;
  b->device_ = device;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  cudaSetDevice(device_);
  cudaFree(data_);
}

absl::Status ChunkWorker::Gather(const std::vector<DeviceRange>& src, uint8_t* dev) {
  KVF_CUDA(cudaSetDevice(device_), "set device");
  return impl_->CopyRangesAndSync(src, dev, true, cudaMemcpyDeviceToDevice, "gather");
}

absl::Status ChunkWorker::Scatter(const uint8_t* dev, const std::vector<DeviceRange>& dst) {
  KVF_CUDA(cudaSetDevice(device_), "set device");
  return impl_->CopyRangesAndSync(dst, const_cast<uint8_t*>(dev), false, cudaMemcpyDeviceToDevice, "scatter");
}

absl::Status ChunkWorker::CopyIn(const uint8_t* host, uint64_t len, uint8_t* dev) {
  KVF_CUDA(cudaSetDevice(device_), "set device");
  KVF_CUDA(cudaMemcpyAsync(dev, host, len, cudaMemcpyHostToDevice, impl_->stream), "copy to device");
  return impl_->Sync("copy to device");
}

absl::StatusOr<uint64_t> ChunkWorker::Checksum(const uint8_t* dev, uint64_t len) {
  Impl& w = *impl_;
  KVF_CUDA(cudaSetDevice(device_), "set device");
  KVF_CUDA(kvferry::cuda::Kvsum64Async(dev, len, &w.ctl->sum, w.stream), "checksum launch");
  KVF_CUDA(cudaMemcpyAsync(&w.host->sum, &w.ctl->sum, sizeof(uint64_t), cudaMemcpyDeviceToHost, w.stream),
           "copy checksum");
  if (auto st = w.Sync("checksum"); !st.ok()) return st;
  return w.host->sum;
}

absl::StatusOr<uint64_t> ChunkWorker::EncodeInto(const codec::EncodeOptions& options,
                                                 const std::vector<DeviceRange>& src, uint64_t len, uint8_t* dev) {
  Impl& w = *impl_;
  KVF_CUDA(cudaSetDevice(device_), "set device");
  codec::cuda::EncodeChunk c{};
  if (auto st = w.EncodeInput(options, src, len, &c); !st.ok()) return st;
  c.out = dev;
  c.out_capacity = codec::MaxEncodedBytes(len);
  c.allow_stored = 1;
  w.host->encode = c;
  if (auto st = w.LaunchEncode(false); !st.ok()) return st;
  auto size = w.EncodeResult();
  if (size.ok() && *size > c.out_capacity) return absl::InternalError("CUDA encoder reported an impossible size");
  return size;
}

absl::Status ChunkWorker::DecodeFrom(const uint8_t* dev, uint64_t in_len, const std::vector<DeviceRange>& dst,
                                     uint64_t raw_len) {
  Impl& w = *impl_;
  if (in_len < codec::kHeaderBytes) return absl::DataLossError("codec chunk shorter than its header");
  KVF_CUDA(cudaSetDevice(device_), "set device");
  // The header on the host first: the chunk must decode to exactly raw_len
  // bytes (the GPU decoder checks everything else, the checksum included).
  KVF_CUDA(cudaMemcpyAsync(w.host->header, dev, codec::kHeaderBytes, cudaMemcpyDeviceToHost, w.stream),
           "copy chunk header");
  if (auto st = w.Sync("copy chunk header"); !st.ok()) return st;
  const uint8_t* h = w.host->header;
  uint64_t n = 0;
  std::memcpy(&n, h + 8, sizeof(n));  // element count, little-endian (docs/codec-format.md)
  const auto info = codec::Info(static_cast<codec::DType>(h[5]));
  if (!info.ok()) return absl::DataLossError(absl::StrFormat("codec chunk of unknown dtype %d", h[5]));
  if (raw_len > w.max_chunk || n != raw_len / info->bytes || raw_len % info->bytes != 0) {
    return absl::DataLossError(
        absl::StrFormat("codec chunk decodes to %d elements of %d bytes, expected %d bytes", n, info->bytes, raw_len));
  }
  return w.DecodeDevice(dev, in_len, dst, raw_len);
}

}  // namespace kvferry::gpu
