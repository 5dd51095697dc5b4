// CUDA decoder for kvferry codec chunks. Mirrors kernels/cpu/codec.cc's Parse
// and Decode; see docs/codec-format.md.
#include <cstring>

#include "absl/strings/str_format.h"
#include "kernels/checksum_core.h"
#include "kernels/codec_plan.h"
#include "kernels/cuda/codec_common.cuh"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/kvsum64.cuh"

namespace kvferry::codec::cuda {
namespace {

// Decode table entry per slot: symbol | (freq - 1) << 8 | (slot - cum) << 20.
// One shared-memory load gives everything a rANS step needs.
using SlotTable = uint32_t[kM];

struct ChunkState {
  uint64_t n, orig_bytes, checksum, channels;
  uint64_t raw_off, map_off;
  uint32_t tile_log2, tiles, tables, flags;
  uint32_t elem_bytes, exp_bits, raw_bits, mant_bits, opaque;
  Addr out;
};

struct Workspace {
  ChunkState* state;
  SlotTable* tables;        // [max_chunks][kMaxTables]
  uint64_t* tile_off;       // [max_chunks][max_tiles]: byte offset of each tile
  uint32_t* tile_entry;     // [max_chunks][max_tiles]: directory entries
  unsigned long long* sum;  // [max_chunks]
};

// One block per chunk: checks the header and sections, builds the decode
// tables, and lays out the tiles. 1024 threads: the directory scan reads a few
// tiles' entries per thread (a 64 MiB bf16 chunk has 4096 tiles).
__global__ void __launch_bounds__(1024)
    ParseKernel(const DeviceChunk* chunks, int32_t* status, Workspace ws, uint32_t max_tiles) {
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
      if (ch.bytes < kHeader || in[0] != 'K' || in[1] != 'V' || in[2] != 'Z' || in[3] != '1' || in[4] != plan::kFormatVersion) {
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
      if ((s.flags & ~3u) || in[31] != 0 || Ld32(in + 36) != 0) {
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
      s.tile_log2 = in[30];
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
        if ((s.flags & kGroups) || s.tables || s.tile_log2 || s.tiles || raw_plane || payload != s.orig_bytes) {
          err = kBadSection;
        }
        s.tiles = static_cast<uint32_t>((s.orig_bytes + kMaxTile - 1) / kMaxTile);  // copy in 16 KiB pieces
        if (s.tiles > max_tiles) err = kTooLarge;
        break;
      }
      if (s.n == 0 || raw_plane != (s.n + 7) / 8 * s.raw_bits || s.tile_log2 < plan::kMinTileLog2 ||
          s.tile_log2 > plan::kMaxTileLog2 || s.tiles != plan::TileCount(s.n, s.tile_log2) || s.tables < 1 ||
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
    const uint32_t per = (s.tiles + blockDim.x - 1) / blockDim.x;
    const uint32_t t0 = min(s.tiles, threadIdx.x * per), t1 = min(s.tiles, t0 + per);
    uint64_t mine = 0;
    for (uint32_t t = t0; t < t1; ++t) {
      const uint32_t size = Ld32(ch.data + dir_off + 4ull * t) & ~kTileRaw;
      if (size % 4 != 0) err = kBadSection;
      mine += size;
    }
    uint64_t total = 0;
    uint64_t off = tiles_start + BlockExclusiveScan(mine, &total);
    if (threadIdx.x == 0 && tiles_start + total != ch.bytes) err = kBadSection;  // tiles end at the chunk's end
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
  // Frequencies into shared memory; a warp per table turns them into
  // cumulative sums (8 symbols a lane, then a warp scan).
  const uint8_t* in = ch.data;
  __shared__ uint16_t sfreq[kMaxTables][256];
  __shared__ uint16_t scum[kMaxTables][257];
  for (uint32_t k = threadIdx.x; k < s.tables * 256; k += blockDim.x) {
    const uint32_t t = k / 256, sym = k % 256;
    sfreq[t][sym] = (sym >= table_lo[t] && sym < table_lo[t] + table_count[t])
                        ? static_cast<uint16_t>(Ld16(in + table_off[t] + 2 * (sym - table_lo[t])))
                        : 0;
  }
  __syncthreads();
  const uint32_t lane = threadIdx.x % 32;
  for (uint32_t t = threadIdx.x / 32; t < s.tables; t += blockDim.x / 32) {
    uint32_t mine = 0;
    for (uint32_t k = 0; k < 8; ++k) mine += sfreq[t][8 * lane + k];
    const uint32_t incl = WarpInclusiveScan(mine);
    uint32_t cum = incl - mine;
    for (uint32_t k = 0; k < 8; ++k) {
      scum[t][8 * lane + k] = static_cast<uint16_t>(min(cum, kM));
      cum += sfreq[t][8 * lane + k];
    }
    const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
    if (lane == 0) {
      scum[t][256] = static_cast<uint16_t>(min(total, kM));
      if (total != kM && total != 0) err = kBadSection;
    }
  }
  __syncthreads();
  // Every element's channel must map to an existing, non-empty table (an
  // empty table decodes nothing; its slots are never looked up).
  if (s.flags & kGroups) {
    const uint64_t used = min(s.channels, s.n);
    for (uint64_t k = threadIdx.x; k < s.channels; k += blockDim.x) {
      const uint32_t t = in[s.map_off + k];
      if (t >= s.tables || (k < used && scum[t][256] == 0)) err = kBadSection;
    }
  } else if (threadIdx.x == 0 && scum[0][256] == 0) {
    err = kBadSection;
  }
  __syncthreads();
  if (err != kOk) {
    if (threadIdx.x == 0) status[c] = err;
    return;
  }
  // Slot tables: 16 consecutive slots a thread; the first slot's symbol by
  // binary search (the largest non-empty symbol whose cum is <= slot), then a
  // walk forward.
  for (uint32_t k = threadIdx.x; k < s.tables * (kM / 16); k += blockDim.x) {
    const uint32_t t = k / (kM / 16), slot0 = k % (kM / 16) * 16;
    if (scum[t][256] == 0) continue;
    uint32_t lo = 0, hi = 255;
    while (lo < hi) {
      const uint32_t mid = (lo + hi + 1) / 2;
      if (scum[t][mid] <= slot0) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    uint32_t* dst = ws.tables[static_cast<uint64_t>(c) * kMaxTables + t] + slot0;
    uint32_t sym = lo;
    for (uint32_t slot = slot0; slot < slot0 + 16; ++slot) {
      while (sym < 255 && scum[t][sym + 1] <= slot) ++sym;  // skips empty symbols, as the search does
      dst[slot - slot0] = sym | (static_cast<uint32_t>(sfreq[t][sym]) - 1) << 8 | (slot - scum[t][sym]) << 20;
    }
  }
  if (threadIdx.x == 0) status[c] = kOk;
}

constexpr int kWarpsPerBlock = 8;
constexpr uint32_t kSeg = 512;  // symbols a warp decodes before writing them out (16 rounds)

constexpr uint32_t kRingChunk = 64;  // words a lane group fetches at once (4 bytes a lane)
constexpr uint32_t kRingChunks = 8;  // chunks resident per warp: 2 being read, 6 in flight
constexpr uint32_t kRing = kRingChunk * kRingChunks;

struct DecodeShared {
  uint64_t key[checksum::kWordsPerBlock];  // kvsum64 position keys
  SlotTable table;                         // a single-table chunk's slot table
  alignas(16) uint8_t stage[kWarpsPerBlock][kSeg];
  alignas(16) uint16_t ring[kWarpsPerBlock][kRing];  // each warp's window on its tile's word stream
};

// Asynchronous global -> shared copies (sm_80+): a lane copies 4 bytes, or
// writes 4 zero bytes when !valid; no register waits on them.
__device__ __forceinline__ void CpAsync4(void* dst, const void* src, bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Per-thread kvsum64 state of a warp writing words lane + 32 i of a 4 KiB
// block: every word a thread writes belongs to checksum lane (lane % 8).
struct WarpSum64 {
  uint64_t S = 0, D = 0;

  __device__ __forceinline__ void Add(uint64_t w, uint64_t key) {
    S += checksum::Product(w, key);
    D += w;
  }
  // The whole warp: adds block `block` (m bytes) to *sum and starts over.
  __device__ __forceinline__ void Flush(uint64_t block, uint64_t m, unsigned long long* sum) {
    kvferry::cuda::Kvsum64WarpFinish(S, D, m, block, true, sum);
    S = D = 0;
  }
};

// Writes word `off` (byte offset into the output, a multiple of 8) holding
// bytes [off, end), and adds it to the checksum state.
__device__ __forceinline__ void EmitWord(const ChunkState& s, uint64_t off, uint64_t w, const uint64_t* key,
                                         WarpSum64* sum) {
  const uint32_t j = static_cast<uint32_t>(off % checksum::kBlockBytes / 8);
  uint8_t* dst = s.out.At(off);
  if (off + 8 <= s.orig_bytes) {
    *reinterpret_cast<uint64_t*>(dst) = w;  // 8-aligned: blocks are 16-aligned multiples of 64
  } else {
    const uint32_t len = static_cast<uint32_t>(s.orig_bytes - off);
    for (uint32_t k = 0; k < len; ++k) dst[k] = static_cast<uint8_t>(w >> (8 * k));
    w = (w & ((1ull << (8 * len)) - 1)) ^ (static_cast<uint64_t>(len) << 56);  // the chunk's tail word
  }
  sum->Add(w, key[j]);
}

// A warp joins the kSeg staged symbols of elements [e0, e0 + kSeg) with the
// raw plane into output words lane + 32 i and checksums them; at the end of a
// 4 KiB output block (or of the chunk) it adds the block's digest.
__device__ __forceinline__ void EmitSegment(const ChunkState& s, const uint8_t* in, uint64_t e0, const uint8_t* st,
                                            const uint32_t* raw4, const uint64_t* key, WarpSum64* sum,
                                            unsigned long long* gsum) {
  const uint32_t lane = threadIdx.x % 32, eb = s.elem_bytes;
  const uint64_t b0 = e0 * eb, b1 = min(s.orig_bytes, b0 + static_cast<uint64_t>(kSeg) * eb);
  const uint8_t* raw = in + s.raw_off;
  if (eb == 2 && s.raw_bits == 8) {  // bf16: a word is 4 symbols and 4 raw bytes
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t wi = lane + 32 * i;
      const uint64_t off = b0 + 8ull * wi;
      if (off >= b1) break;
      const uint32_t sy = *reinterpret_cast<const uint32_t*>(st + 4 * wi);
      const uint32_t r = raw4[i];
      uint64_t w = 0;
      for (int k = 0; k < 4; ++k) {
        const uint32_t rk = (r >> (8 * k)) & 0xff, sk = (sy >> (8 * k)) & 0xff;
        w |= static_cast<uint64_t>((rk >> 7) << 15 | sk << 7 | (rk & 0x7f)) << (16 * k);
      }
      EmitWord(s, off, w, key, sum);
    }
  } else {
    const uint32_t exp_shift = s.exp_bits + s.mant_bits, mant_mask = (1u << s.mant_bits) - 1;
    for (uint64_t off = b0 + 8ull * lane; off < b1; off += 256) {
      uint64_t w = 0;
      for (uint32_t k = 0; k < 8 && off + k < b1; k += eb) {
        const uint64_t e = (off + k) / eb;
        const uint32_t sy = st[e - e0];
        uint32_t v = sy;
        if (!s.opaque) {
          const uint32_t r = s.raw_bits == 8 ? raw[e] : Unpack(raw, e, s.raw_bits);
          v = ((r >> s.mant_bits) << exp_shift) | (sy << s.mant_bits) | (r & mant_mask);
        }
        w |= static_cast<uint64_t>(v) << (8 * k);
      }
      EmitWord(s, off, w, key, sum);
    }
  }
  if (b1 % checksum::kBlockBytes == 0 || b1 == s.orig_bytes) {
    const uint64_t block = (b1 - 1) / checksum::kBlockBytes;
    sum->Flush(block, b1 - block * checksum::kBlockBytes, gsum);
  }
}

// Loads the bf16 raw bytes of words lane + 32 i of the segment at e0.
__device__ __forceinline__ void LoadRaw4(const ChunkState& s, const uint8_t* in, uint64_t e0, bool aligned,
                                         uint32_t* raw4) {
  if (!(s.elem_bytes == 2 && s.raw_bits == 8)) return;
  const uint32_t lane = threadIdx.x % 32;
  const uint8_t* raw = in + s.raw_off;
  for (uint32_t i = 0; i < 4; ++i) {
    const uint64_t e = e0 + 4 * (lane + 32 * i);
    if (e + 4 <= s.n && aligned) {
      raw4[i] = *reinterpret_cast<const uint32_t*>(raw + e);
    } else {
      uint32_t r = 0;
      for (uint32_t k = 0; k < 4 && e + k < s.n; ++k) r |= static_cast<uint32_t>(raw[e + k]) << (8 * k);
      raw4[i] = r;
    }
  }
}

// One warp, one coded tile: 32 rANS lanes. The tile's word stream flows
// through a shared-memory ring of kRingChunks chunks of 64 words, fetched by
// cp.async 6 chunks ahead of the reads (no register waits on the loads); a
// lane that renormalises reads its word from the ring. Every 16 rounds the
// staged symbols are joined with the raw plane and written out (EmitSegment).
template <typename TableAt>
__device__ __forceinline__ bool DecodeCodedTile(const ChunkState& s, const uint8_t* in, const uint8_t* tile,
                                                uint32_t size, uint64_t begin, uint32_t n, const TableAt& table_at,
                                                uint8_t* st, uint16_t* ring, const uint64_t* key, bool raw_aligned,
                                                unsigned long long* gsum) {
  const uint32_t lane = threadIdx.x % 32;
  bool bad = size < 128;
  uint32_t x = bad ? kL : Ld32(tile + 4 * lane);
  bad |= x < kL;
  const uint8_t* stream = tile + 128;  // 4-byte aligned: tiles are
  const uint32_t nbytes = bad ? 0 : size - 128;
  const uint32_t nwords = nbytes / 2;
  auto fetch = [&](uint32_t chunk) {  // chunk -> ring slot chunk % kRingChunks
    const uint32_t b = chunk * kRingChunk * 2 + 4 * lane;
    const bool valid = b + 4 <= nbytes;
    CpAsync4(ring + (chunk % kRingChunks) * kRingChunk + 2 * lane, valid ? stream + b : stream, valid);
    CpAsyncCommit();
  };
  for (uint32_t k = 0; k < kRingChunks; ++k) fetch(k);
  CpAsyncWait<kRingChunks - 2>();
  __syncwarp();
  uint32_t head = 0;  // the oldest resident chunk; chunks head, head + 1 are complete
  uint32_t wpos = 0;
  const uint32_t groups = s.flags & kGroups;
  uint32_t ch_idx = groups ? static_cast<uint32_t>((begin + lane) % s.channels) : 0;
  const uint32_t ch_step = groups ? static_cast<uint32_t>(32 % s.channels) : 0;
  const uint32_t C = static_cast<uint32_t>(s.channels);
  const uint8_t* map = in + s.map_off;
  const unsigned lt = (1u << lane) - 1;
  WarpSum64 sum;
  for (uint32_t seg = 0; seg * kSeg < n; ++seg) {
    uint32_t raw4[4];
    LoadRaw4(s, in, begin + seg * kSeg, raw_aligned, raw4);
    const uint32_t rounds = min(16u, (n - seg * kSeg + 31) / 32);
    auto round = [&](uint32_t r, bool active) {
      const uint32_t e = table_at(groups ? map[ch_idx] : 0u, x & (kM - 1));
      const uint32_t y = (((e >> 8) & 0xfff) + 1) * (x >> kProbBits) + (e >> 20);
      const bool need = active && y < kL;
      const unsigned mask = __ballot_sync(0xffffffffu, need);
      const uint32_t word = ring[(wpos + __popc(mask & lt)) % kRing];  // every lane reads: no divergence
      x = need ? (y << 16) | word : (active ? y : x);
      wpos += __popc(mask);             // < 32 a round: a round reads within chunks head, head + 1
      if (wpos / kRingChunk != head) {  // chunk head consumed: refill its slot with chunk head + 8
        __syncwarp();
        fetch(head + kRingChunks);
        ++head;
        CpAsyncWait<kRingChunks - 2>();
        __syncwarp();
      }
      st[r * 32 + lane] = static_cast<uint8_t>(e);
      if (groups) {
        ch_idx += ch_step;
        if (ch_idx >= C) ch_idx -= C;
      }
    };
    if (seg * kSeg + kSeg <= n) {  // a whole segment: every lane active in all 16 rounds
#pragma unroll
      for (uint32_t r = 0; r < 16; ++r) round(r, true);
    } else {
      for (uint32_t r = 0; r < rounds; ++r) round(r, seg * kSeg + r * 32 + lane < n);
    }
    __syncwarp();
    EmitSegment(s, in, begin + seg * kSeg, st, raw4, key, &sum, gsum);
    __syncwarp();
  }
  CpAsyncWait<0>();
  bad |= wpos > nwords;
  bad |= x != kL;
  bad |= ((128 + 2 * wpos + 3) & ~3u) != size;
  return __any_sync(0xffffffffu, bad);
}

// Eight warps per block, one tile each (blockIdx.x * 8 + warp = tile,
// blockIdx.y = chunk). A tile decodes straight into the output, checksummed
// on the way (FinishKernel compares the sum). A single-table chunk keeps its
// slot table in shared memory; grouped chunks read theirs through L1.
// STORED chunks are copied (and checksummed) 16 KiB a warp.
__global__ void __launch_bounds__(kWarpsPerBlock * 32, 3)
    DecodeKernel(const DeviceChunk* chunks, int32_t* status, Workspace ws, uint32_t max_tiles) {
  extern __shared__ uint8_t smem_raw[];
  DecodeShared& sh = *reinterpret_cast<DecodeShared*>(smem_raw);
  const int c = blockIdx.y;
  if (status[c] != kOk) return;  // uniform for the block
  const ChunkState s = ws.state[c];
  if (blockIdx.x * kWarpsPerBlock >= s.tiles) return;
  const DeviceChunk ch = chunks[c];
  const uint32_t* gtables = ws.tables[static_cast<uint64_t>(c) * kMaxTables];
  const bool one_table = !(s.flags & kStored) && s.tables == 1;
  for (uint32_t k = threadIdx.x; k < checksum::kWordsPerBlock; k += blockDim.x) sh.key[k] = checksum::Key(k);
  if (one_table) {
    for (uint32_t k = threadIdx.x; k < kM / 4; k += blockDim.x) {
      reinterpret_cast<uint4*>(sh.table)[k] = reinterpret_cast<const uint4*>(gtables)[k];
    }
  }
  __syncthreads();
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t t = blockIdx.x * kWarpsPerBlock + warp;
  if (t >= s.tiles) return;
  const uint8_t* in = ch.data;
  unsigned long long* gsum = &ws.sum[c];
  if (s.flags & kStored) {  // bytes [t * kMaxTile, ...) of the payload, 4 KiB blocks
    const uint64_t b0 = static_cast<uint64_t>(t) * kMaxTile, b1 = min(s.orig_bytes, b0 + kMaxTile);
    const uint8_t* src = in + kHeader;
    const bool aligned = reinterpret_cast<uintptr_t>(src) % 8 == 0;
    WarpSum64 sum;
    for (uint64_t blk = b0; blk < b1; blk += checksum::kBlockBytes) {
      const uint64_t end = min(b1, blk + checksum::kBlockBytes);
      for (uint64_t off = blk + 8ull * lane; off < end; off += 256) {
        uint64_t w = 0;
        if (aligned && off + 8 <= end) {
          w = *reinterpret_cast<const uint64_t*>(src + off);
        } else {
          for (uint32_t k = 0; k < 8 && off + k < end; ++k) w |= static_cast<uint64_t>(src[off + k]) << (8 * k);
        }
        EmitWord(s, off, w, sh.key, &sum);
      }
      sum.Flush(blk / checksum::kBlockBytes, end - blk, gsum);
    }
    return;
  }
  const uint64_t begin = static_cast<uint64_t>(t) << s.tile_log2;
  const uint32_t n = static_cast<uint32_t>(min(uint64_t{1} << s.tile_log2, s.n - begin));
  const uint32_t entry = ws.tile_entry[static_cast<uint64_t>(c) * max_tiles + t];
  const uint32_t size = entry & ~kTileRaw;
  const uint8_t* tile = in + ws.tile_off[static_cast<uint64_t>(c) * max_tiles + t];
  uint8_t* st = sh.stage[warp];
  const bool raw_aligned = reinterpret_cast<uintptr_t>(in + s.raw_off) % 4 == 0;
  bool bad = false;
  if (entry & kTileRaw) {
    if (size != (((n + 7) / 8 * s.exp_bits + 3) & ~3u)) {
      bad = true;
    } else {
      WarpSum64 sum;
      for (uint32_t e0 = 0; e0 < n; e0 += kSeg) {
        uint32_t raw4[4];
        LoadRaw4(s, in, begin + e0, raw_aligned, raw4);
        for (uint32_t k = lane; k < kSeg && e0 + k < n; k += 32) {
          st[k] = static_cast<uint8_t>(Unpack(tile, e0 + k, s.exp_bits));
        }
        __syncwarp();
        EmitSegment(s, in, begin + e0, st, raw4, sh.key, &sum, gsum);
        __syncwarp();
      }
    }
  } else if (one_table) {
    const uint32_t* table = sh.table;
    bad = DecodeCodedTile(
        s, in, tile, size, begin, n, [table](uint32_t, uint32_t slot) { return table[slot]; }, st, sh.ring[warp],
        sh.key, raw_aligned, gsum);
  } else {
    bad = DecodeCodedTile(
        s, in, tile, size, begin, n, [gtables](uint32_t tb, uint32_t slot) { return __ldg(gtables + tb * kM + slot); },
        st, sh.ring[warp], sh.key, raw_aligned, gsum);
  }
  if (bad && lane == 0) atomicMax(&status[c], static_cast<int32_t>(kBadTile));
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
  d->max_tiles_ = static_cast<uint32_t>((max_chunk_bytes + kMaxTile - 1) / kMaxTile);  // >= tiles of any dtype
  const uint64_t n = static_cast<uint64_t>(max_chunks);
  const uint64_t bytes = n * sizeof(ChunkState) + n * kMaxTables * sizeof(SlotTable) +
                         n * d->max_tiles_ * (sizeof(uint64_t) + sizeof(uint32_t)) + n * 8 + 256;
  if (cudaFuncSetAttribute(DecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(sizeof(DecodeShared))) != cudaSuccess) {
    return absl::InternalError("cannot give the decode kernel its shared memory");
  }
  d->workspace_bytes_ = bytes;
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
  ws.tables = reinterpret_cast<SlotTable*>(p);
  p = align(p + n * kMaxTables * sizeof(SlotTable));
  ws.tile_off = reinterpret_cast<uint64_t*>(p);
  p = align(p + n * max_tiles_ * sizeof(uint64_t));
  ws.tile_entry = reinterpret_cast<uint32_t*>(p);
  p = align(p + n * max_tiles_ * sizeof(uint32_t));
  ws.sum = reinterpret_cast<unsigned long long*>(p);
  ParseKernel<<<count, 1024, 0, stream>>>(chunks, status, ws, max_tiles_);
  DecodeKernel<<<dim3((max_tiles_ + kWarpsPerBlock - 1) / kWarpsPerBlock, count), kWarpsPerBlock * 32,
                 sizeof(DecodeShared), stream>>>(chunks, status, ws, max_tiles_);
  FinishKernel<<<(count + 127) / 128, 128, 0, stream>>>(status, ws, count);
  return cudaGetLastError();
}

}  // namespace kvferry::codec::cuda
