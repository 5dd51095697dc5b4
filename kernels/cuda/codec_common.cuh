// Device code shared by the CUDA encoder and decoder (docs/codec-format.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/codec_plan.h"
#include "kernels/cuda/codec_cuda.h"

namespace kvferry::codec::cuda {

constexpr uint32_t kHeader = 64;
// Symbols per tile: 1 << tile_log2 (plan::TileLog2), at most this many. A
// chunk's largest possible tile count is its input bytes / kMaxTile (+1).
constexpr uint32_t kMaxTile = 1u << plan::kMaxTileLog2;
constexpr uint32_t kProbBits = plan::kProbBits;
constexpr uint32_t kM = 1u << kProbBits;
constexpr uint32_t kL = 1u << 16;
constexpr uint32_t kMaxTables = 16;
constexpr uint32_t kTileRaw = 1u << 31;
constexpr uint16_t kStored = 1, kGroups = 2;
constexpr uint64_t kMaxElements = 1ull << 40;
// The encoder groups channels only up to this many (as the CPU reference).
constexpr uint32_t kMaxGroupedChannels = 8192;

// An element's exponent symbol and its sign + mantissa bits (the raw part),
// for a float of exp_bits exponent and mant_bits mantissa bits; an opaque
// byte is its own symbol and has no raw part.
__device__ __forceinline__ uint32_t ElemSymbol(uint32_t v, uint32_t exp_bits, uint32_t mant_bits, bool opaque) {
  return opaque ? v : (v >> mant_bits) & ((1u << exp_bits) - 1);
}
__device__ __forceinline__ uint32_t ElemRaw(uint32_t v, uint32_t exp_bits, uint32_t mant_bits, bool opaque) {
  return opaque ? 0 : ((v >> (exp_bits + mant_bits)) << mant_bits) | (v & ((1u << mant_bits) - 1));
}
// The element of a symbol and a raw part (the inverse of the two above).
__device__ __forceinline__ uint32_t ElemJoin(uint32_t symbol, uint32_t raw, uint32_t exp_bits, uint32_t mant_bits,
                                             bool opaque) {
  return opaque ? symbol : (raw >> mant_bits) << (exp_bits + mant_bits) | symbol << mant_bits |
                               (raw & ((1u << mant_bits) - 1));
}

// Each dtype's layout (codes 1..kDtypes) as a compile-time type, for hot
// loops: ElemOf<code>, and WithElem(dtype, f), which calls f(ElemOf<dtype>{}).
template <uint32_t kBytes, uint32_t kExp, uint32_t kMant, bool kOpaque>
struct ElemT {
  static constexpr uint32_t bytes = kBytes, exp_bits = kExp, mant_bits = kMant;
  static constexpr uint32_t raw_bits = kOpaque ? 0 : 8 * kBytes - kExp;
  static constexpr bool opaque = kOpaque;
  __device__ __forceinline__ static uint32_t Symbol(uint32_t v) { return ElemSymbol(v, kExp, kMant, kOpaque); }
  __device__ __forceinline__ static uint32_t Raw(uint32_t v) { return ElemRaw(v, kExp, kMant, kOpaque); }
  __device__ __forceinline__ static uint32_t Join(uint32_t symbol, uint32_t raw) {
    return ElemJoin(symbol, raw, kExp, kMant, kOpaque);
  }
};
constexpr uint32_t kDtypes = 6;
template <uint32_t kDtype>
struct ElemOfCode;
template <>
struct ElemOfCode<1> {
  using T = ElemT<2, 8, 7, false>;  // bf16
};
template <>
struct ElemOfCode<2> {
  using T = ElemT<2, 5, 10, false>;  // fp16
};
template <>
struct ElemOfCode<3> {
  using T = ElemT<4, 8, 23, false>;  // fp32
};
template <>
struct ElemOfCode<4> {
  using T = ElemT<1, 4, 3, false>;  // fp8 e4m3
};
template <>
struct ElemOfCode<5> {
  using T = ElemT<1, 5, 2, false>;  // fp8 e5m2
};
template <>
struct ElemOfCode<6> {
  using T = ElemT<1, 8, 0, true>;  // opaque bytes
};
template <uint32_t kDtype>
using ElemOf = typename ElemOfCode<kDtype>::T;

// Asynchronous global -> shared copies (sm_80+): a lane copies 16 bytes, or
// 4 bytes (zeros when !valid); no register waits on them.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void CpAsync4(void* dst, const void* src, uint32_t bytes) {  // 4 or 0 (zeros)
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
// L2 eviction policies (createpolicy) for the cache-hinted copies and stores below.
__device__ __forceinline__ uint64_t L2EvictFirst() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t L2EvictNormal() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void CpAsync16Hint(void* dst, const void* src, uint64_t policy) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "l"(policy));
}
__device__ __forceinline__ void Store64Hint(void* p, uint64_t v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.b64 [%0], %1, %2;\n" ::"l"(p), "l"(v), "l"(policy) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

constexpr uint32_t kBf16Dtype = 1;
using Bf16 = ElemOf<kBf16Dtype>;
template <typename E>
constexpr bool kIsBf16 = E::bytes == 2 && E::raw_bits == 8;

// Returns false for an unknown dtype (f is not called).
template <typename F>
__device__ __forceinline__ bool WithElem(uint32_t dtype, F&& f) {
  switch (dtype) {
    case 1:
      f(ElemOf<1>{});
      return true;
    case 2:
      f(ElemOf<2>{});
      return true;
    case 3:
      f(ElemOf<3>{});
      return true;
    case 4:
      f(ElemOf<4>{});
      return true;
    case 5:
      f(ElemOf<5>{});
      return true;
    case 6:
      f(ElemOf<6>{});
      return true;
  }
  return false;
}

// The same layout with the dtype known at run time only.
struct ElemInfo {
  uint32_t bytes = 0, exp_bits = 0, raw_bits = 0, mant_bits = 0;
  bool opaque = false;

  __device__ uint32_t Symbol(uint32_t v) const { return ElemSymbol(v, exp_bits, mant_bits, opaque); }
  __device__ uint32_t Raw(uint32_t v) const { return ElemRaw(v, exp_bits, mant_bits, opaque); }
};

__device__ inline bool GetElemInfo(uint32_t dtype, ElemInfo* e) {
  return WithElem(dtype, [e](auto t) {
    using T = decltype(t);
    *e = {T::bytes, T::exp_bits, T::raw_bits, T::mant_bits, T::opaque};
  });
}

// Byte addressing over DeviceBlocks. Block lookups divide by block_bytes with
// a multiply-high; exact because offset * block_bytes < 2^64 (checked).
struct Addr {
  uint8_t* data = nullptr;
  uint8_t* const* blocks = nullptr;
  uint64_t bb = 0, magic = 0;

  __device__ __forceinline__ uint8_t* At(uint64_t off) const {
    if (blocks == nullptr) return data + off;
    const uint64_t q = __umul64hi(off, magic);
    return blocks[q] + (off - q * bb);
  }
};

// Checks a block list that must hold `need` bytes (thread 0 only; the block
// pointers' alignment is checked by CheckBlockPointers).
__device__ inline bool MakeAddr(const DeviceBlocks& b, uint64_t need, Addr* a) {
  a->data = b.data;
  a->blocks = b.blocks;
  if (b.blocks == nullptr) return need == 0 || (b.data != nullptr && reinterpret_cast<uintptr_t>(b.data) % 16 == 0);
  const uint64_t bb = b.block_bytes;
  if (b.count == 0 || bb < 64 || bb % 64 != 0 || bb >= (1ull << 32)) return false;
  if (__umul64hi(bb * bb, b.count) != 0 || bb * b.count < need) return false;
  a->bb = bb;
  a->magic = ~0ull / bb + 1;
  return true;
}

// All threads of a block: false if a block pointer is null or misaligned
// (those of blocks [first, last) only, when given).
__device__ inline bool BlockPointersOk(const DeviceBlocks& b, uint32_t first = 0, uint32_t last = ~0u) {
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  if (b.blocks != nullptr) {
    for (uint32_t k = first + threadIdx.x; k < min(last, b.count); k += blockDim.x) {
      if (b.blocks[k] == nullptr || reinterpret_cast<uintptr_t>(b.blocks[k]) % 16 != 0) bad = 1;
    }
  }
  __syncthreads();
  return bad == 0;
}

__device__ __forceinline__ uint64_t Ld64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
__device__ __forceinline__ uint32_t Ld32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
__device__ __forceinline__ uint32_t Ld16(const uint8_t* p) { return p[0] | (p[1] << 8); }
// The n <= 4 bytes at p, little-endian, zero padded (no byte past them read).
__device__ __forceinline__ uint32_t LdBytes(const uint8_t* p, uint32_t n) {
  uint32_t v = 0;
  for (uint32_t q = 0; q < n; ++q) v |= static_cast<uint32_t>(p[q]) << (8 * q);
  return v;
}
__device__ __forceinline__ void St16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
__device__ __forceinline__ void St32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
__device__ __forceinline__ void St64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Packs v[0..8) of `width` bits LSB-first into `width` bytes at out.
__device__ __forceinline__ void PackGroup8(const uint32_t* v, uint32_t width, uint8_t* out) {
  uint64_t acc = 0;
  uint32_t bits = 0, o = 0;
  for (int k = 0; k < 8; ++k) {
    acc |= static_cast<uint64_t>(v[k]) << bits;
    bits += width;
    while (bits >= 8) {
      out[o++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      bits -= 8;
    }
  }
}

// Value i of values packed with `width` bits (groups of 8, LSB-first).
__device__ __forceinline__ uint32_t Unpack(const uint8_t* packed, uint64_t i, uint32_t width) {
  if (width == 8) return packed[i];
  const uint64_t bit = (i / 8) * width * 8 + (i % 8) * width;
  const uint8_t* p = packed + bit / 8;
  const uint32_t shift = bit % 8;
  uint32_t v = 0;
  const uint32_t nbytes = (shift + width + 7) / 8;
  for (uint32_t b = 0; b < nbytes; ++b) v |= static_cast<uint32_t>(p[b]) << (8 * b);
  return (v >> shift) & ((1u << width) - 1);
}

// Programmatic dependent launch (sm_90). The codec's kernels are launched
// with Launch(), so each may be scheduled while the kernel before it on the
// stream is still finishing (hiding the launch gap). Every such kernel calls
// WaitForPrevious() first, which returns once the previous kernel has
// completed and its writes are visible. The one-block-per-chunk kernels
// (encoder's Plan, decoder's Parse) also call LetNextStart(), which
// lets the next kernel's blocks be scheduled beside them at once; the wide
// kernels do not (with Split and Tiles doing so, encode was 2-4% slower at
// 256 MiB and 16 x 4 MiB, on an H100).
__device__ __forceinline__ void WaitForPrevious() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void LetNextStart() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// A block's threads fill items [0, n) of shared memory, store(i, load(i)),
// with 4 loads a thread in flight before their stores: a table copy in a
// block of only 2 warps is not one memory round trip per item.
template <typename Load, typename Store>
__device__ __forceinline__ void BlockCopy4(uint32_t n, const Load& load, const Store& store,
                                           uint32_t threads = blockDim.x) {
  for (uint32_t k = threadIdx.x; k < n; k += 4 * threads) {
    decltype(load(0u)) v[4];
#pragma unroll
    for (uint32_t u = 0; u < 4; ++u) {
      if (k + u * threads < n) v[u] = load(k + u * threads);
    }
#pragma unroll
    for (uint32_t u = 0; u < 4; ++u) {
      if (k + u * threads < n) store(k + u * threads, v[u]);
    }
  }
}

// Warps per block for the kernels that give each warp one tile (encoder's
// Tiles, decoder's Decode): 8, or fewer when the call has so few tiles that
// its blocks would not cover the SMs. A tile is a chain of rANS rounds, one
// after another, so a small call runs best with each warp alone on one of an
// SM's four schedulers; in blocks of 8, 256 tiles would share 32 SMs.
inline uint32_t WarpsPerTileBlock(uint64_t tiles_per_chunk, int chunks, int sms) {
  uint32_t w = 8;
  while (w > 2 &&
         static_cast<uint64_t>(chunks) * ((tiles_per_chunk + w / 2 - 1) / (w / 2)) <= static_cast<uint64_t>(sms)) {
    w /= 2;
  }
  return w;
}

// An attribute of the current device, at least `least` (also where it cannot be read).
inline int CurrentDeviceAttribute(cudaDeviceAttr attr, int least) {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess) return least;
  return v < least ? least : v;
}
// The number of SMs of the current device (1 if it cannot be read).
inline int CurrentDeviceSms() { return CurrentDeviceAttribute(cudaDevAttrMultiProcessorCount, 1); }
// Its L2 cache in bytes (0 if it cannot be read).
inline uint64_t CurrentDeviceL2Bytes() {
  return static_cast<uint64_t>(CurrentDeviceAttribute(cudaDevAttrL2CacheSize, 0));
}

// A coder's workspace, carved into regions one after another, each aligned
// to kAlign bytes: the same calls size it (a null base: Take returns null,
// used() counts) and lay it out, so the layout is written once.
template <uint64_t kAlign>
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<uint8_t*>(base)) {}
  template <typename T>
  T* Take(uint64_t bytes) {
    T* r = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (bytes + kAlign - 1) & ~(kAlign - 1);
    return r;
  }
  uint64_t used() const { return used_; }

 private:
  uint8_t* base_;
  uint64_t used_ = 0;
};

template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Bits of a where kMask is set, of b elsewhere: one lop3 with the mask as an
// immediate (the compiler makes two or three instructions of the masks and
// ORs written out).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t SelectBits(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(d) : "r"(a), "r"(b), "n"(kMask));
  return d;
}

// Inclusive prefix sum of v over the lanes of the calling (full) warp.
template <typename T>
__device__ __forceinline__ T WarpInclusiveScan(T v) {
  const int lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o *= 2) {
    const T t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A chunk's kvsum64 digests are added to kSumSlots slots, 64 bytes apart:
// slot k % kSumSlots, k the writer's tile or checksum block (encoder) or
// Decode block (bf16; the other dtypes' decoder uses slot 0), so that the
// atomics of warps that end their tiles together do not queue on one
// address. The reader adds the slots up, a warp with a slot a lane (one
// thread's loop waits for each load in turn). Measured on an H100 against
// one address: bf16 256 MiB encode 965-974 -> 1012-1025 GB/s, decode
// 1282-1321 -> 1335-1344 GB/s (docs/performance.md).
constexpr uint32_t kSumSlots = 32, kSumStride = 8;
constexpr uint64_t kSumBytesPerChunk = uint64_t{kSumSlots} * kSumStride * 8;
__device__ __forceinline__ unsigned long long* SumSlot(unsigned long long* sums, int c, uint64_t k) {
  return sums + (static_cast<uint64_t>(c) * kSumSlots + k % kSumSlots) * kSumStride;
}

}  // namespace kvferry::codec::cuda
