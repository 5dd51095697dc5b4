// CUDA decoder for kvferry codec chunks. Mirrors kernels/cpu/codec.cc's Parse
// and Decode; see docs/codec-format.md.
#include <cstring>

#include "absl/strings/str_format.h"
#include "kernels/checksum_core.h"
#include "kernels/cuda/codec_common.cuh"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/kvsum64.cuh"

namespace kvferry::codec::cuda {
namespace {

struct DevTable {
  uint16_t freq[256];
  uint16_t cum[256];
  uint8_t slot_sym[kM];
};

struct ChunkState {
  uint64_t n, orig_bytes, checksum, channels;
  uint64_t raw_off, map_off;
  uint32_t tiles, tables, flags;
  uint32_t elem_bytes, exp_bits, raw_bits, mant_bits, opaque;
  Addr out;
};

struct Workspace {
  ChunkState* state;
  DevTable* tables;         // [max_chunks][kMaxTables]
  uint64_t* tile_off;       // [max_chunks][max_tiles]: byte offset of each tile
  uint32_t* tile_entry;     // [max_chunks][max_tiles]: directory entries
  unsigned long long* sum;  // [max_chunks]
  uint8_t* sym;             // [max_chunks][max_elems] decoded exponent symbols
  uint64_t max_elems;
};

// One block per chunk: checks the header and sections, builds the decode
// tables, and lays out the tiles.
__global__ void ParseKernel(const DeviceChunk* chunks, int32_t* status, Workspace ws, uint32_t max_tiles) {
  const int c = blockIdx.x;
  const DeviceChunk ch = chunks[c];
  ChunkState& s = ws.state[c];
  __shared__ int32_t err;
  __shared__ uint64_t dir_off, tiles_start;
  __shared__ uint64_t table_off[kMaxTables];
  __shared__ uint32_t table_lo[kMaxTables], table_count[kMaxTables];
  if (threadIdx.x == 0) {
    err = kOk;
    ws.sum[c] = 0;
    const uint8_t* in = ch.data;
    do {
      if (ch.bytes < kHeader || in[0] != 'K' || in[1] != 'V' || in[2] != 'Z' || in[3] != '1' || in[4] != 1) {
        err = kBadHeader;
        break;
      }
      ElemInfo e;
      if (!GetElemInfo(in[5], &e)) {
        err = kBadHeader;
        break;
      }
      s.elem_bytes = e.bytes;
      s.exp_bits = e.exp_bits;
      s.raw_bits = e.raw_bits;
      s.mant_bits = e.mant_bits;
      s.opaque = e.opaque;
      s.flags = Ld16(in + 6);
      if ((s.flags & ~3u) || Ld16(in + 30) != 0 || Ld32(in + 36) != 0) {
        err = kBadHeader;
        break;
      }
      s.n = Ld64(in + 8);
      if (s.n > (1ull << 40)) {
        err = kBadHeader;
        break;
      }
      s.orig_bytes = s.n * s.elem_bytes;
      s.channels = static_cast<uint64_t>(Ld32(in + 20)) * Ld32(in + 24);
      s.tables = Ld16(in + 28);
      s.tiles = Ld32(in + 32);
      const uint64_t raw_plane = Ld64(in + 40), payload = Ld64(in + 48);
      s.checksum = Ld64(in + 56);
      if (payload != ch.bytes - kHeader) {
        err = kBadHeader;
        break;
      }
      if ((ch.out.blocks == nullptr && s.orig_bytes > ch.out_capacity) || !MakeAddr(ch.out, s.orig_bytes, &s.out)) {
        err = kOutputTooSmall;
        break;
      }
      if (s.flags & kStored) {
        if ((s.flags & kGroups) || s.tables || s.tiles || raw_plane || payload != s.orig_bytes) err = kBadSection;
        s.tiles = static_cast<uint32_t>((s.orig_bytes + kTile - 1) / kTile);  // copy in tile-sized pieces
        if (s.tiles > max_tiles) err = kTooLarge;
        break;
      }
      if (s.n == 0 || raw_plane != (s.n + 7) / 8 * s.raw_bits || s.tiles != (s.n + kTile - 1) / kTile || s.tables < 1 ||
          s.tables > kMaxTables || (!(s.flags & kGroups) && s.tables != 1)) {
        err = kBadSection;
        break;
      }
      if (s.tiles > max_tiles) {
        err = kTooLarge;
        break;
      }
      uint64_t off = kHeader;
      s.raw_off = off;
      off += raw_plane;
      s.map_off = off;
      if (s.flags & kGroups) {
        if (s.channels < 2 || s.channels > (1u << 20)) {
          err = kBadSection;
          break;
        }
        off += s.channels;
      }
      for (uint32_t t = 0; t < s.tables && err == kOk; ++t) {
        if (off + 4 > ch.bytes) {
          err = kBadSection;
          break;
        }
        table_lo[t] = Ld16(in + off);
        table_count[t] = Ld16(in + off + 2);
        table_off[t] = off + 4;
        off += 4 + 2ull * table_count[t];
        if (table_lo[t] + table_count[t] > (1u << s.exp_bits) || off > ch.bytes) err = kBadSection;
      }
      if (err != kOk) break;
      if (off + 4ull * s.tiles > ch.bytes) {
        err = kBadSection;
        break;
      }
      const uint64_t dir = off;
      off += 4ull * s.tiles;
      const uint64_t pad = (4 - off % 4) % 4;  // zeros aligning tile 0 to 4 bytes
      if (off + pad > ch.bytes) {
        err = kBadSection;
        break;
      }
      for (uint64_t k = 0; k < pad; ++k) {
        if (in[off + k] != 0) err = kBadSection;
      }
      off += pad;
      dir_off = dir;
      tiles_start = off;
    } while (false);
  }
  __syncthreads();
  if (!BlockPointersOk(ch.out) && threadIdx.x == 0) err = kOutputTooSmall;
  __syncthreads();
  if (err != kOk || (s.flags & kStored)) {
    if (threadIdx.x == 0) status[c] = err;
    return;
  }
  // Tile offsets: a block-wide exclusive scan of the directory's sizes.
  {
    __shared__ uint64_t part[256];
    const uint32_t per = (s.tiles + blockDim.x - 1) / blockDim.x;
    const uint32_t t0 = min(s.tiles, threadIdx.x * per), t1 = min(s.tiles, t0 + per);
    uint64_t sum = 0;
    for (uint32_t t = t0; t < t1; ++t) {
      const uint32_t size = Ld32(ch.data + dir_off + 4ull * t) & ~kTileRaw;
      if (size % 4 != 0) err = kBadSection;
      sum += size;
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t acc = 0;
      for (uint32_t k = 0; k < blockDim.x; ++k) {
        const uint64_t v = part[k];
        part[k] = acc;
        acc += v;
      }
      if (tiles_start + acc != ch.bytes) err = kBadSection;  // tiles end exactly at the chunk's end
    }
    __syncthreads();
    uint64_t off = tiles_start + part[threadIdx.x];
    for (uint32_t t = t0; t < t1; ++t) {
      const uint32_t e = Ld32(ch.data + dir_off + 4ull * t);
      ws.tile_entry[static_cast<uint64_t>(c) * max_tiles + t] = e;
      ws.tile_off[static_cast<uint64_t>(c) * max_tiles + t] = off;
      off += e & ~kTileRaw;
    }
    __syncthreads();
    if (err != kOk) {
      if (threadIdx.x == 0) status[c] = err;
      return;
    }
  }
  // Channel map entries must name existing tables.
  const uint8_t* in = ch.data;
  if (s.flags & kGroups) {
    for (uint64_t k = threadIdx.x; k < s.channels; k += blockDim.x) {
      if (in[s.map_off + k] >= s.tables) err = kBadSection;
    }
  }
  // Decode tables. Frequencies and cumulative sums go through shared memory
  // (one thread per table sums 256 entries); then every thread fills slots,
  // finding each slot's symbol by binary search over the cumulative sums.
  __shared__ uint16_t sfreq[kMaxTables][256];
  __shared__ uint16_t scum[kMaxTables][257];
  for (uint32_t k = threadIdx.x; k < s.tables * 256; k += blockDim.x) {
    const uint32_t t = k / 256, sym = k % 256;
    sfreq[t][sym] = (sym >= table_lo[t] && sym < table_lo[t] + table_count[t])
                        ? static_cast<uint16_t>(Ld16(in + table_off[t] + 2 * (sym - table_lo[t])))
                        : 0;
  }
  __syncthreads();
  for (uint32_t t = threadIdx.x; t < s.tables; t += blockDim.x) {
    uint32_t cum = 0;
    for (uint32_t sym = 0; sym < 256; ++sym) {
      scum[t][sym] = static_cast<uint16_t>(min(cum, kM));
      cum += sfreq[t][sym];
    }
    scum[t][256] = static_cast<uint16_t>(min(cum, kM));
    if (cum != kM && cum != 0) err = kBadSection;
  }
  __syncthreads();
  if (err != kOk) {
    if (threadIdx.x == 0) status[c] = err;
    return;
  }
  for (uint32_t k = threadIdx.x; k < s.tables * 256; k += blockDim.x) {
    const uint32_t t = k / 256, sym = k % 256;
    DevTable& dt = ws.tables[static_cast<uint64_t>(c) * kMaxTables + t];
    dt.freq[sym] = sfreq[t][sym];
    dt.cum[sym] = scum[t][sym];
  }
  for (uint32_t k = threadIdx.x; k < s.tables * kM; k += blockDim.x) {
    const uint32_t t = k / kM, slot = k % kM;
    // Largest symbol whose cumulative frequency is <= slot (skipping empty symbols).
    uint32_t lo = 0, hi = 255;
    while (lo < hi) {
      const uint32_t mid = (lo + hi + 1) / 2;
      if (scum[t][mid] <= slot) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    ws.tables[static_cast<uint64_t>(c) * kMaxTables + t].slot_sym[slot] = static_cast<uint8_t>(lo);
  }
  __syncthreads();
  if (threadIdx.x == 0) status[c] = err;
}

constexpr int kWarpsPerBlock = 8;
constexpr uint32_t kSharedMap = 16384;  // channel maps up to this size live in shared memory

struct SharedTable {
  uint8_t slot_sym[kM];
  uint32_t freq_cum[256];  // freq | cum << 16
};
constexpr size_t kDecodeShared = kMaxTables * sizeof(SharedTable) + kSharedMap;

// Eight warps per block, one tile each (blockIdx.x * 8 + warp = tile,
// blockIdx.y = chunk): decodes the tile's exponent symbols into the
// workspace's symbol plane (MergeKernel joins them with the raw plane). The
// chunk's tables and channel map live in (dynamic) shared memory; the word
// stream is read 96 words ahead and handed out by shuffles; decoded symbols
// are staged in shared memory and stored 16 bytes per lane.
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    DecodeKernel(const DeviceChunk* chunks, int32_t* status, Workspace ws, uint32_t max_tiles) {
  extern __shared__ uint8_t smem[];
  SharedTable* shared = reinterpret_cast<SharedTable*>(smem);
  uint8_t* smap = smem + kMaxTables * sizeof(SharedTable);
  __shared__ uint4 stage[kWarpsPerBlock][32];
  const int c = blockIdx.y;
  const ChunkState s = ws.state[c];
  if (status[c] != kOk || (s.flags & kStored)) return;  // uniform for the block
  if (blockIdx.x * kWarpsPerBlock >= s.tiles) return;
  const DeviceChunk ch = chunks[c];
  const DevTable* gtables = ws.tables + static_cast<uint64_t>(c) * kMaxTables;
  for (uint32_t t = 0; t < s.tables; ++t) {
    for (uint32_t k = threadIdx.x; k < kM / 4; k += blockDim.x) {
      reinterpret_cast<uint32_t*>(shared[t].slot_sym)[k] = reinterpret_cast<const uint32_t*>(gtables[t].slot_sym)[k];
    }
    for (uint32_t k = threadIdx.x; k < 256; k += blockDim.x) {
      shared[t].freq_cum[k] = gtables[t].freq[k] | (static_cast<uint32_t>(gtables[t].cum[k]) << 16);
    }
  }
  const bool groups = s.flags & kGroups;
  const bool map_shared = groups && s.channels <= kSharedMap;
  if (map_shared) {
    for (uint32_t k = threadIdx.x; k < s.channels; k += blockDim.x) smap[k] = ch.data[s.map_off + k];
  }
  __syncthreads();
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t t = blockIdx.x * kWarpsPerBlock + warp;
  if (t >= s.tiles) return;
  const uint64_t begin = static_cast<uint64_t>(t) * kTile;
  const uint32_t n = static_cast<uint32_t>(min(static_cast<uint64_t>(kTile), s.n - begin));
  const uint32_t entry = ws.tile_entry[static_cast<uint64_t>(c) * max_tiles + t];
  const uint32_t size = entry & ~kTileRaw;
  const uint8_t* tile = ch.data + ws.tile_off[static_cast<uint64_t>(c) * max_tiles + t];
  const uint8_t* map = ch.data + s.map_off;
  uint8_t* sym_out = ws.sym + c * ws.max_elems + begin;
  if (entry & kTileRaw) {
    if (size != (((n + 7) / 8 * s.exp_bits + 3) & ~3u)) {
      if (lane == 0) atomicMax(&status[c], static_cast<int32_t>(kBadTile));
      return;
    }
    for (uint32_t j = lane; j < n; j += 32) sym_out[j] = static_cast<uint8_t>(Unpack(tile, j, s.exp_bits));
    return;
  }
  bool bad = size < 128;
  uint32_t x = bad ? kL : Ld32(tile + 4 * lane);
  bad |= x < kL;
  const uint16_t* words = reinterpret_cast<const uint16_t*>(tile + 128);  // tiles are 4-byte aligned
  const uint32_t nwords = bad ? 0 : (size - 128) / 2;
  auto load = [&](uint32_t k) -> uint32_t { return k < nwords ? words[k] : 0u; };
  uint32_t base = 0;  // stream position of buf0's word 0
  uint32_t buf0 = load(lane), buf1 = load(32 + lane), buf2 = load(64 + lane);
  uint32_t wpos = 0;
  const uint32_t rounds = (n + 31) / 32;
  uint32_t ch_idx = groups ? static_cast<uint32_t>((begin + lane) % s.channels) : 0;
  const uint32_t ch_step = groups ? static_cast<uint32_t>(32 % s.channels) : 0;
  const uint32_t C = static_cast<uint32_t>(s.channels);
  const unsigned lt = (1u << lane) - 1;
  uint8_t* st = reinterpret_cast<uint8_t*>(stage[warp]);
  for (uint32_t r = 0; r < rounds; ++r) {
    const bool active = r * 32 + lane < n;
    const uint32_t tb = groups ? (map_shared ? smap[ch_idx] : map[ch_idx]) : 0;
    const uint32_t slot = x & (kM - 1);
    const uint32_t sym = shared[tb].slot_sym[slot];
    const uint32_t fc = shared[tb].freq_cum[sym];
    const uint32_t f = fc & 0xffff;
    bad |= active && f == 0;
    const uint32_t y = f * (x >> kProbBits) + slot - (fc >> 16);
    const bool need = active && y < kL;
    const unsigned mask = __ballot_sync(0xffffffffu, need);
    const uint32_t before = __popc(mask & lt);
    const uint32_t off = wpos - base + before;  // 0..63
    const uint32_t w0 = __shfl_sync(0xffffffffu, buf0, off & 31);
    const uint32_t w1 = __shfl_sync(0xffffffffu, buf1, off & 31);
    bad |= need && wpos + before >= nwords;
    if (active) x = need ? (y << 16) | (off < 32 ? w0 : w1) : y;
    wpos += __popc(mask);
    if (wpos - base >= 32) {  // slide the window by 32 words
      base += 32;
      buf0 = buf1;
      buf1 = buf2;
      buf2 = load(base + 64 + lane);
    }
    st[(r % 16) * 32 + lane] = static_cast<uint8_t>(sym);
    if (r % 16 == 15 || r + 1 == rounds) {  // 16 rounds staged: 512 symbols, 16 bytes a lane
      __syncwarp();
      const uint32_t seg = r / 16 * 512;
      if (seg + 16 * lane < n) {
        if (seg + 16 * lane + 16 <= n) {
          reinterpret_cast<uint4*>(sym_out + seg)[lane] = stage[warp][lane];
        } else {
          for (uint32_t k = 0; seg + 16 * lane + k < n; ++k) sym_out[seg + 16 * lane + k] = st[16 * lane + k];
        }
      }
      __syncwarp();
    }
    if (groups) {
      ch_idx += ch_step;
      if (ch_idx >= C) ch_idx -= C;
    }
  }
  bad |= x != kL;
  bad |= ((128 + 2 * wpos + 3) & ~3u) != size;
  if (__any_sync(0xffffffffu, bad) && lane == 0) atomicMax(&status[c], static_cast<int32_t>(kBadTile));
}

// Joins symbols and raw plane into the output (or copies a STORED chunk's
// bytes) and adds the kvsum64 of what it wrote: 8 consecutive threads own one
// 4 KiB checksum block, thread l the 8-byte words l, l + 8, ...
__global__ void __launch_bounds__(256) MergeKernel(const DeviceChunk* chunks, const int32_t* status, Workspace ws) {
  using namespace kvferry::checksum;  // NOLINT
  const int c = blockIdx.y;
  if (status[c] != kOk) return;
  const ChunkState s = ws.state[c];
  const uint64_t gtid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t block = gtid / 8;
  const int lane = static_cast<int>(gtid % 8);
  const uint64_t nblocks = (s.orig_bytes + kBlockBytes - 1) / kBlockBytes;
  if (blockIdx.x * static_cast<uint64_t>(blockDim.x) / 8 >= nblocks) return;  // whole CUDA block past the end
  const bool active = block < nblocks;
  const uint8_t* in = chunks[c].data;
  const bool stored = s.flags & kStored;
  const uint8_t* sym = ws.sym + c * ws.max_elems;
  const uint8_t* raw = in + s.raw_off;
  const uint32_t eb = s.elem_bytes, exp_shift = s.exp_bits + s.mant_bits, mant_mask = (1u << s.mant_bits) - 1;
  const bool bf16_fast = !stored && eb == 2 && s.raw_bits == 8 && !s.opaque;
  // The element value of index i.
  auto value = [&](uint64_t i) -> uint32_t {
    if (s.opaque) return sym[i];
    const uint32_t r = s.raw_bits == 8 ? raw[i] : Unpack(raw, i, s.raw_bits);
    return ((r >> s.mant_bits) << exp_shift) | (sym[i] << s.mant_bits) | (r & mant_mask);
  };
  uint64_t S = 0, D = 0, m = 0;
  if (active) {
    const uint64_t start = block * kBlockBytes;
    m = min(static_cast<uint64_t>(kBlockBytes), s.orig_bytes - start);
    const uint32_t nw = static_cast<uint32_t>((m + 7) / 8);
    for (uint32_t j = lane; j < nw; j += kLanes) {
      const uint64_t off = start + 8ull * j;
      const uint32_t len = static_cast<uint32_t>(min(static_cast<uint64_t>(8), s.orig_bytes - off));
      uint64_t w = 0;
      if (stored) {
        for (uint32_t k = 0; k < len; ++k) w |= static_cast<uint64_t>(in[kHeader + off + k]) << (8 * k);
      } else if (bf16_fast && len == 8) {
        const uint64_t e0 = off / 2;
        const uint32_t sy = *reinterpret_cast<const uint32_t*>(sym + e0);
        const uint32_t r = raw[e0] | raw[e0 + 1] << 8 | raw[e0 + 2] << 16 | static_cast<uint32_t>(raw[e0 + 3]) << 24;
        for (int k = 0; k < 4; ++k) {
          const uint32_t rk = (r >> (8 * k)) & 0xff, sk = (sy >> (8 * k)) & 0xff;
          w |= static_cast<uint64_t>((rk >> 7) << 15 | sk << 7 | (rk & 0x7f)) << (16 * k);
        }
      } else {
        for (uint32_t k = 0; k < len; k += eb) {
          w |= static_cast<uint64_t>(value((off + k) / eb)) << (8 * k);
        }
      }
      uint8_t* dst = s.out.At(off);
      if (len == 8) {
        *reinterpret_cast<uint64_t*>(dst) = w;  // 8-aligned: blocks are 16-aligned, multiples of 64
      } else {
        for (uint32_t k = 0; k < len; ++k) dst[k] = static_cast<uint8_t>(w >> (8 * k));
        w ^= static_cast<uint64_t>(len) << 56;  // the tail word of a block
      }
      S += Product(w, Key(j));
      D += w;
    }
  }
  kvferry::cuda::Kvsum64AddBlockLanes(S, D, m, block, lane, active, &ws.sum[c]);
}

__global__ void FinishKernel(int32_t* status, Workspace ws, int count) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= count || status[c] != kOk) return;
  const ChunkState& s = ws.state[c];
  if (kvferry::checksum::Finish(ws.sum[c], s.orig_bytes) != s.checksum) status[c] = kChecksum;
}

}  // namespace

absl::Status ToStatus(int32_t code) {
  switch (code) {
    case kOk:
      return absl::OkStatus();
    case kTooLarge:
      return absl::ResourceExhaustedError("chunk larger than the CUDA decoder was sized for");
    case kOutputTooSmall:
      return absl::InvalidArgumentError("output buffer smaller than the decoded chunk");
    case kChecksum:
      return absl::DataLossError("corrupt chunk: checksum of the decoded bytes does not match");
    default:
      return absl::DataLossError(absl::StrFormat("corrupt chunk (CUDA decoder code %d)", code));
  }
}

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::Create(int max_chunks, uint64_t max_chunk_bytes) {
  if (max_chunks < 1 || max_chunk_bytes < 1) return absl::InvalidArgumentError("decoder must hold >= 1 chunk");
  auto d = std::unique_ptr<Decoder>(new Decoder());
  d->max_chunks_ = max_chunks;
  d->max_chunk_bytes_ = max_chunk_bytes;
  d->max_tiles_ = static_cast<uint32_t>((max_chunk_bytes + kTile - 1) / kTile);  // >= tiles of any dtype
  const uint64_t n = static_cast<uint64_t>(max_chunks);
  const uint64_t bytes = sizeof(Workspace) + n * sizeof(ChunkState) + n * kMaxTables * sizeof(DevTable) +
                         n * d->max_tiles_ * (sizeof(uint64_t) + sizeof(uint32_t) + kTile) + n * 8 + 256;
  if (cudaFuncSetAttribute(DecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kDecodeShared)) != cudaSuccess) {
    return absl::InternalError("cannot give the decode kernel its shared memory");
  }
  if (cudaMalloc(&d->workspace_, bytes) != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrFormat("cannot allocate %d bytes of decoder workspace", bytes));
  }
  return d;
}

Decoder::~Decoder() {
  if (workspace_ != nullptr) cudaFree(workspace_);
}

cudaError_t Decoder::DecodeAsync(const DeviceChunk* chunks, int count, int32_t* status, cudaStream_t stream) {
  if (count < 1 || count > max_chunks_) return cudaErrorInvalidValue;
  auto* base = static_cast<uint8_t*>(workspace_);
  const uint64_t n = static_cast<uint64_t>(max_chunks_);
  Workspace ws;
  auto align = [](uint8_t* p) {
    return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t{15});
  };
  uint8_t* p = align(base);
  ws.state = reinterpret_cast<ChunkState*>(p);
  p = align(p + n * sizeof(ChunkState));
  ws.tables = reinterpret_cast<DevTable*>(p);
  p = align(p + n * kMaxTables * sizeof(DevTable));
  ws.tile_off = reinterpret_cast<uint64_t*>(p);
  p = align(p + n * max_tiles_ * sizeof(uint64_t));
  ws.tile_entry = reinterpret_cast<uint32_t*>(p);
  p = align(p + n * max_tiles_ * sizeof(uint32_t));
  ws.sum = reinterpret_cast<unsigned long long*>(p);
  p = align(p + n * 8);
  ws.sym = p;  // n * max_tiles * kTile bytes
  ws.max_elems = static_cast<uint64_t>(max_tiles_) * kTile;
  ParseKernel<<<count, 256, 0, stream>>>(chunks, status, ws, max_tiles_);
  DecodeKernel<<<dim3((max_tiles_ + kWarpsPerBlock - 1) / kWarpsPerBlock, count), kWarpsPerBlock * 32, kDecodeShared,
                 stream>>>(chunks, status, ws, max_tiles_);
  const uint64_t merge_threads = (max_chunk_bytes_ + 4095) / 4096 * 8;
  MergeKernel<<<dim3(static_cast<unsigned>((merge_threads + 255) / 256), count), 256, 0, stream>>>(chunks, status, ws);
  FinishKernel<<<(count + 127) / 128, 128, 0, stream>>>(status, ws, count);
  return cudaGetLastError();
}

}  // namespace kvferry::codec::cuda
