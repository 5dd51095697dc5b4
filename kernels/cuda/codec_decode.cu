// CUDA decoder for kvferry codec chunks. Mirrors kernels/cpu/codec.cc's Parse
// and Decode; see docs/codec-format.md.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "kernels/checksum_core.h"
#include "kernels/codec_plan.h"
#include "kernels/cuda/call_graphs.h"
#include "kernels/cuda/codec_common.cuh"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/kvsum64.cuh"

namespace kvferry::codec::cuda {
namespace {

// Decode table entry per slot: (freq - 1) | symbol << 12 | (slot - cum) << 20.
// One shared-memory load gives everything a rANS step needs, and the next
// state is two instructions after it: freq - 1 is one AND, and
// (x >> 8) + (slot - cum) one LEA.HI, beside it, then one multiply-add.
using SlotTable = uint32_t[kM];
// A grouped chunk's slot tables (16 KiB for 16 tables).
struct GroupTables {
  SlotTable slots[kMaxTables];
};

struct ChunkState {
  uint64_t n, orig_bytes, checksum, channels;
  uint64_t raw_off, map_off, dir_off, tiles_start, bytes;
  uint32_t tile_log2, tiles, tables, flags;
  uint32_t carry_tiles;  // tiles [0, carry_tiles) carry the last plan::kCarryBytes of their raw plane part
  uint32_t dtype, elem_bytes, exp_bits, raw_bits, mant_bits, opaque;
  Addr out;
};

struct Workspace {
  ChunkState* state;
  SlotTable* tables;        // [max_chunks]: one-table chunks
  GroupTables* groups;      // [max_chunks]: grouped chunks
  unsigned long long* sum;  // [max_chunks] x kSumSlots checksum slots (SumSlot)
};

// Parse's copy of a chunk's state, in shared memory: read back from the
// workspace instead, each field is a round trip to memory after the barrier
// that follows its store. Raw bytes, since a __shared__ variable cannot have
// ChunkState's initialisers. PublishState stores it once it is final.
__device__ __forceinline__ ChunkState& SharedState() {
  __shared__ alignas(16) uint8_t bytes[sizeof(ChunkState)];
  return *reinterpret_cast<ChunkState*>(bytes);
}
__device__ __forceinline__ void PublishState(const ChunkState& s, ChunkState* dst) {
  static_assert(sizeof(ChunkState) % 8 == 0, "copied 8 bytes at a time");
  for (uint32_t k = threadIdx.x; k < sizeof(ChunkState) / 8; k += blockDim.x) {
    reinterpret_cast<uint64_t*>(dst)[k] = reinterpret_cast<const uint64_t*>(&s)[k];
  }
}

// One block per chunk: checks the header and sections and builds the decode
// tables; it finds the tile directory, which each Decode block sums up to its
// own tiles (SumDirectory). A one-table chunk's tables are finished by warp 0
// alone once the table section is in (ParseOneTable). 1024 threads: the table section comes in at up
// to 9 bytes a thread, the slot table is built 4 slots a thread. Measured
// on an H100 (ncu): 7.9 -> 7.3 us at 4 MiB, 8.3 -> 8.0 us at 64 MiB with
// the state in shared memory and the directory's padding loaded early,
// against the state read back from the workspace.
constexpr uint32_t kParseThreads = 1024;
// Slot table entries [slot0, slot0 + N) of a table from its frequencies and
// cumulative counts (cum[256] = kM): the first slot's symbol by binary
// search (the largest symbol whose cum is <= the slot), then a walk forward;
// both skip empty symbols. Entry: (freq - 1) | symbol << 12 | (slot - cum) << 20.
template <uint32_t N>
__device__ __forceinline__ void SlotEntries(const uint16_t* freq, const uint16_t* cum, uint32_t slot0,
                                            uint32_t (&v)[N]) {
  uint32_t a = 0, b = 255;
  while (a < b) {
    const uint32_t mid = (a + b + 1) / 2;
    if (cum[mid] <= slot0) {
      a = mid;
    } else {
      b = mid - 1;
    }
  }
#pragma unroll
  for (uint32_t q = 0; q < N; ++q) {
    const uint32_t slot = slot0 + q;
    while (a < 255 && cum[a + 1] <= slot) ++a;
    v[q] = (static_cast<uint32_t>(freq[a]) - 1) | a << 12 | (slot - cum[a]) << 20;
  }
}

// Parse's rest for a chunk of one table (no channel groups), by warp 0
// alone, without the block's barriers: the table header and sizes checked,
// the frequencies (8 symbols a lane) scanned, the slot table built (8 slots a
// lane), the state published; the directory padding loaded first and
// checked last. The table section is in `window` (window_bytes of it, from
// chunk offset tables_at). Measured on an H100 against the block's general
// path (four barriers, thread 0 parsing the table headers): bf16 64 MiB
// decode 1089-1095 -> 1100-1108 GB/s, one 4 MiB chunk 21.4-21.9 -> 20.6-20.8 us.
__device__ __forceinline__ void ParseOneTable(const DeviceChunk& ch, int32_t* status, const Workspace& ws, int c,
                                              uint64_t tables_at, const uint8_t* window, uint32_t window_bytes) {
  ChunkState& s = SharedState();
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t lo = window_bytes >= 4 ? Ld16(window) : 0, count = window_bytes >= 4 ? Ld16(window + 2) : 0;
  const uint32_t off = 4 + 2 * count;
  const uint64_t dir = tables_at + off, end = dir + 4ull * s.tiles, start = end + (4 - end % 4) % 4;
  if (window_bytes < 4 || lo + count > (1u << s.exp_bits) || off > window_bytes || start > ch.bytes) {
    if (lane == 0) status[c] = kBadSection;
    return;
  }
  const uint32_t pad = lane == 0 ? LdBytes(ch.data + end, static_cast<uint32_t>(start - end)) : 0;
  __shared__ uint16_t freq[256], cums[257];
  uint32_t f[8], mine = 0;
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t sym = 8 * lane + k;
    f[k] = sym >= lo && sym < lo + count ? Ld16(window + 4 + 2 * (sym - lo)) : 0;
    mine += f[k];
  }
  const uint32_t incl = WarpInclusiveScan(mine);
  if (__shfl_sync(0xffffffffu, incl, 31) != kM) {  // a table's frequencies sum to kM
    if (lane == 0) status[c] = kBadSection;
    return;
  }
  uint32_t cum = incl - mine;
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) {
    freq[8 * lane + k] = static_cast<uint16_t>(f[k]);
    cums[8 * lane + k] = static_cast<uint16_t>(cum);
    cum += f[k];
  }
  if (lane == 0) {
    cums[256] = kM;
    s.dir_off = dir;
    s.tiles_start = start;
    s.bytes = ch.bytes;
  }
  __syncwarp();
  const uint32_t slot0 = 8 * lane;  // slots 8 lane .. 8 lane + 7
  uint32_t v[8];
  SlotEntries(freq, cums, slot0, v);
  uint4* dst = reinterpret_cast<uint4*>(ws.tables[c] + slot0);
  dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
  dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
  static_assert(sizeof(ChunkState) / 8 <= 32 && kM == 256, "a warp publishes the state and builds the slot table");
  PublishState(s, &ws.state[c]);
  if (lane == 0) status[c] = pad != 0 ? kBadSection : kOk;
}

__global__ void __launch_bounds__(kParseThreads)
    ParseKernel(const DeviceChunk* chunks, int32_t* status, Workspace ws, uint32_t max_tiles) {
  WaitForPrevious();
  LetNextStart();
  const int c = blockIdx.x;
  const DeviceChunk ch = chunks[c];
  if (threadIdx.x < kSumSlots) *SumSlot(ws.sum, c, threadIdx.x) = 0;
  ChunkState& s = SharedState();  // stored to ws.state[c] when the chunk is good
  __shared__ int32_t err;
  __shared__ uint64_t tables_at, dir_off, tiles_start;
  __shared__ uint32_t window_bytes;
  __shared__ uint32_t table_at[kMaxTables], table_lo[kMaxTables], table_count[kMaxTables];
  // Parse is a chain of round trips to memory (the kernel takes as long as
  // they do): the header, then the whole table section (at most kMaxTables
  // tables of 4 + 512 bytes) in one load a thread, then the directory.
  // The header as 8 little-endian words: thread 0's checks take its fields
  // from registers, not a shared-memory load a byte.
  __shared__ alignas(16) uint8_t header[kHeader];
  __shared__ uint8_t window[kMaxTables * (4 + 2 * 256)];
  if (threadIdx.x < kHeader && ch.bytes >= kHeader) header[threadIdx.x] = ch.data[threadIdx.x];
  static_assert(sizeof(ChunkState) % 8 == 0 && sizeof(ChunkState) / 8 <= kParseThreads - kHeader,
                "zeroed a word a thread");
  if (threadIdx.x >= kHeader && threadIdx.x - kHeader < sizeof(ChunkState) / 8) {
    reinterpret_cast<uint64_t*>(&s)[threadIdx.x - kHeader] = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    err = kOk;
    uint64_t w[kHeader / 8];
#pragma unroll
    for (uint32_t k = 0; k < kHeader / 8; ++k) w[k] = reinterpret_cast<const uint64_t*>(header)[k];
    // Header bytes [at, at + n) as a number (n <= 8, within one word).
    auto field = [&](uint32_t at, uint32_t n) {
      const uint64_t v = w[at / 8] >> (8 * (at % 8));
      return n == 8 ? v : v & ((uint64_t{1} << (8 * n)) - 1);
    };
    do {
      if (ch.bytes < kHeader || field(0, 4) != (uint32_t{'K'} | 'V' << 8 | 'Z' << 16 | uint32_t{'1'} << 24) ||
          field(4, 1) != plan::kFormatVersion) {
        err = kBadHeader;
        break;
      }
      ElemInfo e;
      if (!GetElemInfo(static_cast<uint8_t>(field(5, 1)), &e)) {
        err = kBadHeader;
        break;
      }
      s.dtype = static_cast<uint32_t>(field(5, 1));
      s.elem_bytes = e.bytes;
      s.exp_bits = e.exp_bits;
      s.raw_bits = e.raw_bits;
      s.mant_bits = e.mant_bits;
      s.opaque = e.opaque;
      s.flags = static_cast<uint32_t>(field(6, 2));
      if ((s.flags & ~3u) || field(31, 1) != 0 || field(36, 4) != 0) {
        err = kBadHeader;
        break;
      }
      s.n = field(8, 8);
      if (s.n > (1ull << 40)) {
        err = kBadHeader;
        break;
      }
      s.orig_bytes = s.n * s.elem_bytes;
      s.channels = field(20, 4) * field(24, 4);
      s.tables = static_cast<uint32_t>(field(28, 2));
      s.tile_log2 = static_cast<uint32_t>(field(30, 1));
      s.tiles = static_cast<uint32_t>(field(32, 4));
      const uint64_t raw_plane = field(40, 8), payload = field(48, 8);
      s.checksum = field(56, 8);
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
      if (s.n == 0 || s.tile_log2 < plan::kMinTileLog2 || s.tile_log2 > plan::kMaxTileLog2 ||
          raw_plane != plan::RawPlaneBytes(s.n, s.raw_bits, s.tile_log2) ||
          s.tiles != plan::TileCount(s.n, s.tile_log2) || s.tables < 1 || s.tables > kMaxTables ||
          (!(s.flags & kGroups) && s.tables != 1)) {
        err = kBadSection;
        break;
      }
      if (s.tiles > max_tiles) {
        err = kTooLarge;
        break;
      }
      s.carry_tiles = static_cast<uint32_t>(plan::CarryTiles(s.n, s.raw_bits, s.tile_log2));
      s.raw_off = kHeader;
      s.map_off = kHeader + raw_plane;
      uint64_t off = s.map_off;
      if (s.flags & kGroups) {
        if (s.channels < 2 || s.channels > (1u << 20)) {
          err = kBadSection;
          break;
        }
        off += s.channels;
      }
      if (off + 4 > ch.bytes) {
        err = kBadSection;
        break;
      }
      tables_at = off;
      window_bytes = static_cast<uint32_t>(min(static_cast<uint64_t>(sizeof(window)), ch.bytes - off));
    } while (false);
  }
  __syncthreads();
  // (Uniform: a contiguous output has no pointers to check, nor the barriers.)
  if (ch.out.blocks != nullptr && !BlockPointersOk(ch.out) && threadIdx.x == 0) err = kOutputTooSmall;
  __syncthreads();
  if (err != kOk || (s.flags & kStored)) {
    if (err == kOk) PublishState(s, &ws.state[c]);
    if (threadIdx.x == 0) status[c] = err;
    return;
  }
  const uint8_t* in = ch.data;
  {
    constexpr uint32_t kPerThread = (sizeof(window) + kParseThreads - 1) / kParseThreads;
    uint8_t v[kPerThread];
#pragma unroll
    for (uint32_t q = 0; q < kPerThread; ++q) {
      const uint32_t k = threadIdx.x + q * kParseThreads;
      v[q] = k < window_bytes ? in[tables_at + k] : 0;
    }
#pragma unroll
    for (uint32_t q = 0; q < kPerThread; ++q) {
      const uint32_t k = threadIdx.x + q * kParseThreads;
      if (k < sizeof(window)) window[k] = v[q];
    }
  }
  __syncthreads();
  if (s.tables == 1 && !(s.flags & kGroups)) {  // uniform: Parse's state is final up to here
    if (threadIdx.x < 32) ParseOneTable(ch, status, ws, c, tables_at, window, window_bytes);
    return;
  }
  if (threadIdx.x == 0) {
    uint32_t off = 0;
    for (uint32_t t = 0; t < s.tables; ++t) {
      if (off + 4 > window_bytes) {
        err = kBadSection;
        break;
      }
      table_lo[t] = Ld16(window + off);
      table_count[t] = Ld16(window + off + 2);
      table_at[t] = off + 4;
      off += 4 + 2 * table_count[t];
      if (table_lo[t] + table_count[t] > (1u << s.exp_bits) || off > window_bytes) {
        err = kBadSection;
        break;
      }
    }
    const uint64_t dir = tables_at + off;
    const uint64_t end = dir + 4ull * s.tiles;
    const uint64_t start = end + (4 - end % 4) % 4;  // 0..3 zero bytes align tile 0 to 4
    if (start > ch.bytes) err = kBadSection;
    dir_off = dir;
    tiles_start = start;
  }
  __syncthreads();
  if (err != kOk) {
    if (threadIdx.x == 0) status[c] = err;
    return;
  }
  // The directory itself is summed by the Decode blocks, each before its
  // own tiles; here only the zero bytes after it, loaded now and checked
  // after the tables are built.
  const uint64_t pad_at = dir_off + 4ull * s.tiles;
  const uint32_t pad = threadIdx.x == 0 ? LdBytes(in + pad_at, static_cast<uint32_t>(tiles_start - pad_at)) : 0;
  // Frequencies from the window; a warp per table turns them into cumulative
  // sums (8 symbols a lane, then a warp scan).
  __shared__ uint16_t sfreq[kMaxTables][256];
  __shared__ uint16_t scum[kMaxTables][257];
  for (uint32_t k = threadIdx.x; k < s.tables * 256; k += blockDim.x) {
    const uint32_t t = k / 256, sym = k % 256;
    sfreq[t][sym] = (sym >= table_lo[t] && sym < table_lo[t] + table_count[t])
                        ? static_cast<uint16_t>(Ld16(window + table_at[t] + 2 * (sym - table_lo[t])))
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
  if (threadIdx.x == 0) {
    s.dir_off = dir_off;
    s.tiles_start = tiles_start;
    s.bytes = ch.bytes;
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
  // The slot tables (ws.tables[c] for one table, ws.groups[c] for several),
  // 4 consecutive slots a thread, written at once. An empty table's entries
  // are never looked up (no element's channel maps to it: checked above).
  for (uint32_t k = 4 * threadIdx.x; k < s.tables * kM; k += 4 * blockDim.x) {
    const uint32_t t = k / kM, slot0 = k % kM;
    uint32_t v[4];
    SlotEntries(sfreq[t], scum[t], slot0, v);
    uint32_t* dst = s.tables == 1 ? ws.tables[c] : ws.groups[c].slots[t];
    *reinterpret_cast<uint4*>(dst + slot0) = make_uint4(v[0], v[1], v[2], v[3]);
  }
  // The directory's padding, loaded long before, is the last check: its
  // verdict goes into the status, which every later kernel reads first.
  PublishState(s, &ws.state[c]);
  if (threadIdx.x == 0) status[c] = pad != 0 ? kBadSection : kOk;
}

constexpr int kWarpsPerBlock = 8;
constexpr uint32_t kSegRounds = 16;          // rounds a warp decodes before writing their symbols out
constexpr uint32_t kSeg = 32 * kSegRounds;   // symbols of a segment
constexpr uint32_t kSegPieces = kSeg / 256;  // bf16: 16-byte output pieces a lane writes per segment

// A warp's tile word stream flows through a shared-memory ring of
// kRingChunks chunks of 256 words (16 bytes a lane), fetched by cp.async, one
// commit group per chunk. At the start of each segment (16 rounds, which
// read <= 32 words each) the warp frees the chunks it has passed, fetches new
// ones into their slots (rarely more than one), and waits only for the chunks
// the segment may read. Coded tiles read a few words a round, so the fetches
// are usually far ahead. The ring holds the stream from the 16-byte boundary
// at or before its start, so that every fetch is aligned.
constexpr uint32_t kRingChunk = 256;
constexpr uint32_t kRingChunks = 4;
constexpr uint32_t kRing = kRingChunk * kRingChunks;
constexpr uint32_t kRefillRounds = kSegRounds;
// Bytes of raw plane a warp stages per segment (dtypes other than bf16; see
// FetchRaw): a 16-byte lead, fp16's 704 bytes (fp32's first or last 768), a
// margin.
constexpr uint32_t kRawStage = 800;

constexpr uint32_t kMaxPasses = 2;  // tile groups a Decode block takes in turn
struct DecodeShared {
  uint64_t key[checksum::kWordsPerBlock];  // kvsum64 position keys (16-byte aligned: pairs are loaded at once)
  union {
    SlotTable table;     // a single-table chunk's slot table
    GroupTables groups;  // a grouped chunk's slot tables
  };
  alignas(16) uint8_t stage[kWarpsPerBlock][kSeg];
  alignas(16) uint16_t ring[kWarpsPerBlock][kRing];
  alignas(16) uint8_t raw[kWarpsPerBlock][kRawStage];  // dtypes other than bf16: a segment's raw parts (FetchRaw)
  // SumDirectory, for each pass of the block (DecodeKernel): sizes of the
  // tiles before the pass's, a part per warp, and the pass's own entries.
  uint64_t dir_low[kMaxPasses][kWarpsPerBlock];
  uint32_t dir_own[kMaxPasses][kWarpsPerBlock];
};

// Waits until at most `pending` of the newest groups are in flight. A
// refill leaves the ring's 4 chunks fetched from the one being read; the
// next 16 rounds read at most 512 words, 2 or 3 of those chunks, so 1 or 2
// groups may stay in flight.
__device__ __forceinline__ void CpAsyncWaitPending(uint32_t pending) {
  static_assert(kRingChunks == 4 && kRingChunk == 256 && kRefillRounds == 16, "pending is 1 or 2");
  if (pending >= 2) {
    CpAsyncWait<2>();
  } else {
    CpAsyncWait<1>();
  }
}

// A warp writes its output in 16-byte pieces: lane t the piece at 16t + 512i
// of each 4 KiB checksum block, summed in Kvsum64Pairs.
using kvferry::cuda::Kvsum64Pairs;

// A piece wholly inside the chunk, written at dst; `at` is its
// offset in its checksum block.
__device__ __forceinline__ void EmitWholePiece(uint8_t* dst, uint32_t at, uint64_t w0, uint64_t w1,
                                               const uint64_t* key, Kvsum64Pairs* sum) {
  *reinterpret_cast<ulonglong2*>(dst) = make_ulonglong2(w0, w1);
  sum->Add(w0, w1, *reinterpret_cast<const ulonglong2*>(key + at / 8));
}

// Writes the piece at output offset `off` (a multiple of 16): words w0, w1
// holding bytes [off, off + 16), and adds them to the checksum sums. At the
// chunk's end only the bytes before it are written; a partial word is summed
// as the format's tail word, a word wholly past the end not at all.
__device__ __forceinline__ void EmitPiece(const ChunkState& s, uint64_t off, uint64_t w0, uint64_t w1,
                                          const uint64_t* key, Kvsum64Pairs* sum) {
  uint8_t* dst = s.out.At(off);  // 16-aligned, within one output block (block sizes are multiples of 64)
  const uint32_t at = static_cast<uint32_t>(off % checksum::kBlockBytes);
  if (off + 16 <= s.orig_bytes) return EmitWholePiece(dst, at, w0, w1, key, sum);
  const ulonglong2 k = *reinterpret_cast<const ulonglong2*>(key + at / 8);
  auto tail = [&](uint64_t w, uint32_t len, uint8_t* d) {  // writes len < 8 bytes, returns the tail word
    for (uint32_t q = 0; q < len; ++q) d[q] = static_cast<uint8_t>(w >> (8 * q));
    return (w & ((1ull << (8 * len)) - 1)) ^ (static_cast<uint64_t>(len) << 56);
  };
  const uint64_t left = s.orig_bytes - off;  // 1..15
  if (left < 8) {
    w0 = tail(w0, static_cast<uint32_t>(left), dst);
  } else {
    *reinterpret_cast<uint64_t*>(dst) = w0;
    if (left > 8) sum->AddSecond(tail(w1, static_cast<uint32_t>(left - 8), dst + 8), k.y);
  }
  sum->AddFirst(w0, k.x);
}

// bf16: four elements from four raw bytes r and four symbols sy (byte k is
// element k's): element = (raw >> 7) << 15 | symbol << 7 | (raw & 0x7f). Byte
// permutes pair each raw byte with its symbol, three masks place the bits.
__device__ __forceinline__ uint64_t JoinBf16(uint32_t r, uint32_t sy) {
  // v: 16-bit halves symbol << 8 | raw; two selects (SelectBits) where the
  // compiler makes three masks and two ORs of (v & 0x007f007f) |
  // ((v >> 1) & 0x7f807f80) | ((v << 8) & 0x80008000).
  auto two = [](uint32_t v) { return SelectBits<0x80008000u>(v << 8, SelectBits<0x7f807f80u>(v >> 1, v)); };
  return static_cast<uint64_t>(two(__byte_perm(r, sy, 0x7362))) << 32 | two(__byte_perm(r, sy, 0x5140));
}

// Any dtype E: the output word at byte `first` (a multiple of 8) of a
// segment whose first element is e0; only bytes before `limit` (the
// segment's length) are filled.
template <typename E>
__device__ __forceinline__ uint64_t JoinWord(const uint8_t* raw, const uint8_t* st, uint64_t e0, uint32_t first,
                                             uint32_t limit) {
  uint64_t w = 0;
#pragma unroll
  for (uint32_t k = 0; k < 8; k += E::bytes) {
    if (first + k >= limit) break;
    const uint32_t j = (first + k) / E::bytes;  // the element's index in the segment
    const uint32_t r = E::opaque ? 0 : E::raw_bits == 8 ? raw[e0 + j] : Unpack(raw, e0 + j, E::raw_bits);
    w |= static_cast<uint64_t>(E::Join(st[j], r)) << (8 * k);
  }
  return w;
}

// Bit-packed values read from aligned words (raw parts of dtypes other than
// bf16, RAW tiles' symbols): the aligned word at or before p (*sh: the bits
// of it before p); words r shifted right by sh bits into v (LSB-first, one
// word fewer); and value k of width W in v.
__device__ __forceinline__ const uint32_t* AlignedWord(const void* p, uint32_t* sh) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  *sh = 8 * static_cast<uint32_t>(a & 3);
  return reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
}
template <uint32_t kWords>
__device__ __forceinline__ void ShiftWords(const uint32_t* r, uint32_t sh, uint32_t* v) {
#pragma unroll
  for (uint32_t k = 0; k + 1 < kWords; ++k) v[k] = __funnelshift_r(r[k], r[k + 1], sh);
}
template <uint32_t W>
__device__ __forceinline__ uint32_t PackedValue(const uint32_t* v, uint32_t k) {
  const uint32_t bit = k * W, q = bit / 32, b = bit % 32;
  return (b + W > 32 ? __funnelshift_r(v[q], v[q + 1], b) : v[q] >> b) & ((1u << W) - 1);
}

// Dtypes other than bf16, in whole segments: lane t's i-th piece (16 bytes
// of output at 16t + 512i, P = 16 / E::bytes elements) has its raw parts in
// kBytes = P * W / 8 whole bytes of the plane (W = E::raw_bits), read as
// kWords aligned words: up to 6 bytes past the piece's, which the exponent
// section after the plane always holds (a table and the directory).
template <typename E>
struct RawPiece {
  static constexpr uint32_t P = 16 / E::bytes, W = E::raw_bits, kBytes = P * W / 8, kWords = (kBytes + 3) / 4 + 1;
  // The piece's first aligned word; *sh: the bits to shift out of it.
  __device__ __forceinline__ static const uint32_t* Words(const uint8_t* raw, uint64_t e0, uint32_t i, uint32_t* sh) {
    return AlignedWord(raw + (e0 / P + threadIdx.x % 32 + 32 * i) * kBytes, sh);
  }
};

// The pieces of a segment whose raw parts FetchRaw stages: all of fp16's
// and fp8's, two of fp32's four, from piece `first`: 0, or 2 in a carrying
// tile's last segment, whose carry (the segment's last bytes) then goes
// into the stage (PatchCarry).
template <typename E>
__device__ __forceinline__ constexpr uint32_t StagedPieces() {
  return E::raw_bits == 0 ? 0 : min(E::bytes, 2u);
}
template <typename E>
__device__ __forceinline__ uint32_t FirstStaged(bool carry_seg) {
  return carry_seg ? E::bytes - StagedPieces<E>() : 0;
}

// Starts copying the raw parts of a whole segment's staged pieces (at e0)
// into the warp's raw stage rs with cp.async, one commit group, from the
// 16-byte boundary at or before them to 6 bytes past them (JoinPiece's
// aligned words), rounded up to 16: at most 21 bytes past their end, which a
// chunk with a whole segment always holds (a table, the directory and a tile
// of at least 128 bytes follow its plane). *lead: where the first piece
// starts in rs.
template <typename E>
__device__ __forceinline__ void FetchRaw(const uint8_t* raw, uint64_t e0, uint32_t first, uint8_t* rs,
                                         uint32_t* lead) {
  using R = RawPiece<E>;
  const uint8_t* src = raw + (e0 / R::P + 32 * first) * R::kBytes;
  const uint8_t* base = src - reinterpret_cast<uintptr_t>(src) % 16;
  *lead = static_cast<uint32_t>(src - base);
  const uint32_t chunks = (*lead + 32 * StagedPieces<E>() * R::kBytes + 6 + 15) / 16;
  for (uint32_t c = threadIdx.x % 32; c < chunks; c += 32) CpAsync16(rs + 16 * c, base + 16 * c);
  CpAsyncCommit();
}

// Lane t's i-th piece of a whole segment at e0 (dtypes other than bf16): its
// symbols from the stage st joined with its raw parts, from the raw stage
// rs when FetchRaw staged them there (rs not null), else from the plane.
template <typename E>
__device__ __forceinline__ ulonglong2 JoinPiece(const uint8_t* raw, const uint8_t* st, const uint8_t* rs, uint32_t lead,
                                                uint32_t first, uint64_t e0, uint32_t i) {
  using R = RawPiece<E>;
  constexpr uint32_t P = R::P, W = R::W, kWords = R::kWords;
  const uint32_t j0 = P * (threadIdx.x % 32) + 32 * P * i;  // the piece's first element in the segment
  uint32_t v[kWords] = {};                                  // the raw bits, LSB-first
  if constexpr (W > 0) {
    uint32_t sh;
    const uint32_t* w = rs != nullptr && i - first < StagedPieces<E>()  // (unsigned: i >= first)
                            ? AlignedWord(rs + lead + (threadIdx.x % 32 + 32 * (i - first)) * R::kBytes, &sh)
                            : R::Words(raw, e0, i, &sh);
    uint32_t r[kWords];
#pragma unroll
    for (uint32_t k = 0; k < kWords; ++k) r[k] = w[k];
    ShiftWords<kWords>(r, sh, v);
  }
  uint32_t sy[P / 4];  // P symbols, byte k the k-th
#pragma unroll
  for (uint32_t k = 0; k < P / 4; ++k) sy[k] = reinterpret_cast<const uint32_t*>(st + j0)[k];
  uint32_t o[4] = {0, 0, 0, 0};
#pragma unroll
  for (uint32_t k = 0; k < P; ++k) {
    uint32_t r = 0;
    if constexpr (W > 0) r = PackedValue<W>(v, k);
    const uint32_t e = E::Join((sy[k / 4] >> (8 * (k % 4))) & 0xff, r);
    o[k * E::bytes / 4] |= e << (8 * (k * E::bytes % 4));
  }
  return make_ulonglong2(o[0] | static_cast<uint64_t>(o[1]) << 32, o[2] | static_cast<uint64_t>(o[3]) << 32);
}

// LoadRaw8 for a whole segment from an 8-byte aligned plane: no checks.
__device__ __forceinline__ void LoadRaw8Whole(const uint8_t* raw, uint64_t e0, uint2* raw8) {
  const uint32_t lane = threadIdx.x % 32;
#pragma unroll
  for (uint32_t i = 0; i < kSegPieces; ++i) raw8[i] = *reinterpret_cast<const uint2*>(raw + e0 + 8 * lane + 256 * i);
}

// Loads the bf16 raw bytes of lane t's pieces of the segment at e0: elements
// e0 + 8t + 256i .. + 8 (i = 0, 1).
__device__ __forceinline__ void LoadRaw8(const ChunkState& s, const uint8_t* raw, uint64_t e0, bool aligned,
                                         uint2* raw8) {
  const uint32_t lane = threadIdx.x % 32;
  if (aligned && e0 + kSeg <= s.n) return LoadRaw8Whole(raw, e0, raw8);  // a whole segment
  for (uint32_t i = 0; i < kSegPieces; ++i) {
    const uint64_t e = e0 + 8 * lane + 256 * i;
    if (e + 8 <= s.n && aligned) {
      raw8[i] = *reinterpret_cast<const uint2*>(raw + e);
    } else {
      uint64_t r = 0;
      for (uint32_t k = 0; k < 8 && e + k < s.n; ++k) r |= static_cast<uint64_t>(raw[e + k]) << (8 * k);
      raw8[i] = make_uint2(static_cast<uint32_t>(r), static_cast<uint32_t>(r >> 32));
    }
  }
}

// A carrying tile's last segment (docs/codec-format.md, the carry): its last
// kCarryBytes of raw plane are not in the plane but are u16 lane of `carry`
// (on every lane). bf16: they are piece 1 of lanes 24..31 (raw8); other
// dtypes: the end of the segment's staged raw parts (rs, at lead).
template <typename E>
__device__ __forceinline__ void PatchCarry(uint32_t carry, uint2* raw8, uint8_t* rs, uint32_t lead) {
  // The stage holds the segment's last StagedPieces() pieces (FirstStaged).
  const uint32_t lane = threadIdx.x % 32;
  static_assert(plan::kCarryBytes == 64 && kSegPieces == 2, "the carry is the last 8 pieces of 8 bf16 elements");
  if constexpr (kIsBf16<E>) {
    uint32_t v[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) v[k] = __shfl_sync(0xffffffffu, carry, (4 * lane + k) % 32) & 0xffff;
    if (lane >= 24) raw8[1] = make_uint2(v[0] | v[1] << 16, v[2] | v[3] << 16);
  } else {
    uint8_t* at = rs + lead + 32 * StagedPieces<E>() * RawPiece<E>::kBytes - plan::kCarryBytes + 2 * lane;
    at[0] = static_cast<uint8_t>(carry);
    at[1] = static_cast<uint8_t>(carry >> 8);
  }
}

// bf16: a whole segment (1 KiB of output at byte b0, one piece of the
// output at dst = its address + 16 lane) joined from its staged symbols st
// and raw bytes raw8, written and summed without checks.
__device__ __forceinline__ void EmitWholeSegmentBf16(uint8_t* dst, uint64_t b0, const uint8_t* st, const uint2* raw8,
                                                     const uint64_t* key, Kvsum64Pairs* sum) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t at = static_cast<uint32_t>(b0 % checksum::kBlockBytes) + 16 * lane;
#pragma unroll
  for (uint32_t i = 0; i < kSegPieces; ++i) {
    const uint2 sy = *reinterpret_cast<const uint2*>(st + 8 * lane + 256 * i);
    EmitWholePiece(dst + 512 * i, at + 512 * i, JoinBf16(raw8[i].x, sy.x), JoinBf16(raw8[i].y, sy.y), key, sum);
  }
}

// A warp joins the kSeg staged symbols of elements [e0, e0 + kSeg) with the
// raw plane, writes and checksums them in pieces; at the end of a 4 KiB
// output block (or of the chunk) it adds the block's digest. bf16's raw
// bytes (raw8, LoadRaw8) are loaded ahead; other dtypes' raw parts of a whole
// segment are in the raw stage rs (FetchRaw) or in the plane (rs null).
template <typename E>
__device__ __forceinline__ void EmitSegment(const ChunkState& s, const uint8_t* raw, uint64_t e0, const uint8_t* st,
                                            const uint2* raw8, const uint8_t* rs, uint32_t lead, uint32_t first,
                                            const uint64_t* key,
                                            Kvsum64Pairs* sum, unsigned long long* gsum) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t b0 = e0 * E::bytes, b1 = min(s.orig_bytes, b0 + static_cast<uint64_t>(kSeg) * E::bytes);
  if constexpr (kIsBf16<E>) {  // a piece is 8 symbols and 8 raw bytes
    // A whole segment (1 KiB) inside one output block: no per-piece checks.
    const Addr& out = s.out;
    if (b1 - b0 == 2 * kSeg && (out.blocks == nullptr || b0 % out.bb + 2 * kSeg <= out.bb)) {
      EmitWholeSegmentBf16(out.At(b0) + 16 * lane, b0, st, raw8, key, sum);
    } else {
      for (uint32_t i = 0; i < kSegPieces; ++i) {
        const uint64_t off = b0 + 16 * lane + 512 * i;
        if (off >= b1) break;
        const uint2 sy = *reinterpret_cast<const uint2*>(st + 8 * lane + 256 * i);
        EmitPiece(s, off, JoinBf16(raw8[i].x, sy.x), JoinBf16(raw8[i].y, sy.y), key, sum);
      }
    }
  } else {
    const uint32_t limit = static_cast<uint32_t>(b1 - b0);
    if (limit == kSeg * E::bytes) {  // a whole segment: whole pieces, E::bytes a lane
#pragma unroll
      for (uint32_t i = 0; i < E::bytes; ++i) {
        const ulonglong2 w = JoinPiece<E>(raw, st, rs, lead, first, e0, i);
        EmitPiece(s, b0 + 16 * lane + 512 * i, w.x, w.y, key, sum);
      }
    } else {
      for (uint32_t first = 16 * lane; first < limit; first += 512) {
        EmitPiece(s, b0 + first, JoinWord<E>(raw, st, e0, first, limit), JoinWord<E>(raw, st, e0, first + 8, limit),
                  key, sum);
      }
    }
  }
  if (b1 % checksum::kBlockBytes == 0 || b1 == s.orig_bytes) {
    const uint64_t block = (b1 - 1) / checksum::kBlockBytes;
    sum->Finish(block, b1 - block * checksum::kBlockBytes, gsum);
  }
}

// A ring piece of a stream at an odd address: the 16 chunk bytes from g + 1
// (g 16-byte aligned; ring bytes b .. b + 16, of which those before `end`
// are the stream's) into dst, by aligned loads shifted a byte, synchronously.
__device__ __forceinline__ void FetchShifted(const uint8_t* g, uint32_t b, uint32_t end, uint16_t* dst) {
  uint32_t v[4];
  if (b + 19 <= end) {  // the 20 bytes from g are all the chunk's
    const uint32_t* w = reinterpret_cast<const uint32_t*>(g);
    uint32_t r[5];
#pragma unroll
    for (uint32_t k = 0; k < 5; ++k) r[k] = __ldg(w + k);
    ShiftWords<5>(r, 8, v);
  } else {  // the stream's end: byte by byte, zeros after it
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t at = b + 4 * k;
      v[k] = at < end ? LdBytes(g + 1 + 4 * k, min(4u, end - at)) : 0;
    }
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
}

// One warp, one coded tile: 32 rANS lanes reading the word stream through the
// ring; every 16 rounds the staged symbols are joined with the raw plane and
// written out (EmitSegment). kGroups: the chunk maps channels to tables.
// raw: the raw plane less the carries of the tiles before this one, so that
// raw + (a byte's offset in the whole plane) is that byte; `carries`: the
// tile's last kCarryBytes of it are in the lanes' final states instead.
template <typename E, bool kGroups, bool kOdd, typename TableAt>
__device__ __forceinline__ bool DecodeCodedTile(const ChunkState& s, const uint8_t* in, const uint8_t* tile,
                                                uint32_t size, uint64_t begin, uint32_t n, const TableAt& table_at,
                                                uint8_t* st, uint16_t (*rings)[kRing], uint8_t* rs, const uint64_t* key,
                                                const uint8_t* raw, bool carries, bool raw_aligned,
                                                unsigned long long* gsum) {
  const uint32_t lane = threadIdx.x % 32;
  bool bad = size < 128;
  uint32_t x = bad ? kL : Ld32(tile + 4 * lane);
  bad |= x < kL;
  const uint8_t* stream = tile + 128;
  const uint32_t nbytes = bad ? 0 : size - 128;
  const uint32_t nwords = nbytes / 2;
  // This warp's ring: rings[warp], at byte ring_off of `rings`. As rings
  // are 2 kRing bytes apart, word w of the stream is at byte
  // ring_off | (2 w mod 2 kRing): one LOP3 from 2 w.
  const uint32_t warp = threadIdx.x / 32, ring_off = warp * 2 * kRing;
  uint16_t* ring = rings[warp];
  static_assert((2 * kRing & (2 * kRing - 1)) == 0, "the ring is a power of two bytes");
  // Ring byte j holds stream byte j - lead (mod the ring): the fetches start
  // at the 16-byte boundary `base`, lead bytes before the stream (bytes of
  // the chunk, never used), and stop at the stream's end. A stream at an odd
  // address (a chunk at an odd address) is fetched one byte on, so that its
  // words stay 2-byte aligned in the ring: ring byte j holds chunk byte
  // base + odd + j.
  const uint8_t* base = stream - reinterpret_cast<uintptr_t>(stream) % 16;
  constexpr uint32_t odd = kOdd ? 1 : 0;  // kOdd: the stream (the tile) is at an odd address
  const uint32_t lead = static_cast<uint32_t>(stream - base) - odd, end = bad ? 0 : lead + nbytes;
  uint32_t fetched = 0;  // chunks fetched so far; chunk c lives in slot c % kRingChunks
  // The warp has read all ring bytes before at; the next kRefillRounds rounds
  // read bytes before at + 64 * kRefillRounds.
  auto refill = [&](uint32_t at) {
    __syncwarp();
    for (; fetched < at / (2 * kRingChunk) + kRingChunks; ++fetched) {
      const uint32_t b = fetched * kRingChunk * 2 + 16 * lane;
      uint16_t* dst = ring + (fetched % kRingChunks) * kRingChunk + 8 * lane;
      if constexpr (kOdd) {
        FetchShifted(base + b, b, end, dst);
      } else if (b + 16 <= end) {
        CpAsync16(dst, base + b);
      } else {  // the stream's last bytes and zeros: no read past its end
        for (uint32_t k = 0; k < 4; ++k) {
          const uint32_t at = b + 4 * k;
          if (at + 4 <= end || at >= end) {
            CpAsync4(dst + 2 * k, at < end ? base + at : base, at < end ? 4 : 0);
          } else {  // a last word short of 4 bytes (a chunk at an address 2 mod 4)
            *reinterpret_cast<uint32_t*>(dst + 2 * k) = LdBytes(base + at, end - at);
          }
        }
      }
      CpAsyncCommit();
    }
    CpAsyncWaitPending(fetched - 1 - (at + 64 * kRefillRounds - 1) / (2 * kRingChunk));
    __syncwarp();
  };
  // The ring byte of the next word: lead + 2 x the words read so far.
  uint32_t wb = lead;
  uint32_t ch_idx = kGroups ? static_cast<uint32_t>((begin + lane) % s.channels) : 0;
  const uint32_t ch_step = kGroups ? static_cast<uint32_t>(32 % s.channels) : 0;
  const uint32_t C = static_cast<uint32_t>(s.channels);
  const uint8_t* map = in + s.map_off;
  const unsigned lt = (1u << lane) - 1;
  Kvsum64Pairs sum;
  auto round = [&](uint32_t r, bool active) {
    uint32_t sym;  // the decoded symbol; y: the state before renormalisation
    const uint32_t y = table_at(kGroups ? map[ch_idx] : 0u, x, &sym);
    if (r % 2 == 1) {  // lanes refill after odd rounds only (a segment starts at an even round)
      const bool need = active && y < kL;
      const unsigned mask = __ballot_sync(0xffffffffu, need);
      // Every lane reads a word (volatile: not moved under `need`, which would
      // cost a branch a round).
      const uint32_t at = ring_off | ((wb + 2 * __popc(mask & lt)) & (2 * kRing - 2));
      const uint32_t word = *reinterpret_cast<volatile const uint16_t*>(reinterpret_cast<const uint8_t*>(rings) + at);
      x = need ? (y << 16) | word : (active ? y : x);
      wb += 2 * __popc(mask);
    } else {
      x = active ? y : x;
    }
    st[r * 32 + lane] = static_cast<uint8_t>(sym);
    if (kGroups) {
      ch_idx += ch_step;
      if (ch_idx >= C) ch_idx -= C;
    }
  };
  // The first element of the segment that has the carry: a carrying tile's
  // last (a carrying tile is whole); none (all ones) otherwise. One
  // register for `carries` and n.
  const uint32_t carry_at = carries ? n - kSeg : ~0u;
  uint32_t seg0 = 0;  // the first segment for the general loop below
  if constexpr (kIsBf16<E>) {
    // bf16 into a contiguous output: every segment before the tile's last is
    // whole, without the carry (only a tile's last segment has it), and lies
    // in the output as one piece, so it goes without the general loop's
    // checks. Measured on an H100: see docs/performance.md.
    if (s.out.blocks == nullptr && raw_aligned) {
      uint8_t* const dst = s.out.data + 2 * begin + 16 * lane;
      for (const uint32_t lean = (n - 1) / kSeg; seg0 < lean; ++seg0) {
        const uint64_t e0 = begin + seg0 * kSeg;
        refill(wb);
        uint2 raw8[kSegPieces];
        LoadRaw8Whole(raw, e0, raw8);
#pragma unroll
        for (uint32_t r = 0; r < kSegRounds; ++r) round(r, true);
        __syncwarp();
        EmitWholeSegmentBf16(dst + 2 * seg0 * kSeg, 2 * e0, st, raw8, key, &sum);
        const uint64_t b1 = 2 * (e0 + kSeg);  // never the chunk's end: a later segment follows
        if (b1 % checksum::kBlockBytes == 0) sum.Finish(b1 / checksum::kBlockBytes - 1, checksum::kBlockBytes, gsum);
        __syncwarp();
      }
    }
  }
  for (uint32_t seg = seg0; seg * kSeg < n; ++seg) {
    uint2 raw8[kSegPieces];
    uint32_t rlead = 0;
    const bool whole = seg * kSeg + kSeg <= n;
    const bool carry_seg = seg * kSeg == carry_at;
    const uint32_t first = FirstStaged<E>(carry_seg);  // 0 for bf16, which stages nothing
    refill(wb);  // before FetchRaw: the ring's waits count its own groups, the newest
    if constexpr (kIsBf16<E>) {
      LoadRaw8(s, raw, begin + seg * kSeg, raw_aligned, raw8);
    } else if (whole) {
      FetchRaw<E>(raw, begin + seg * kSeg, first, rs, &rlead);
    }
    if (whole) {  // every lane active in all 16 rounds
#pragma unroll
      for (uint32_t r = 0; r < kSegRounds; ++r) round(r, true);
    } else {
      const uint32_t rounds = (n - seg * kSeg + 31) / 32;
      for (uint32_t r = 0; r < rounds; ++r) round(r, seg * kSeg + r * 32 + lane < n);
    }
    if (!kIsBf16<E> && whole) CpAsyncWait<0>();
    __syncwarp();
    if (carry_seg) {  // the lanes' states are final: 2^16 | their carry
      PatchCarry<E>(x, raw8, rs, rlead);
      __syncwarp();
    }
    EmitSegment<E>(s, raw, begin + seg * kSeg, st, raw8, whole ? rs : nullptr, rlead, first, key, &sum, gsum);
    __syncwarp();
  }
  CpAsyncWait<0>();
  const uint32_t wpos = (wb - lead) / 2;
  bad |= wpos > nwords;
  bad |= carry_at != ~0u ? x >> 16 != 1 : x != kL;  // back at the start: 2^16, or 2^16 | the lane's carry
  bad |= ((128 + 2 * wpos + 3) & ~3u) != size;
  return __any_sync(0xffffffffu, bad);
}

// A RAW tile's symbols [e0, e0 + kSeg) (of its n) into the stage st: lane t
// unpacks groups of 8 (X = E::exp_bits bytes each) t and t + 32, from aligned
// words where they lie inside the tile's `size` bytes, else byte by byte.
template <typename E>
__device__ __forceinline__ void UnpackRawSymbols(const uint8_t* tile, uint32_t size, uint32_t e0, uint32_t n,
                                                 uint8_t* st) {
  constexpr uint32_t X = E::exp_bits, kWords = (X + 3) / 4 + 1;
  const uint32_t lane = threadIdx.x % 32;
#pragma unroll
  for (uint32_t j = 0; j < kSeg / 256; ++j) {
    const uint32_t g = lane + 32 * j;  // the group within the segment
    if (e0 + 8 * g >= n) break;
    uint32_t sh;
    const uint32_t* w = AlignedWord(tile + (e0 / 8 + g) * X, &sh);
    uint32_t sy[2] = {0, 0};  // symbol k in byte k
    if (reinterpret_cast<const uint8_t*>(w + kWords) <= tile + size) {
      uint32_t r[kWords], v[kWords - 1];
#pragma unroll
      for (uint32_t k = 0; k < kWords; ++k) r[k] = __ldg(w + k);
      ShiftWords<kWords>(r, sh, v);
#pragma unroll
      for (uint32_t k = 0; k < 8; ++k) sy[k / 4] |= PackedValue<X>(v, k) << (8 * (k % 4));
    } else {
#pragma unroll
      for (uint32_t k = 0; k < 8; ++k) sy[k / 4] |= Unpack(tile, e0 + 8 * g + k, X) << (8 * (k % 4));
    }
    *reinterpret_cast<uint2*>(st + 8 * g) = make_uint2(sy[0], sy[1]);
  }
}

// Warp `warp` decodes tile t of chunk c (RAW or coded) into the output; its
// directory entry and place come from the block's SumDirectory.
template <typename E>
__device__ __forceinline__ bool DecodeTile(const ChunkState& s, const uint8_t* in, const Workspace& ws, int c,
                                           uint32_t t, uint32_t pass, DecodeShared& sh) {
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // The tile's place (SumDirectory's sums), checked: a size is a multiple
  // of 4 within the chunk, and the last tile ends where the chunk does.
  uint64_t tile_off = s.tiles_start;
  for (uint32_t w = 0; w < blockDim.x / 32; ++w) tile_off += sh.dir_low[pass][w];
  for (uint32_t w = 0; w < warp; ++w) tile_off += sh.dir_own[pass][w] & ~kTileRaw;
  const uint32_t entry = sh.dir_own[pass][warp];
  const uint32_t size = entry & ~kTileRaw;
  if (entry % 4 != 0 || tile_off + size > s.bytes || (t + 1 == s.tiles && tile_off + size != s.bytes)) return true;
  // The block's checksum slot (SumSlot); other dtypes keep slot 0, which costs
  // their function (not inlined) no extra spills.
  unsigned long long* gsum = SumSlot(ws.sum, c, kIsBf16<E> ? blockIdx.x : 0);
  const uint64_t begin = static_cast<uint64_t>(t) << s.tile_log2;
  const uint32_t n = static_cast<uint32_t>(min(uint64_t{1} << s.tile_log2, s.n - begin));
  const uint8_t* tile = in + tile_off;
  // The whole plane's offsets (see DecodeCodedTile) from the tile's raw part on.
  const bool carries = t < s.carry_tiles;
  const uint8_t* raw = in + s.raw_off - plan::CarriedBefore(t, s.carry_tiles);
  uint8_t* st = sh.stage[warp];
  const bool raw_aligned = reinterpret_cast<uintptr_t>(raw) % 8 == 0;
  if (entry & kTileRaw) {
    const uint32_t packed = ((n + 7) / 8 * E::exp_bits + 3) & ~3u;  // then the carry, if any
    if (size != packed + (carries ? plan::kCarryBytes : 0)) return true;
    Kvsum64Pairs sum;
    for (uint32_t e0 = 0; e0 < n; e0 += kSeg) {
      uint2 raw8[kSegPieces];
      uint32_t rlead = 0;
      const bool carry_seg = carries && e0 + kSeg == n;
      const uint32_t first = FirstStaged<E>(carry_seg);
      if (kIsBf16<E>) {
        LoadRaw8(s, raw, begin + e0, raw_aligned, raw8);
      } else if (carry_seg) {
        FetchRaw<E>(raw, begin + e0, first, sh.raw[warp], &rlead);
      }
      UnpackRawSymbols<E>(tile, packed, e0, n, st);
      if (carry_seg) {
        if (!kIsBf16<E>) CpAsyncWait<0>();
        __syncwarp();
        const uint32_t carry = Ld16(tile + packed + 2 * lane);  // 4-byte aligned tile, packed a multiple of 4
        PatchCarry<E>(carry, raw8, sh.raw[warp], rlead);
      }
      __syncwarp();
      EmitSegment<E>(s, raw, begin + e0, st, raw8, carry_seg ? sh.raw[warp] : nullptr, rlead, first, sh.key, &sum,
                     gsum);
      __syncwarp();
    }
    return false;
  }
  if (s.tables == 1) {  // channel groups with one table need no channel map lookups
    const uint32_t* table = sh.table;
    auto lookup = [table](uint32_t, uint32_t x, uint32_t* sym) {
      const uint32_t e = table[x & (kM - 1)];
      *sym = (e >> 12) & 0xff;
      const uint32_t xs = x >> kProbBits;
      return (e & 0xfff) * xs + (xs + (e >> 20));  // freq (x >> 8) + slot - cum
    };
    if (reinterpret_cast<uintptr_t>(tile) % 2 != 0) {
      return DecodeCodedTile<E, false, true>(s, in, tile, size, begin, n, lookup, st, sh.ring, sh.raw[warp], sh.key,
                                             raw, carries, raw_aligned, gsum);
    }
    return DecodeCodedTile<E, false, false>(s, in, tile, size, begin, n, lookup, st, sh.ring, sh.raw[warp], sh.key,
                                            raw, carries, raw_aligned, gsum);
  }
  // Several tables: always channel groups (Parse); their slot tables are in
  // shared memory.
  const GroupTables& g = sh.groups;
  auto lookup = [&g](uint32_t tb, uint32_t x, uint32_t* sym) {
    const uint32_t e = g.slots[tb][x & (kM - 1)];
    *sym = (e >> 12) & 0xff;
    const uint32_t xs = x >> kProbBits;
    return (e & 0xfff) * xs + (xs + (e >> 20));
  };
  if (reinterpret_cast<uintptr_t>(tile) % 2 != 0) {
    return DecodeCodedTile<E, true, true>(s, in, tile, size, begin, n, lookup, st, sh.ring, sh.raw[warp], sh.key,
                                          raw, carries, raw_aligned, gsum);
  }
  return DecodeCodedTile<E, true, false>(s, in, tile, size, begin, n, lookup, st, sh.ring, sh.raw[warp], sh.key,
                                         raw, carries, raw_aligned, gsum);
}

// DecodeTile for dtypes other than bf16, each its own copy. Not inlined:
// its registers do not crowd the bf16 path's (it reads the chunk's state
// from memory).
__device__ __noinline__ bool DecodeTileAnyDtype(const ChunkState* s, const uint8_t* in, const Workspace ws, int c,
                                                uint32_t t, DecodeShared* sh) {
  bool bad = true;
  WithElem(s->dtype, [&](auto e) {
    using E = decltype(e);
    if constexpr (!kIsBf16<E>) bad = DecodeTile<E>(*s, in, ws, c, t, 0, *sh);
  });
  return bad;
}

// The block's tiles [t0, t0 + warps) start after the sizes of tiles [0, t0)
// (Parse checked that the directory lies inside the chunk): every thread sums
// its share of those entries, loads in flight together; each warp's part goes
// to low[warp], the block's own entries to own[] (0 past the last tile).
// Measured on an H100 (64 MiB): Parse 13.1 -> 8.2 us, Decode 64.4 -> 66.1 us,
// against Parse scanning the whole directory into per-tile offsets.
__device__ __forceinline__ void SumDirectory(const uint8_t* dir, uint32_t tiles, uint32_t t0, uint32_t warps,
                                             uint64_t* low, uint32_t* own) {
  const bool aligned = reinterpret_cast<uintptr_t>(dir) % 4 == 0;
  auto entry = [&](uint32_t k) {
    return aligned ? __ldg(reinterpret_cast<const uint32_t*>(dir) + k) : Ld32(dir + 4ull * k);
  };
  uint64_t sum = 0;
  if (aligned) {
    // Entries to a 16-byte boundary one at a time, then four at a time (one
    // 16-byte load), then the rest one at a time. Measured on an H100
    // against one entry a load: decode 64 MiB 932-949 -> 957-979 GB/s, 256
    // MiB 1256-1279 -> 1283-1297 GB/s.
    const uint32_t head = min(t0, static_cast<uint32_t>((16 - reinterpret_cast<uintptr_t>(dir) % 16) % 16 / 4));
    const uint32_t pieces = (t0 - head) / 4, tail0 = head + 4 * pieces;
    const uint4* q = reinterpret_cast<const uint4*>(dir + 4 * head);
    if (threadIdx.x < head) sum += entry(threadIdx.x) & ~kTileRaw;
    if (tail0 + threadIdx.x < t0) sum += entry(tail0 + threadIdx.x) & ~kTileRaw;
#pragma unroll 4
    for (uint32_t k = threadIdx.x; k < pieces; k += blockDim.x) {
      const uint4 v = __ldg(q + k);
      // Each size < 2^31, so a pair's sum fits 32 bits.
      sum += (v.x & ~kTileRaw) + (v.y & ~kTileRaw) + static_cast<uint64_t>((v.z & ~kTileRaw) + (v.w & ~kTileRaw));
    }
  } else {
#pragma unroll 4
    for (uint32_t k = threadIdx.x; k < t0; k += blockDim.x) sum += entry(k) & ~kTileRaw;
  }
  sum = WarpSum(sum);
  if (threadIdx.x % 32 == 0) low[threadIdx.x / 32] = sum;
  if (threadIdx.x < warps) own[threadIdx.x] = t0 + threadIdx.x < tiles ? entry(t0 + threadIdx.x) : 0;
}

// Where a one-table coded chunk's directory lies, read from the chunk's own
// bytes (header and table header) rather than from Parse's state, so that a
// Decode block can sum its directory entries before Parse is done. Every
// field is bounds-checked against the descriptor's byte count, so the
// loads stay inside the chunk whatever its bytes are; after the wait the
// guess is used only where it equals what Parse found (a chunk Parse
// refuses is not decoded at all).
struct DirGuess {
  bool ok = false;
  bool two = false;  // DecodeKernel's two passes, as that chunk would take them
  uint32_t tiles = 0;
  uint64_t dir = 0;
};
__device__ __forceinline__ DirGuess GuessDirectory(const uint8_t* in, uint64_t bytes, uint32_t passes) {
  DirGuess g;
  if (bytes < kHeader) return g;
  const uint32_t dtype = in[5], flags = Ld16(in + 6), tables = Ld16(in + 28);
  const uint32_t tiles = Ld32(in + 32);
  const uint64_t raw_plane = Ld64(in + 40);
  if ((flags & (kStored | kGroups)) || tables != 1 || bytes < kHeader + 4 || raw_plane > bytes - kHeader - 4) {
    return g;
  }
  const uint64_t at = kHeader + raw_plane;  // the table: first symbol, count, frequencies
  const uint64_t dir = at + 4 + 2ull * Ld16(in + at + 2);
  if (dir + 4ull * tiles > bytes) return g;
  g.ok = true;
  g.two = passes > 1 && dtype == kBf16Dtype;
  g.tiles = tiles;
  g.dir = dir;
  return g;
}

// The block's directory sums (SumDirectory) for each of its passes, as
// DecodeKernel lays them out (two: a block takes groups b and b + span).
__device__ __forceinline__ void SumBlockDirectory(const uint8_t* dir, uint32_t tiles, bool two, DecodeShared* sh) {
  const uint32_t warps = blockDim.x / 32;
  const uint32_t groups = (tiles + warps - 1) / warps, span = two ? (groups + 1) / 2 : groups;
  if (blockIdx.x >= span) return;
  const uint32_t own_passes = two && blockIdx.x + span < groups ? 2 : 1;
  for (uint32_t p = 0; p < own_passes; ++p) {
    SumDirectory(dir, tiles, (blockIdx.x + p * span) * warps, warps, sh->dir_low[p], sh->dir_own[p]);
  }
}

// GuessDirectory, and where it finds the directory, the block's sums of it
// (SumBlockDirectory); returns the directory's offset, 0 if not found. For a
// chunk that Parse accepts with its directory there, the header's tile count
// and dtype are Parse's too.
__device__ __forceinline__ uint64_t SumGuessedDirectory(const DeviceChunk* chunk, uint32_t passes, DecodeShared* sh) {
  const uint8_t* in = chunk->data;
  const DirGuess g = GuessDirectory(in, chunk->bytes, passes);
  if (!g.ok) return 0;
  SumBlockDirectory(in + g.dir, g.tiles, g.two, sh);
  return g.dir;
}

// WarpsPerTileBlock warps per block (8, or fewer for a call with few tiles),
// one tile each (blockIdx.y = chunk): block b takes the chunk's group b of
// `warps` tiles. A tile decodes straight into the output, checksummed on the
// way (FinishKernel compares the sum). A single-table chunk keeps its slot
// table in shared memory, a grouped chunk its 16 slot tables. STORED chunks
// are copied (and checksummed) 16 KiB a warp.
// passes = 2 (a call whose grid is more than one wave of blocks): a coded
// bf16 chunk of one table is decoded by its first `span` blocks, half its
// groups, each block taking groups b and b + span in turn. A warp starts its
// second tile as soon as its first is done, in a block already set up (keys,
// table, both groups' directory sums), instead of waiting for a whole block
// of the second wave to be scheduled and set up. Measured on an H100 against
// one group a block, bf16: 256 MiB decode 1281-1289 -> 1306-1312 GB/s, 16 x
// 4 MiB 915-922 -> 939-945 (two passes), 64 MiB 940-947 -> 966-969 (one pass;
// the restructured kernel spills 40/108 bytes instead of 84/168). The other
// chunks keep one group a block: in two passes fp16 and fp8 decoded 9-12%
// slower and KV-aware bf16 5% (the other dtypes' function, not inlined,
// spilled more).
// Before Parse is done the block computes the checksum's position keys.
// kSmall: a call of few tiles (fewer warps a block than kWarpsPerBlock,
// WarpsPerTileBlock), which has at most one warp a scheduler and does not
// use the occupancy: that instance has the registers to spill nothing (122
// against 64). Measured on an H100: one 4 MiB chunk decodes 1-3.5 us faster
// (bf16 42.9-44.0 -> 41.6-42.5 us, fp32 72.4-78.0 -> 68.8-69.1 us, KV-aware
// 99.1-100.1 -> 93.7-94.6 us).
template <bool kSmall = false>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kSmall ? 1 : 4)
    DecodeKernel(const DeviceChunk* chunks, int32_t* status, Workspace ws, uint32_t passes) {
  extern __shared__ uint8_t smem_raw[];
  DecodeShared& sh = *reinterpret_cast<DecodeShared*>(smem_raw);
  const int c = blockIdx.y;
  const uint32_t warps = blockDim.x / 32;  // WarpsPerTileBlock, at most kWarpsPerBlock
  for (uint32_t k = threadIdx.x; k < checksum::kWordsPerBlock; k += blockDim.x) sh.key[k] = checksum::Key(k);
  // A small call's one-table chunk: the block's directory sums before Parse
  // is done (SumGuessedDirectory; 0: not found). Measured on an H100: one 4
  // MiB chunk 21.8-22.0 -> 21.1-21.3 us. The other instance spills about
  // ten times more with it (64 MiB decode 1094-1103 -> 930-939 GB/s).
  uint64_t guessed_dir = 0;
  if constexpr (kSmall) guessed_dir = SumGuessedDirectory(chunks + c, passes, &sh);
  WaitForPrevious();
  // What depends on nothing loaded here loads at once, before the status
  // is known (the workspace's state, table and the chunk's address are there
  // whatever it is): the status, the state, the chunk's address, and the
  // slot table of a one-table chunk (a grouped chunk's tables overwrite it
  // below, each entry from the same thread: BlockCopy4).
  auto copy16 = [](uint4* dst, const uint4* src, uint32_t n) {
    BlockCopy4(
        n, [src](uint32_t i) { return src[i]; }, [dst](uint32_t i, const uint4& v) { dst[i] = v; });
  };
  const int32_t chunk_status = status[c];
  const ChunkState s = ws.state[c];
  const uint8_t* in = chunks[c].data;
  copy16(reinterpret_cast<uint4*>(sh.table), reinterpret_cast<const uint4*>(ws.tables[c]), kM / 4);
  if (chunk_status != kOk) return;  // uniform for the block
  // The chunk's groups of `warps` tiles: block b takes group b, and in a
  // call of more than a wave of blocks (passes 2) a coded bf16 chunk of one
  // table is spread over its first `span` blocks instead, block b taking
  // groups b and b + span in turn.
  const bool two = passes > 1 && s.dtype == kBf16Dtype && !(s.flags & kStored) && s.tables == 1;
  const uint32_t groups = (s.tiles + warps - 1) / warps, span = two ? (groups + 1) / 2 : groups;
  if (blockIdx.x >= span) return;
  const uint32_t own_passes = two && blockIdx.x + span < groups ? 2 : 1;
  if (!(s.flags & kStored) && guessed_dir != s.dir_off) SumBlockDirectory(in + s.dir_off, s.tiles, two, &sh);
  // A grouped chunk's tables into shared memory, 16 bytes at a time.
  if (!(s.flags & kStored) && s.tables > 1) {
    copy16(reinterpret_cast<uint4*>(&sh.groups), reinterpret_cast<const uint4*>(&ws.groups[c]),
           s.tables * kM / 4);
  }
  __syncthreads();
  const uint32_t lane = threadIdx.x % 32, t = blockIdx.x * warps + threadIdx.x / 32;
  if (t >= s.tiles) return;
  unsigned long long* gsum = SumSlot(ws.sum, c, blockIdx.x);
  if (s.flags & kStored) {  // bytes [t * kMaxTile, ...) of the payload, 4 KiB blocks
    const uint64_t b0 = static_cast<uint64_t>(t) * kMaxTile, b1 = min(s.orig_bytes, b0 + kMaxTile);
    const uint8_t* src = in + kHeader;
    const bool aligned = reinterpret_cast<uintptr_t>(src) % 16 == 0;
    Kvsum64Pairs sum;
    for (uint64_t blk = b0; blk < b1; blk += checksum::kBlockBytes) {
      const uint64_t end = min(b1, blk + checksum::kBlockBytes);
      for (uint64_t off = blk + 16 * lane; off < end; off += 512) {
        ulonglong2 w = make_ulonglong2(0, 0);
        if (aligned && off + 16 <= end) {
          w = *reinterpret_cast<const ulonglong2*>(src + off);
        } else {
          for (uint32_t k = 0; k < 8 && off + k < end; ++k) w.x |= static_cast<uint64_t>(src[off + k]) << (8 * k);
          for (uint32_t k = 8; k < 16 && off + k < end; ++k) w.y |= static_cast<uint64_t>(src[off + k]) << (8 * k - 64);
        }
        EmitPiece(s, off, w.x, w.y, sh.key, &sum);
      }
      sum.Finish(blk / checksum::kBlockBytes, end - blk, gsum);
    }
    return;
  }
  if (s.dtype != kBf16Dtype) {
    if (DecodeTileAnyDtype(&ws.state[c], in, ws, c, t, &sh) && lane == 0) {
      atomicMax(&status[c], static_cast<int32_t>(kBadTile));
    }
    return;
  }
  for (uint32_t p = 0; p < own_passes; ++p) {
    const uint32_t tp = t + p * span * warps;
    if (tp >= s.tiles || DecodeTile<Bf16>(s, in, ws, c, tp, p, sh)) {
      if (tp < s.tiles && lane == 0) atomicMax(&status[c], static_cast<int32_t>(kBadTile));
      return;
    }
  }
}

// A warp a chunk (blockIdx.x): the chunk's checksum slots summed, a slot a
// lane, and compared with the header's (a thread's loop over the 32 slots
// took about 0.7 us longer: each add waits for its load).
__global__ void FinishKernel(int32_t* status, Workspace ws) {
  WaitForPrevious();
  const int c = blockIdx.x;
  // One round trip: the status, the slots and the state's fields load
  // together (a failed chunk's state is stale, and unused).
  const int32_t chunk_status = status[c];
  const unsigned long long slot = *SumSlot(ws.sum, c, threadIdx.x);
  const uint64_t orig_bytes = ws.state[c].orig_bytes, want = ws.state[c].checksum;
  if (chunk_status != kOk) return;  // uniform for the warp
  const unsigned long long sum = WarpSum(slot);
  if (threadIdx.x == 0 && kvferry::checksum::Finish(sum, orig_bytes) != want) status[c] = kChecksum;
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
    case kBadInput:
      return absl::InvalidArgumentError("bad encode request (dtype, size, capacity, layout or block list)");
    case kNoTable:
      return absl::FailedPreconditionError("table reuse: no order-0 table for this chunk from an earlier call");
    default:
      return absl::DataLossError(absl::StrFormat("corrupt chunk (CUDA decoder code %d)", code));
  }
}

namespace {

// The workspace's regions, each 16-byte aligned, carved from `workspace`;
// *bytes, where given, gets the size they take in all. With a null
// workspace only that size is computed (Create's allocation).
Workspace Carve(void* workspace, int max_chunks, uint64_t* bytes = nullptr) {
  const uint64_t n = static_cast<uint64_t>(max_chunks);
  Carver<16> carve(workspace);
  Workspace ws;
  ws.state = carve.Take<ChunkState>(n * sizeof(ChunkState));
  ws.tables = carve.Take<SlotTable>(n * sizeof(SlotTable));
  ws.groups = carve.Take<GroupTables>(n * sizeof(GroupTables));
  ws.sum = carve.Take<unsigned long long>(n * kSumBytesPerChunk);
  if (bytes != nullptr) *bytes = carve.used();
  return ws;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::Create(int max_chunks, uint64_t max_chunk_bytes) {
  if (max_chunks < 1 || max_chunk_bytes < 1) return absl::InvalidArgumentError("decoder must hold >= 1 chunk");
  auto d = std::unique_ptr<Decoder>(new Decoder());
  d->max_chunks_ = max_chunks;
  d->max_chunk_bytes_ = max_chunk_bytes;
  // Tiles of any dtype as the encoders size them (plan::TileLog2), which is
  // also at least the STORED copy's 16 KiB pieces (1-byte elements); a chunk
  // with more (a tile size forced smaller) is refused as too large.
  d->max_tiles_ = static_cast<uint32_t>(plan::MaxTiles(max_chunk_bytes));
  d->sms_ = CurrentDeviceSms();
  uint64_t bytes = 0;
  Carve(nullptr, max_chunks, &bytes);
  if (cudaFuncSetAttribute(DecodeKernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(sizeof(DecodeShared))) != cudaSuccess ||
      cudaFuncSetAttribute(DecodeKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(sizeof(DecodeShared))) != cudaSuccess) {
    return absl::InternalError("cannot give the decode kernel its shared memory");
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, DecodeKernel<false>, kWarpsPerBlock * 32,
                                                    sizeof(DecodeShared)) != cudaSuccess) {
    return absl::InternalError("cannot read the decode kernel's occupancy");
  }
  d->resident_ = std::max(1, per_sm) * d->sms_;
  d->workspace_bytes_ = bytes;
  if (cudaMalloc(&d->workspace_, bytes) != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrFormat("cannot allocate %d bytes of decoder workspace", bytes));
  }
  d->graphs_ = std::make_unique<CallGraphs>();
  return d;
}

Decoder::~Decoder() {
  if (workspace_ != nullptr) cudaFree(workspace_);
}

size_t Decoder::graphs() const { return graphs_->size(); }

cudaError_t Decoder::DecodeAsync(const DeviceChunk* chunks, int count, int32_t* status, cudaStream_t stream) {
  if (count < 1 || count > max_chunks_) return cudaErrorInvalidValue;
  const Workspace ws = Carve(workspace_, max_chunks_);
  // Two passes a block (DecodeKernel) when one tile group a block would not
  // fit one wave of blocks.
  const uint32_t warps = WarpsPerTileBlock(max_tiles_, count, sms_);
  const uint32_t groups = (max_tiles_ + warps - 1) / warps;
  const uint32_t passes = static_cast<uint64_t>(count) * groups > static_cast<uint64_t>(resident_) ? 2 : 1;
  auto launches = [&](cudaStream_t s, bool) {
    cudaError_t e = Launch(ParseKernel, count, kParseThreads, 0, s, chunks, status, ws, max_tiles_);
    if (e == cudaSuccess) {
      e = Launch(warps < kWarpsPerBlock ? DecodeKernel<true> : DecodeKernel<false>, dim3(groups, count), warps * 32,
                 sizeof(DecodeShared), s, chunks, status, ws, passes);
    }
    if (e == cudaSuccess) e = Launch(FinishKernel, count, kSumSlots, 0, s, status, ws);
    if (e != cudaSuccess) return e;
    return cudaGetLastError();
  };
  const CallGraphs::Key key = {1, reinterpret_cast<uintptr_t>(chunks), static_cast<uint64_t>(count),
                               reinterpret_cast<uintptr_t>(status)};
  return graphs_->Run(key, stream, nullptr, launches);
}

}  // namespace kvferry::codec::cuda
