// CUDA encoder for kvferry codec chunks: the same bytes as the CPU reference
// (kernels/cpu/codec.cc Encode), computed in stream-ordered kernels over a
// batch of chunks (blockIdx.y = chunk throughout):
//   Split     each chunk's request checked and planned; one pass over the
//             input: kvsum64, the raw plane straight into the chunk, the
//             order-0 histogram, per-channel symbol sums (KV-aware mode);
//             of a small call's bf16 chunks the histogram only, their raw
//             plane and kvsum64 being the Tiles blocks' helper warps' work
//   Rank      channels ranked by mean exponent -> 16 groups (KV-aware mode)
//   Hist16    histograms of the 16 channel groups (KV-aware mode)
//   Plan      order-0 table; candidates G = 1, 2, 4, 8, 16; writes map and tables
//             (not in small order-0 calls, whose Tiles blocks plan: SelfPlan)
//   Tiles     one warp per tile: symbols from the input, rANS, or RAW when
//             not smaller
//   Place     tiles into place (each block finds its offsets), directory,
//             header; STORED (the input copied) when not smaller; in small
//             self-planned calls each block reads its tile's words ahead
// Table reuse (EncodeReusingTablesAsync) runs Reuse, the fused Tiles kernel
// and Place only:
//   Reuse     each chunk's request checked and planned with the order-0
//             table its slot's last planned call chose, written into the chunk
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/checksum_core.h"
#include "kernels/codec_plan.h"
#include "kernels/cuda/call_graphs.h"
#include "kernels/cuda/codec_common.cuh"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/kvsum64.cuh"

namespace kvferry::codec::cuda {
namespace {

// A tile's scratch area: the worst case, states and one word per symbol. The
// same for every tile size: Place measured faster with a constant stride
// (docs/performance.md).
constexpr uint32_t kScratch = 128 + 2 * kMaxTile;
constexpr uint32_t kSplitElems = kMaxTile;         // elements per Hist16 CUDA block
constexpr uint32_t kTilesPerBlock = 8;             // Tiles: at most, one warp each

// Tile size sums per chunk: the total, then one per 64 tiles.
constexpr uint32_t kTsumGroup = 64;
__host__ __device__ constexpr uint32_t TsumSlots(uint32_t max_tiles) {
  return 1 + (max_tiles + kTsumGroup - 1) / kTsumGroup;
}

struct ChunkPlan {
  ElemInfo e;
  uint32_t dtype;
  Addr in;
  uint64_t n, bytes, raw_plane, channels;
  uint32_t tile_log2, tiles;      // symbols per tile (log2), tiles
  // The carry (plan::kCarryBytes): tiles [0, carry_tiles) leave the last
  // kCarryBytes of their tile_raw bytes of raw plane to their states.
  uint64_t tile_raw;  // a whole tile's raw bytes
  uint32_t carry_tiles;
  uint32_t tables, shift;         // tables chosen; group = group16 >> shift
  uint32_t stored, grouping;      // STORED already decided; KV-aware candidates considered
  // sampled: the order-0 table comes from every 16th 4 KiB block
  // (plan::Sampled). fused: a sampled bf16 chunk of whole 4 KiB blocks, whose
  // Tiles warps also write the raw plane and sum the checksum (Split only
  // counts the sample's symbols): one pass over the input. Not with a split
  // point, whose raw plane must be final before Tiles.
  uint32_t sampled, fused;
  // plane_in_tiles: a coded bf16 chunk of whole 4 KiB blocks in a
  // self-planned call (Workspace::self_plan): Split only counts its
  // symbols, and helper warps of the small Tiles instance write its raw
  // plane and sum its checksum while the coding warps plan and code
  // (TilePlaneBlock).
  uint32_t plane_in_tiles;
  uint8_t* out;                   // the chunk
  uint64_t tables_bytes;          // map + tables, written by Plan
  uint64_t dir_off, tiles_off;    // chunk offsets of the directory and tile 0
};

struct Workspace {
  ChunkPlan* plan;             // [chunks]
  unsigned long long* hist;    // [chunks][256]
  unsigned long long* chsum;   // [chunks][kMaxGroupedChannels]
  unsigned long long* hist16;  // [chunks][16][256]
  unsigned long long* sum;     // [chunks] x kSumSlots kvsum64 slots (SumSlot)
  uint8_t* group16;            // [chunks][kMaxGroupedChannels]
  uint8_t* map;                // [chunks][kMaxGroupedChannels] final channel -> table
  uint32_t* log2q16;           // [kM + 1] plan::Log2Q16(f), f = 1..kM
  const uint64_t* keys;        // [checksum::kWordsPerBlock] checksum::Key(j)
  const uint2* magic;          // [kM + 1] ExactEntry's m = ceil(2^40 / f) as {lo, hi}, f = 0..kM ({0, 0} for 0)
  uint32_t* enc;               // [chunks][16][256] freq | cum << 16
  uint32_t* table_ok;          // [chunks] 1: enc holds the order-0 table Plan last chose (table reuse)
  uint32_t* entry;             // [chunks][max_tiles] directory entries
  uint32_t* nwords;            // [chunks][max_tiles] rANS words of coded tiles
  unsigned long long* tsum;    // [chunks][kTsumSlots(max_tiles)]: [0] all tiles' sizes, [1 + g] tiles 64 g ..
  uint8_t* scratch;            // [chunks][max_tiles][kScratch]
  uint8_t* carry;              // [chunks][max_tiles][kCarryBytes] carry bytes (Split -> Tiles)
  uint64_t* estimate;          // [chunks] split-send estimates, or null
  uint64_t max_bytes;
  uint64_t l2_bytes;  // the device's L2 cache
  uint32_t max_tiles;
  uint32_t groups;  // the call may group channels (Rank and Hist16 run)
  uint32_t one_pass_only;  // the call said every chunk is fused (no Tiles instance for the others)
  uint32_t dtype;          // 0, or the dtype the call said every chunk has
  uint32_t self_plan;      // no Plan kernel: the small Tiles instance plans (SelfPlan)
  uint32_t reusing;        // a table-reuse call (which leaves the slots' tables as they are)
};

// A kernel's copy of a chunk's plan in shared memory, for the one-block
// kernels that build or change it (stored back once): read back from the
// workspace instead, a field is loaded again after each store to it. Raw
// bytes, since a __shared__ variable cannot have ChunkPlan's initialisers.
__device__ __forceinline__ ChunkPlan& SharedPlan() {
  __shared__ alignas(16) uint8_t bytes[sizeof(ChunkPlan)];
  return *reinterpret_cast<ChunkPlan*>(bytes);
}

// ---- The plan of a request ------------------------------------------------

// Whether a request with n elements groups channels (KV-aware mode), if it
// is coded at all.
__device__ __forceinline__ bool Groups(const EncodeChunk& ch, uint64_t n) {
  const uint64_t channels = static_cast<uint64_t>(ch.heads) * ch.head_dim;
  return ch.channel_groups && channels >= 2 && channels <= kMaxGroupedChannels && n >= channels;
}

// Whether a request is a fused chunk (ChunkPlan::fused), from the request
// alone: what MakePlan decides for a request it accepts.
__device__ __forceinline__ bool FusedRequest(const EncodeChunk& ch, const Workspace& ws) {
  const uint64_t n = ch.bytes / 2;
  return ch.dtype == kBf16Dtype && plan::Sampled(true, n, Groups(ch, n)) && ch.bytes % checksum::kBlockBytes == 0 &&
         reinterpret_cast<uintptr_t>(ch.out + kHeader) % 8 == 0 && ws.estimate == nullptr;
}

// Whether an accepted request is a plane_in_tiles chunk (ChunkPlan), from
// the request alone (a bf16 request of whole 4 KiB blocks is neither STORED
// nor sampled in a self-planned call, which groups no channels).
__device__ __forceinline__ bool PlaneInTilesRequest(uint32_t dtype, uint64_t bytes, const uint8_t* out,
                                                    const Workspace& ws) {
  return ws.self_plan && dtype == kBf16Dtype && bytes != 0 && bytes % checksum::kBlockBytes == 0 &&
         reinterpret_cast<uintptr_t>(out + kHeader) % 8 == 0;
}

// A chunk's plan from its request, as the CPU plans it; kOk or why the
// request is refused (thread 0; the block pointers are checked apart). Every
// Split block of the chunk computes it (the same inputs, the same answer), so
// that the call needs no kernel before Split.
__device__ int32_t MakePlan(const EncodeChunk& ch, const Workspace& ws, ChunkPlan* plan) {
  ChunkPlan& p = *plan;
  std::memset(&p, 0, sizeof(p));
  // Element sizes are 1, 2 or 4: shifts and masks, not 64-bit divisions.
  if (!GetElemInfo(ch.dtype, &p.e) || (ch.bytes & (p.e.bytes - 1)) != 0 || ch.out == nullptr ||
      ch.out_capacity < kHeader + ch.bytes || !MakeAddr(ch.in, ch.bytes, &p.in) ||
      (!ch.allow_stored && ch.out_capacity < plan::MaxSplitChunkBytes(ch.bytes))) {
    return kBadInput;
  }
  p.dtype = ch.dtype;
  p.bytes = ch.bytes;
  p.n = ch.bytes >> (p.e.bytes / 2);
  if (ch.bytes > ws.max_bytes || p.n > kMaxElements) return kTooLarge;
  p.tile_log2 = plan::TileLog2(p.e.bytes, p.n);  // as the CPU
  p.tiles = static_cast<uint32_t>(plan::TileCount(p.n, p.tile_log2));  // <= ws.max_tiles (plan::MaxTiles)
  p.raw_plane = plan::RawPlaneBytes(p.n, p.e.raw_bits, p.tile_log2);
  p.tile_raw = plan::TileRawBytes(p.e.raw_bits, p.tile_log2);
  p.carry_tiles = static_cast<uint32_t>(plan::CarryTiles(p.n, p.e.raw_bits, p.tile_log2));
  p.channels = static_cast<uint64_t>(ch.heads) * ch.head_dim;
  // As the CPU: nothing to code, or group padding makes the raw plane as
  // large as the input.
  p.stored = p.n == 0 || p.raw_plane >= p.bytes;
  p.grouping = !p.stored && Groups(ch, p.n);
  p.sampled = !p.stored && plan::Sampled(ch.dtype == kBf16Dtype, p.n, p.grouping);
  p.fused = p.sampled && FusedRequest(ch, ws);
  p.plane_in_tiles = !p.stored && !p.grouping && !p.sampled && PlaneInTilesRequest(ch.dtype, ch.bytes, ch.out, ws);
  p.out = ch.out;
  if (p.grouping && !ws.groups) return kBadInput;  // the call said no chunk would group channels
  if (ws.one_pass_only && !p.fused) return kBadInput;  // nor take any path but the one-pass one
  if (ws.dtype != 0 && p.dtype != ws.dtype) return kBadInput;  // nor be of another dtype
  return kOk;
}

// ---- Split ------------------------------------------------------------------

// Element k of the 16 / bytes elements in the 16-byte piece q.
template <typename E>
__device__ __forceinline__ uint32_t PieceElement(const uint4& q, uint32_t k) {
  const uint32_t i = E::bytes == 1 ? k / 4 : E::bytes == 2 ? k / 2 : k;
  const uint32_t w = i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
  return E::bytes == 1 ? (w >> (8 * (k % 4))) & 0xff : E::bytes == 2 ? (w >> (16 * (k % 2))) & 0xffff : w;
}

// bf16 elements 0..3 in words w0 (elements 0, 1) and w1 (2, 3): their
// symbols (bits 14..7) and raw bytes (sign << 7 | bits 6..0), byte k
// element k's. Two byte permutes gather the elements' low and high bytes;
// a shift and a bit select each then give four symbols or raw bytes.
__device__ __forceinline__ uint32_t Bf16Symbols4(uint32_t w0, uint32_t w1) {
  const uint32_t lo = __byte_perm(w0, w1, 0x6420), hi = __byte_perm(w0, w1, 0x7531);
  return SelectBits<0xfefefefeu>(hi << 1, lo >> 7);
}
__device__ __forceinline__ uint32_t Bf16Raw4(uint32_t w0, uint32_t w1) {
  const uint32_t lo = __byte_perm(w0, w1, 0x6420), hi = __byte_perm(w0, w1, 0x7531);
  return SelectBits<0x80808080u>(hi, lo);
}

// bf16 raw bytes (sign << 7 | bits 6..0) of the 8 elements in q.
__device__ __forceinline__ uint64_t Bf16Raw8(const uint4& q) {
  return Bf16Raw4(q.x, q.y) | static_cast<uint64_t>(Bf16Raw4(q.z, q.w)) << 32;
}

// Symbol sy into a lane's column of Split's histogram (hist[s / 2][lane]:
// two 16-bit counters a word, symbol 2r in the low half of row r).
__device__ __forceinline__ void CountSymbol(uint32_t* col, uint32_t sy) {
  atomicAdd(col + (sy / 2) * 32, sy % 2 ? 0x10000u : 1u);
}

// The symbols of the 8 bf16 elements in q into a lane's column.
__device__ __forceinline__ void CountBf16Piece(uint32_t* col, const uint4& q) {
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) CountSymbol(col, Bf16::Symbol(PieceElement<Bf16>(q, k)));
}

// Lane l's 16 bits of a bf16 tile's carry, from the input: the raw bytes of
// elements 2l and 2l + 1 of the tile's last plan::kCarryBytes (the tile's
// n elements start at element begin).
__device__ __forceinline__ uint32_t InputCarry(const ChunkPlan& p, uint64_t begin, uint32_t n, uint32_t lane) {
  const uint64_t off = 2 * (begin + n - plan::kCarryBytes + 2 * lane);
  return Bf16Raw4(*reinterpret_cast<const uint32_t*>(p.in.At(off)), 0) & 0xffff;
}

// Where the raw bytes of a 4 KiB checksum block go (a block lies in one
// tile): byte o of the whole plane into the chunk's plane, which the
// carrying tiles before it left kCarryBytes each (plan::CarriedBefore), or,
// from `from` on (the tile's carry; never when the tile does not carry), into
// its carry bytes. The carry's bounds are multiples of 64 in the whole plane, so a
// piece of 8 or 16 bytes is wholly in or out of it.
struct PlaneOut {
  uintptr_t plane, carry;  // + o: the address of whole-plane byte o
  uint64_t from;
  __device__ __forceinline__ PlaneOut(const ChunkPlan& p, uint8_t* raw_out, uint8_t* carry_bytes, uint64_t blk) {
    const uint64_t tile = blk >> (p.e.bytes / 2) >> p.tile_log2;  // element size 1, 2 or 4
    const uint64_t carrying = p.carry_tiles;
    plane = reinterpret_cast<uintptr_t>(raw_out) - plan::CarriedBefore(tile, carrying);
    from = tile < carrying ? (tile + 1) * p.tile_raw - plan::kCarryBytes : ~uint64_t{0};
    carry = reinterpret_cast<uintptr_t>(carry_bytes) + tile * plan::kCarryBytes - (tile + 1) * p.tile_raw +
            plan::kCarryBytes;
  }
  __device__ __forceinline__ uint8_t* At(uint64_t o) const {
    return reinterpret_cast<uint8_t*>((o >= from ? carry : plane) + o);
  }
};

// A warp's part of SplitKernel: the 4 KiB checksum block at blk. Lane l
// takes the 16-byte pieces at l * 16 + 512 i and adds them to its kvsum64
// sums. kWhole: the block is
// whole (4 KiB of input), the chunk is coded, without channel groups: no
// bounds checks, no channel sums (the hot path of large chunks). kContig:
// the input is one buffer, not a block list. kAll: every symbol is counted
// (count_symbols is ignored), which leaves the per-element branch out of the
// hot path of chunks that are not sampled.
template <typename E, bool kWhole, bool kContig, bool kAll>
__device__ __forceinline__ void SplitWarp(const ChunkPlan& p, uint64_t blk, const PlaneOut& raw_out, bool code,
                                          bool count_symbols, const uint64_t* key, uint32_t (*hist)[32], uint32_t* chsum, uint8_t* rstage,
                                          kvferry::cuda::Kvsum64Pairs* sum, uint32_t piece_begin, uint32_t piece_end) {
  constexpr uint32_t per = 16 / E::bytes, width = E::raw_bits, span = per * width / 8;
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t C = static_cast<uint32_t>(p.channels);
  const bool raw8_aligned = raw_out.plane % 8 == 0;
  // A lane's pieces [piece_begin, piece_end) of the block's 8 in rounds of 2:
  // the loads first, then the work.
  constexpr uint32_t kBatch = 2;
  for (uint32_t i0 = piece_begin; i0 < piece_end; i0 += kBatch) {
    uint4 qs[kBatch];
#pragma unroll
    for (uint32_t i = 0; i < kBatch; ++i) {
      const uint64_t off = blk + 512 * (i0 + i) + 16 * lane;
      if (kWhole || off + 16 <= p.bytes) {
        // 16-aligned, never straddles blocks
        qs[i] = *reinterpret_cast<const uint4*>(kContig ? p.in.data + off : p.in.At(off));
      } else {
        uint32_t w[4] = {0, 0, 0, 0};
        const uint8_t* src = off < p.bytes ? p.in.At(off) : nullptr;
#pragma unroll
        for (uint32_t k = 0; k < 16; ++k) {
          if (off + k < p.bytes) w[k / 4] |= static_cast<uint32_t>(src[k]) << (8 * (k % 4));
        }
        qs[i] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
#pragma unroll
    for (uint32_t i = 0; i < kBatch; ++i) {
      const uint32_t at = 512 * (i0 + i) + 16 * lane;  // byte offset in the checksum block
      const uint64_t off = blk + at;
      if (!kWhole && off >= p.bytes) break;
      const uint32_t len = kWhole ? 16 : static_cast<uint32_t>(min(uint64_t{16}, p.bytes - off));
      const uint4 q = qs[i];
      // kvsum64: words at bytes at and at + 8; a partial word is the chunk's tail.
      uint64_t w0 = q.x | static_cast<uint64_t>(q.y) << 32, w1 = q.z | static_cast<uint64_t>(q.w) << 32;
      if (!kWhole && len < 8) w0 ^= static_cast<uint64_t>(len) << 56;
      const ulonglong2 k01 = *reinterpret_cast<const ulonglong2*>(key + at / 8);
      sum->AddFirst(w0, k01.x);
      if (kWhole || len > 8) {
        if (!kWhole && len < 16) w1 ^= static_cast<uint64_t>(len - 8) << 56;
        sum->AddSecond(w1, k01.y);
      }
      if (!kWhole && !code) continue;
      // Symbols into the histogram (and channel sums), raw parts packed
      // LSB-first into lo:hi (at most 96 bits). Elements past the chunk's
      // end are zeros (their raw bits pad the plane's last group).
      const uint32_t count = len / E::bytes;
      const uint64_t e0 = off / E::bytes;
      uint32_t chn = !kWhole && p.grouping ? static_cast<uint32_t>(e0 % C) : 0;
      uint64_t lo = 0, hi = 0;
      // bf16 in whole pieces: the raw bytes by byte permutes (Bf16Raw8).
      constexpr bool kBf16Raw = kWhole && E::bytes == 2 && width == 8;
      if constexpr (kBf16Raw) lo = Bf16Raw8(q);
      uint32_t* col = &hist[0][lane];
#pragma unroll
      for (uint32_t k = 0; k < per; ++k) {
        const bool in = kWhole || len == 16 || k < count;
        const uint32_t v = in ? PieceElement<E>(q, k) : 0;
        if (in) {
          const uint32_t sy = E::Symbol(v);
          if (kAll || count_symbols) CountSymbol(col, sy);
          if (!kWhole && p.grouping) {
            atomicAdd(&chsum[chn], sy);
            if (++chn == C) chn = 0;
          }
        }
        if (width != 0 && !kBf16Raw) {
          const uint64_t r = E::Raw(v);
          const uint32_t bit = k * width;
          if (bit < 64) {
            lo |= r << bit;
            if (bit + width > 64) hi |= r >> (64 - bit);
          } else {
            hi |= r << (bit - 64);
          }
        }
      }
      if (span == 0) continue;
      const uint64_t start = off / 16 * span;  // in the whole plane
      if (span == 8 && len == 16 && raw8_aligned) {  // bf16, fp8 e4m3
        *reinterpret_cast<uint64_t*>(raw_out.At(start)) = lo;
        continue;
      }
      if constexpr (kWhole && span != 8) {
        // The warp's 32 pieces are one run of 32 span bytes, at a multiple of
        // 16 in the plane: staged in shared memory a lane's bytes at a time,
        // then written 16 bytes a lane (fp16, fp32, fp8 e5m2: not whole
        // words a piece).
#pragma unroll
        for (uint32_t o = 0; o < span; ++o) {
          rstage[lane * span + o] = static_cast<uint8_t>(o < 8 ? lo >> (8 * o) : hi >> (8 * (o - 8)));
        }
        __syncwarp();
        const uint64_t run = start - lane * span;  // a multiple of 16 in the whole plane
        if (raw_out.plane % 16 == 0) {
          if (lane < 2 * span) {
            *reinterpret_cast<uint4*>(raw_out.At(run + 16 * lane)) = reinterpret_cast<const uint4*>(rstage)[lane];
          }
        } else {
          for (uint32_t b = lane; b < 32 * span; b += 32) *raw_out.At(run + b) = rstage[b];
        }
        __syncwarp();
        continue;
      }
      // Cut at the end of the raw plane (a short last piece), of the whole
      // plane: with every tile's carry, CarriedBefore(tiles) bytes more.
      const uint64_t whole_plane = p.raw_plane + plan::CarriedBefore(p.tiles, p.carry_tiles);
      const uint32_t n = kWhole ? span : static_cast<uint32_t>(min(static_cast<uint64_t>(span), whole_plane - start));
      for (uint32_t o = 0; o < n; ++o) {
        *raw_out.At(start + o) = static_cast<uint8_t>(o < 8 ? lo >> (8 * o) : hi >> (8 * (o - 8)));
      }
      // The last piece also zeroes the rest of the plane's last group (fp32:
      // a piece is half a group).
      if (off + 16 >= p.bytes) {
        for (uint64_t b = start + span; b < whole_plane; ++b) *raw_out.At(b) = 0;
      }
    }
  }
}

// One pass over the input. A CUDA block takes kSplitWarps x per_warp / subs
// 4 KiB checksum blocks: `subs` warps share each block (warps w .. w + subs
// - 1, each 8 / subs of a lane's pieces), a warp group per_warp of them
// (group + kSplitWarps / subs x j), a lane one 16-byte piece per step
// (lane + 32 i):
//   - kvsum64: the piece's two words belong to checksum lanes 2 (lane % 4)
//     and 2 (lane % 4) + 1, summed per lane in Kvsum64Pairs (kvsum64.cuh),
//     as the decoder sums what it writes; the warps of a group add their
//     sums in shared memory before the first one finishes the block;
//   - the raw plane: a piece holds 16 / eb elements, a whole number of bytes
//     of raw plane for every dtype (at most 12), packed and written in place;
//   - the order-0 histogram: 16-bit counters, two symbols a word, one column
//     per lane (hist[s / 2][lane]): no two lanes of a warp touch the same word
//     or bank;
//   - KV-aware mode: per-channel symbol sums.
// STORED chunks need only the checksum. Sampled chunks count the symbols of
// every 16th block only; of fused chunks Split reads only those blocks, for
// their symbols (the rest is Tiles' work).
// per_warp is 2 (the block-wide work, histogram clear and merge, spread over
// 64 KiB), or 1 when a call has too few blocks to fill the SMs; subs is 4
// (per_warp 1) when even then a scheduler would hold few warps, whose
// latency the kernel would take: a call of up to about 4 MiB on an H100.
constexpr uint32_t kSplitWarps = 8;
constexpr uint32_t kSplitMaxSubsLog2 = 2, kSplitMaxSubs = 1u << kSplitMaxSubsLog2;
// Shared memory: keys, histogram columns, channel sums, the groups' sums.
constexpr uint32_t kSplitShared =
    checksum::kWordsPerBlock * 8 + 128 * 32 * 4 + kMaxGroupedChannels * 4 + kSplitWarps * 4 * 16;
// A warp's run of raw bytes (SplitWarp, whole blocks: 32 pieces of up to 12),
// in the channel sums' space, which whole blocks never use.
constexpr uint32_t kSplitRawStage = 384;
static_assert(kSplitWarps * kSplitRawStage <= kMaxGroupedChannels * 4, "raw stages fit the channel sums' space");

// kFusable: the call may hold fused chunks (an encoder sized for chunks of
// plan::kSampleMinElements bf16 elements or more). The other instance leaves
// the fused path out, and with it ptxas's spill (28/52 bytes, none without):
// on an H100, 16 x 4 MiB bf16 encodes at 587-596 instead of 570-579 GB/s and
// Split takes 49.4 instead of 52.0 us there (ncu), one 1 MiB chunk 25.9-27.4
// instead of 27.0-27.7 us.
template <bool kFusable>
__global__ void __launch_bounds__(kSplitWarps * 32, 4)
    SplitKernel(const EncodeChunk* chunks, int32_t* status, uint64_t* sizes, Workspace ws, uint32_t per_warp,
                uint32_t subs_log2) {
  extern __shared__ uint64_t split_smem[];  // kSplitShared bytes
  uint64_t* key = split_smem;                                                      // [kWordsPerBlock]
  auto hist = reinterpret_cast<uint32_t(*)[32]>(key + checksum::kWordsPerBlock);  // [128][32]
  uint32_t* chsum = &hist[128][0];                                                 // [kMaxGroupedChannels]
  uint8_t* rstage = reinterpret_cast<uint8_t*>(chsum) + (threadIdx.x / 32) * kSplitRawStage;  // whole blocks only
  auto pairs = reinterpret_cast<ulonglong2(*)[4]>(chsum + kMaxGroupedChannels);  // [kSplitWarps][4]
  // While the kernel before finishes (nothing here depends on it; the keys
  // are written once, by Create): the histogram cleared, the keys staged,
  // by warps 1.. only, so that thread 0 reads the request (MakePlan) at
  // once rather than after a key load of its own.
  if (threadIdx.x >= 32) {
    const uint32_t t = threadIdx.x - 32, step = blockDim.x - 32;
    for (uint32_t k = t; k < 128 * 32 / 4; k += step) {
      reinterpret_cast<uint4*>(&hist[0][0])[k] = make_uint4(0, 0, 0, 0);
    }
    for (uint32_t k = t; k < checksum::kWordsPerBlock / 2; k += step) {
      reinterpret_cast<ulonglong2*>(key)[k] = reinterpret_cast<const ulonglong2*>(ws.keys)[k];
    }
  }
  WaitForPrevious();
  const int c = blockIdx.y;
  const uint32_t groups = kSplitWarps >> subs_log2;  // checksum blocks a round of the block's warps takes
  const uint64_t span = groups * per_warp * checksum::kBlockBytes;
  const uint64_t b0 = blockIdx.x * span;
  // Encoders too small for fused chunks (this instance): each lane's first
  // two pieces (SplitWarp's first batch) are fetched into L1 once the
  // request's input pointer and size arrive, in the round trip of thread 0's
  // request, so that SplitWarp's loads after the plan find them there rather
  // than a round trip to memory away. As for an accepted request, the input
  // is taken to be `bytes` bytes at in.data; a request refused leaves them
  // unread. (Loaded into registers instead, they spilled at 64.)
  if constexpr (!kFusable) {
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t group = warp >> subs_log2, sub = warp & ((1u << subs_log2) - 1);
    const uint8_t* data = chunks[c].in.data;
    const bool contiguous = chunks[c].in.blocks == nullptr;
    const uint64_t bytes = min(chunks[c].bytes, ws.max_bytes);
    const uint64_t off = b0 + group * checksum::kBlockBytes + 512ull * sub * (8u >> subs_log2) + 16 * lane;
    if (contiguous && data != nullptr && off + 512 + 16 <= bytes) {
      asm volatile("prefetch.global.L1 [%0];" ::"l"(data + off));
      asm volatile("prefetch.global.L1 [%0];" ::"l"(data + off + 512));
    }
  }
  if (kFusable && blockIdx.x != 0) {
    // Of a fused chunk Split reads every kSampleStride-th span only: the
    // blocks past those leave at once, without planning (15/16 of the grid).
    // On an H100, bf16 256 MiB: Split 18.3 -> 14.0 us (globaltimer), encode
    // 952-957 -> 964-971 GB/s.
    const EncodeChunk& ch = chunks[c];
    if (b0 * plan::kSampleStride >= ch.bytes && FusedRequest(ch, ws)) return;  // uniform
  }
  __shared__ int32_t err;
  if (threadIdx.x == 0) {
    const EncodeChunk request = chunks[c];  // every field in one round trip
    err = MakePlan(request, ws, &SharedPlan());
  }
  __syncthreads();
  const ChunkPlan p = SharedPlan();
  uint8_t* const raw_at = p.out + kHeader;
  const uint32_t subs = 1u << subs_log2;
  const bool fused = kFusable && p.fused;
  const uint64_t stride = fused ? plan::kSampleStride : 1;  // blocks of the chunk a block of the grid stands for
  // A block list: the grid's first block checks every pointer (and reports
  // the request), each other block those of the bytes it reads, which it
  // then skips if one is bad.
  bool ok = err == kOk;
  if (ok && p.in.blocks != nullptr) {  // uniform for the block
    const bool all = blockIdx.x == 0;
    const uint64_t at = min(b0 * stride, p.bytes), end = min((b0 + span) * stride, p.bytes);
    ok = BlockPointersOk(chunks[c].in, all ? 0u : static_cast<uint32_t>(at / p.in.bb),
                         all ? ~0u : static_cast<uint32_t>((end + p.in.bb - 1) / p.in.bb));
  }
  if (blockIdx.x == 0) {
    // The chunk's request, reported once. Its counters: the histogram,
    // channel sums and checksum sum are left at zero by the call before
    // (Plan, Rank and Place clear them after use; Create zeroes them); the
    // tile sizes and group histograms, summed only by later kernels, are
    // cleared here.
    if (threadIdx.x == 0) {
      status[c] = ok ? kOk : err != kOk ? err : kBadInput;
      sizes[c] = 0;
      if (ws.estimate != nullptr) ws.estimate[c] = 0;
      ws.plan[c] = p;
    }
    if (ok) {
      for (uint32_t k = threadIdx.x; k < TsumSlots(p.tiles); k += blockDim.x) {
        ws.tsum[c * 1ull * TsumSlots(ws.max_tiles) + k] = 0;
      }
      if (p.grouping) {
        for (uint32_t k = threadIdx.x; k < 16 * 256; k += blockDim.x) ws.hist16[c * 4096ull + k] = 0;
      }
    }
  }
  if (!ok || b0 * stride >= p.bytes) return;  // uniform for the block
  const bool code = !p.stored;
  const uint32_t C = static_cast<uint32_t>(p.channels);
  if (code && p.grouping) {
    for (uint32_t k = threadIdx.x; k < C; k += blockDim.x) chsum[k] = 0;
  }
  __syncthreads();
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t group = warp >> subs_log2, sub = warp & (subs - 1);
  // A fused chunk: only the sample's symbols, a warp's 4 KiB in one round of
  // loads (Tiles writes its raw plane and sums its checksum); the first warp
  // of a group (fused chunks are large, where subs is 1).
  for (uint32_t j = 0; fused && sub == 0 && j < per_warp; ++j) {
    const uint64_t blk = (b0 + static_cast<uint64_t>(group + groups * j) * checksum::kBlockBytes) * stride;
    if (blk >= p.bytes) break;  // uniform over the warp
    constexpr uint32_t kPieces = checksum::kBlockBytes / 512;
    uint4 q[kPieces];
#pragma unroll
    for (uint32_t i = 0; i < kPieces; ++i) {
      q[i] = *reinterpret_cast<const uint4*>(p.in.At(blk + 512 * i + 16 * lane));
    }
#pragma unroll
    for (uint32_t i = 0; i < kPieces; ++i) CountBf16Piece(&hist[0][lane], q[i]);
  }
  // (fused chunks never go on from here; every warp of the block does, so
  // that the groups' barriers are reached by all)
  const uint32_t pieces = (checksum::kBlockBytes / 512) >> subs_log2;
  const bool counting = !kFusable && p.plane_in_tiles;
  for (uint32_t j = 0; !fused && !counting && j < per_warp; ++j) {
    const uint64_t blk = b0 + static_cast<uint64_t>(group + groups * j) * checksum::kBlockBytes;
    const bool have = blk < p.bytes;  // uniform over the group
    kvferry::cuda::Kvsum64Pairs sum;
    if (have) {
      const bool count_symbols = !p.sampled || blk / checksum::kBlockBytes % plan::kSampleStride == 0;
      const PlaneOut out(p, raw_at, ws.carry + static_cast<uint64_t>(c) * ws.max_tiles * plan::kCarryBytes, blk);
      const uint32_t i0 = sub * pieces, i1 = i0 + pieces;
      const bool whole = code && !p.grouping && blk + checksum::kBlockBytes <= p.bytes;
      if (p.dtype == kBf16Dtype && whole && p.in.blocks == nullptr && !p.sampled) {
        // The common case first: its code then lies near the kernel's own,
        // with fewer instruction-cache misses (under ncu on an H100, Split
        // at 4 MiB 11.9 -> 10.9 us).
        SplitWarp<Bf16, true, true, true>(p, blk, out, code, true, key, hist, chsum, rstage, &sum, i0, i1);
      } else WithElem(p.dtype, [&](auto e) {
        using E = decltype(e);
        if (whole) {
          if (p.in.blocks == nullptr) {
            if (!p.sampled) {
              SplitWarp<E, true, true, true>(p, blk, out, code, true, key, hist, chsum, rstage, &sum, i0, i1);
            } else {
              SplitWarp<E, true, true, false>(p, blk, out, code, count_symbols, key, hist, chsum, rstage, &sum, i0,
                                              i1);
            }
          } else if (!p.sampled) {
            SplitWarp<E, true, false, true>(p, blk, out, code, true, key, hist, chsum, rstage, &sum, i0, i1);
          } else {
            SplitWarp<E, true, false, false>(p, blk, out, code, count_symbols, key, hist, chsum, rstage, &sum, i0,
                                             i1);
          }
        } else {
          SplitWarp<E, false, false, false>(p, blk, out, code, count_symbols, key, hist, chsum, rstage, &sum, i0,
                                            i1);
        }
      });
    }
    if (subs > 1) {
      // The group's sums into its first warp (subs is uniform over the grid):
      // the others fold theirs onto lanes 0..3 (a lane's sums belong to
      // checksum lanes by lane % 4), which the first adds to its lanes 0..3.
      if (sub != 0) {
        for (int o = 4; o < 32; o *= 2) {
          sum.a += __shfl_xor_sync(0xffffffffu, sum.a, o);
          sum.b += __shfl_xor_sync(0xffffffffu, sum.b, o);
        }
        if (lane < 4) pairs[warp][lane] = make_ulonglong2(sum.a, sum.b);
      }
      __syncthreads();
      if (sub == 0 && lane < 4) {
        for (uint32_t s = 1; s < subs; ++s) {
          const ulonglong2 o = pairs[warp + s][lane];
          sum.a += o.x;
          sum.b += o.y;
        }
      }
      if (j + 1 < per_warp) __syncthreads();  // read before the next round writes
    }
    if (have && sub == 0) {
      const uint64_t m = min(static_cast<uint64_t>(checksum::kBlockBytes), p.bytes - blk);
      sum.Finish(blk / checksum::kBlockBytes, m, SumSlot(ws.sum, c, blk / checksum::kBlockBytes));
    }
  }
  // A chunk whose raw plane and checksum are Tiles' (plane_in_tiles): its
  // symbols only, the warp's pieces as below (whole blocks, one buffer or a
  // block list). After the loop above: placed before it, the kernel spilled.
  for (uint32_t j = 0; counting && j < per_warp; ++j) {
    const uint64_t blk = b0 + static_cast<uint64_t>(group + groups * j) * checksum::kBlockBytes;
    if (blk >= p.bytes) break;  // uniform over the warp
    for (uint32_t i0 = sub * pieces; i0 < (sub + 1) * pieces; i0 += 2) {
      uint4 q[2];
#pragma unroll
      for (uint32_t i = 0; i < 2; ++i)
        q[i] = *reinterpret_cast<const uint4*>(p.in.At(blk + 512 * (i0 + i) + 16 * lane));
#pragma unroll
      for (uint32_t i = 0; i < 2; ++i) CountBf16Piece(&hist[0][lane], q[i]);
    }
  }
  if (!code) return;  // uniform for the block
  __syncthreads();
  {
    // Symbols 2r and 2r + 1 are the halves of hist[r][*]: thread 2r + h sums
    // 16 of its columns (h = 0: the first 16), read rotated so that a warp's
    // 32 threads hit 32 banks, and the pair trades halves. A column counts
    // at most 2048 symbols (fp8, per_warp 2), so 16 columns' halves do not
    // carry into each other.
    const uint32_t r = threadIdx.x / 2, h = threadIdx.x % 2;
    const uint32_t* row = hist[r];
    uint32_t t = 0;
#pragma unroll
    for (uint32_t j = 0; j < 16; ++j) t += row[(16 * h + j + r) % 32];
    const uint32_t lo = t & 0xffff, hi = t >> 16;
    const uint32_t other = __shfl_xor_sync(0xffffffffu, h ? lo : hi, 1);
    const uint32_t n = (h ? hi : lo) + other;  // symbol 2r + h
    if (n != 0) atomicAdd(&ws.hist[c * 256ull + 2 * r + h], static_cast<unsigned long long>(n));
  }
  if (p.grouping) {
    const uint64_t e_begin = b0 / p.e.bytes, e_end = min(p.n, (b0 + span) / p.e.bytes);
    const uint32_t touched = static_cast<uint32_t>(min(static_cast<uint64_t>(C), e_end - e_begin));
    const uint32_t base_ch = static_cast<uint32_t>(e_begin % C);
    for (uint32_t k = threadIdx.x; k < touched; k += blockDim.x) {
      const uint32_t chn = (base_ch + k) % C;
      atomicAdd(&ws.chsum[c * 1ull * kMaxGroupedChannels + chn], static_cast<unsigned long long>(chsum[chn]));
    }
  }
}

// ---- tables ----------------------------------------------------------------------

// The symbol range {lo, count} of a table whose lane l holds the frequencies
// of symbols 8l .. 8l + 7 ({0, 0} when empty). The whole warp calls it.
__device__ __forceinline__ uint2 WarpTableRange(const uint32_t (&f)[8]) {
  const int lane = threadIdx.x % 32;
  int lo = 256, hi = -1;
  for (int k = 0; k < 8; ++k) {
    if (f[k] != 0) lo = min(lo, 8 * lane + k), hi = 8 * lane + k;
  }
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  return hi < 0 ? make_uint2(0, 0) : make_uint2(lo, hi - lo + 1);
}

// The least (WarpMin64) or most (WarpMax64) 64-bit value of the warp, on
// every lane: two 32-bit reductions, the high words' and then the low words'
// of the lanes holding that high word.
__device__ __forceinline__ uint64_t WarpMin64(uint64_t v) {
  const uint32_t hi = __reduce_min_sync(0xffffffffu, static_cast<uint32_t>(v >> 32));
  const uint32_t lo =
      __reduce_min_sync(0xffffffffu, static_cast<uint32_t>(v >> 32) == hi ? static_cast<uint32_t>(v) : ~0u);
  return uint64_t{hi} << 32 | lo;
}
__device__ __forceinline__ uint64_t WarpMax64(uint64_t v) {
  const uint32_t hi = __reduce_max_sync(0xffffffffu, static_cast<uint32_t>(v >> 32));
  const uint32_t lo =
      __reduce_max_sync(0xffffffffu, static_cast<uint32_t>(v >> 32) == hi ? static_cast<uint32_t>(v) : 0u);
  return uint64_t{hi} << 32 | lo;
}

// plan::Log2Q16(x) for x uniform across the warp, from the warp's copy of
// the table: t[k] on lane j is plan::Log2Q16(32 k + j) (0 for 0).
// (A tree of selects by the bits of x / 32: a chain of eight became an
// index into a copy of t in local memory.)
__device__ __forceinline__ uint32_t WarpLog2(const uint32_t (&t)[8], uint32_t x) {
  const bool b0 = x & 32, b1 = x & 64, b2 = x & 128;
  const uint32_t w01 = b0 ? t[1] : t[0], w23 = b0 ? t[3] : t[2], w45 = b0 ? t[5] : t[4], w67 = b0 ? t[7] : t[6];
  const uint32_t w = b2 ? (b1 ? w67 : w45) : (b1 ? w23 : w01);
  const uint32_t v = __shfl_sync(0xffffffffu, w, x % 32);
  return x >= kM ? kProbBits << 16 : v;  // plan::Log2Q16(kM)
}

// plan::RefineTable for a table of at most 32 symbols (fp8 e5m2's exponents,
// symbols 0..31), one symbol a lane: lane s holds symbol s's count h and
// frequency f and gets its refined frequency back. A move reduces two keys
// (value << 5 | symbol; values fit 56 bits) side by side: the least loss,
// lower symbol first, and the most gain, lower symbol first (31 - symbol in
// the key). L: plan::Log2Q16's table, read once into registers (t, 8 words
// a lane); each lane keeps log2 of f - 1, f and f + 1, and a move's two new
// values come from t by shuffles. Not inlined, to keep this e5m2-only loop
// apart from the bf16 path's code and registers: the small Tiles instance
// has 124 registers with it, 128 without (inlined in SelfPlan, an earlier
// refinement of 8 symbols a lane took it to 145, and bf16 calls 0.8 us
// longer; this one leaves them within their spread, docs/performance.md).
__device__ __noinline__ uint32_t WarpRefine32(uint64_t h, uint32_t f, const uint32_t* L) {
  const uint32_t s = threadIdx.x % 32;
  uint32_t t[8];
#pragma unroll
  for (uint32_t k = 0; k < 8; ++k) t[k] = __ldg(L + 32 * k + s);
  uint32_t lm = __ldg(L + (f > 0 ? f - 1 : 0)), l0 = __ldg(L + f), lp = __ldg(L + min(f + 1, kM));
  for (uint32_t move = 0; move < plan::kMaxRefineMoves; ++move) {
    const bool gives = h != 0 && f > 1, takes = h != 0 && f < kM;
    const uint64_t dk = WarpMin64(gives ? (h * (l0 - lm)) << 5 | s : ~uint64_t{0});        // plan::MoveLoss
    const uint64_t tk = WarpMax64(takes ? (h * (lp - l0)) << 5 | (31 - s) : uint64_t{0});  // plan::MoveGain (> 0)
    const uint32_t d = static_cast<uint32_t>(dk & 31), up = 31 - static_cast<uint32_t>(tk & 31);
    if (dk == ~uint64_t{0} || tk == 0 || up == d || (tk >> 5) <= (dk >> 5)) break;  // uniform
    const uint32_t below = WarpLog2(t, __shfl_sync(0xffffffffu, f, d) - 2);
    const uint32_t above = WarpLog2(t, __shfl_sync(0xffffffffu, f, up) + 2);
    const uint32_t m = lm, z = l0, q = lp;
    if (s == d) f -= 1, lm = below, l0 = m, lp = z;
    if (s == up) f += 1, lm = z, l0 = q, lp = above;
  }
  return f;
}

// One warp normalises a histogram (lane l holds symbols 8l..8l+7 in h) exactly
// as kernels/cpu/codec.cc Normalize, and returns the estimated size (Q16 bits
// plus 8 bits per table byte, in Q16) on every lane. Without log2q16 the
// symbols' bits are left out (8 table loads from memory, about 0.7 us on an
// H100), for a call that neither compares candidates nor estimates sizes.
// The table's symbol range (WarpTableRange) goes to *range where given.
// With refine (plan::Log2Q16's table, given for a dtype plan::Refined
// names, whose symbols are 0..31) the table is then refined (WarpRefine32).
__device__ uint64_t WarpNormalize(const uint64_t h[8], uint32_t (&f)[8], const uint32_t* log2q16,
                                  uint2* range = nullptr, const uint32_t* refine = nullptr) {
  const int lane = threadIdx.x % 32;
  uint64_t total = 0;
  for (int k = 0; k < 8; ++k) total += h[k];
  total = WarpSum(total);
  if (total == 0) {
    for (int k = 0; k < 8; ++k) f[k] = 0;
    if (range != nullptr) *range = make_uint2(0, 0);
    return 4ull << 19;  // an empty table: lo, count
  }
  // floor(h * M / total), at most M: a float estimate, whose relative error
  // (a few units of 2^-24) leaves it within one of the floor, then made
  // exact by integer checks. (A double quotient, with its division, took
  // longer: docs/performance.md.)
  const float inv = __fdividef(static_cast<float>(kM), __ull2float_rn(total));
  uint32_t sum = 0;
  for (int k = 0; k < 8; ++k) {
    const uint64_t a = h[k] * kM;
    uint64_t q = static_cast<uint32_t>(__ull2float_rn(h[k]) * inv);
    if (q * total > a) --q;
    if ((q + 1) * total <= a) ++q;
    f[k] = h[k] == 0 ? 0 : static_cast<uint32_t>(max(uint64_t{1}, q));
    sum += f[k];
  }
  sum = __reduce_add_sync(0xffffffffu, sum);
  const int32_t d = static_cast<int32_t>(kM) - static_cast<int32_t>(sum);
  if (d > 0) {
    // The most frequent symbol, lowest index on ties.
    uint64_t best = 0;
    uint32_t at = 8 * lane;
    for (int k = 0; k < 8; ++k) {
      if (h[k] > best) best = h[k], at = 8 * lane + k;
    }
    for (int o = 16; o > 0; o /= 2) {
      const uint64_t ob = __shfl_xor_sync(0xffffffffu, best, o);
      const uint32_t oa = __shfl_xor_sync(0xffffffffu, at, o);
      if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
    }
    // Selects rather than f[at % 8], whose index put f in local memory.
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] += at == 8u * lane + k ? d : 0;
  } else if (d < 0) {
    // Decrementing the largest frequency above 1 (lowest index on ties) -d
    // times ends with every frequency cut to a level L, and the r lowest-index
    // symbols at L lowered to L - 1: L is the smallest level whose excess
    // sum(max(0, f - L)) is <= -d.
    const uint32_t k_dec = static_cast<uint32_t>(-d);
    auto excess = [&](uint32_t level) {
      uint32_t e = 0;
      for (int k = 0; k < 8; ++k) e += f[k] > level ? f[k] - level : 0;
      return __reduce_add_sync(0xffffffffu, e);
    };
    // L lies in [F - k_dec, F], F the largest frequency: excess(F) = 0, and
    // the largest alone gives excess(F - k_dec - 1) = k_dec + 1. k_dec is
    // small on real data (a few symbols rounded up to 1), so this search
    // takes a few rounds rather than 12 (on an H100, the 12 took 2440 of
    // the 6500 cycles this function took in a 4 MiB call's Plan).
    uint32_t fmax = 0;
    for (int k = 0; k < 8; ++k) fmax = max(fmax, f[k]);
    fmax = __reduce_max_sync(0xffffffffu, fmax);
    uint32_t lo = fmax > k_dec + 1 ? fmax - k_dec : 1, hi = fmax;
    uint32_t level = 0, r = 0;
    if (k_dec < 32) {
      // At most 32 levels: lane j tests lo + j, all at once. Only symbols
      // above lo add to an excess there, and they lie in few lanes (the
      // most frequent symbols), whose frequencies reach every lane by
      // shuffles: no reduction a level, one after another.
      const uint32_t mine = lo + lane;
      bool above = false;
      for (int k = 0; k < 8; ++k) above |= f[k] > lo;
      uint32_t e = 0;
      for (uint32_t m = __ballot_sync(0xffffffffu, above); m != 0; m &= m - 1) {
        const int src = __ffs(m) - 1;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const uint32_t v = __shfl_sync(0xffffffffu, f[k], src);
          e += v > mine ? v - mine : 0;
        }
      }
      const int j = __ffs(__ballot_sync(0xffffffffu, mine <= hi && e <= k_dec)) - 1;  // lane hi - lo passes
      level = lo + j;
      r = k_dec - __shfl_sync(0xffffffffu, e, j);
    } else {
      while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (excess(mid) <= k_dec) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      level = lo;
      r = k_dec - excess(level);
    }
    uint32_t at_level = 0;
    for (int k = 0; k < 8; ++k) {
      f[k] = min(f[k], level);
      at_level += f[k] == level ? 1 : 0;
    }
    if (r != 0) {  // uniform
      uint32_t before = WarpInclusiveScan(at_level) - at_level;
      for (int k = 0; k < 8; ++k) {
        if (f[k] == level) {
          if (before < r) --f[k];
          ++before;
        }
      }
    }
  }
  if (refine != nullptr) {
    // Symbol l to lane l (lanes 0..3 hold symbols 0..31), and back.
    uint64_t hs = 0;
    uint32_t fs = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint64_t hk = __shfl_sync(0xffffffffu, h[k], lane / 8);
      const uint32_t fk = __shfl_sync(0xffffffffu, f[k], lane / 8);
      if (lane % 8 == k) hs = hk, fs = fk;
    }
    fs = WarpRefine32(hs, fs, refine);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t fk = __shfl_sync(0xffffffffu, fs, (8 * lane + k) % 32);
      if (lane < 4) f[k] = fk;
    }
  }
  uint64_t cost = 0;
  for (int k = 0; k < 8; ++k) {
    if (h[k] != 0 && log2q16 != nullptr) cost += h[k] * ((uint64_t{kProbBits} << 16) - log2q16[f[k]]);  // plan::CostQ16
  }
  if (log2q16 != nullptr) cost = WarpSum(cost);
  const uint2 r = WarpTableRange(f);  // not empty: total > 0
  if (range != nullptr) *range = r;
  const uint64_t table_bytes = 4 + 2ull * r.y;
  return cost + (table_bytes << 19);
}

// KV-aware mode: channel ranks -> group16 (bitonic sort of the unique keys).
// The channel sums Split added are zeroed once read, for the next call's
// Split, whatever becomes of the chunk (a chunk refused for a bad block
// pointer may have been summed in part).
__global__ void __launch_bounds__(1024) RankKernel(const int32_t* status, Workspace ws) {
  WaitForPrevious();
  const int c = blockIdx.x;
  const ChunkPlan& p = ws.plan[c];
  if (p.stored || !p.grouping) return;  // Split summed no channels
  unsigned long long* const chsum = ws.chsum + c * 1ull * kMaxGroupedChannels;
  extern __shared__ uint64_t key[];  // kMaxGroupedChannels
  const uint32_t C = static_cast<uint32_t>(p.channels);
  uint32_t size = 1;
  while (size < C) size *= 2;
  for (uint32_t k = threadIdx.x; k < size; k += blockDim.x) {
    key[k] = k < C ? plan::ChannelKey(chsum[k], plan::ChannelCount(p.n, C, k), k) : ~0ull;
    if (k < C) chsum[k] = 0;
  }
  if (status[c] != kOk) return;  // uniform for the block
  __syncthreads();
  for (uint32_t len = 2; len <= size; len *= 2) {
    for (uint32_t j = len / 2; j > 0; j /= 2) {
      for (uint32_t i = threadIdx.x; i < size; i += blockDim.x) {
        const uint32_t partner = i ^ j;
        if (partner > i) {
          const bool up = (i & len) == 0;
          const uint64_t a = key[i], b = key[partner];
          if ((a > b) == up) {
            key[i] = b;
            key[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  for (uint32_t k = threadIdx.x; k < C; k += blockDim.x) {
    ws.group16[c * 1ull * kMaxGroupedChannels + static_cast<uint32_t>(key[k])] =
        static_cast<uint8_t>(plan::Group16(k, C));
  }
}

// The raw bytes of elements [e, e + 16) into q[0 .. E::bytes) (zeros past
// the chunk's end). 16 elements are 16, 32 or 64 bytes at a multiple of that
// offset, so they never straddle a block of the list (block sizes are
// multiples of 64).
template <typename E>
__device__ __forceinline__ void LoadElems16(const ChunkPlan& p, uint64_t e, uint4* q) {
  constexpr uint32_t eb = E::bytes;
  if (e + 16 <= p.n) {
    const uint4* src = reinterpret_cast<const uint4*>(p.in.At(e * eb));
#pragma unroll
    for (uint32_t k = 0; k < eb; ++k) q[k] = src[k];
    return;
  }
  uint32_t v[16];
  const uint8_t* src = e < p.n ? p.in.At(e * eb) : nullptr;
#pragma unroll
  for (uint32_t k = 0; k < 16; ++k) {
    v[k] = 0;
    if (e + k < p.n) {
#pragma unroll
      for (uint32_t b = 0; b < eb; ++b) v[k] |= static_cast<uint32_t>(src[k * eb + b]) << (8 * b);
    }
  }
  // Repack: 16 / eb values per uint4, LSB-first.
  constexpr uint32_t per = 16 / eb;
#pragma unroll
  for (uint32_t k = 0; k < eb; ++k) {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (uint32_t i = 0; i < per; ++i) w[i * eb / 4] |= v[k * per + i] << (8 * (i * eb % 4));
    q[k] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The symbols of the 16 elements in q[0 .. E::bytes) as 16 bytes.
template <typename E>
__device__ __forceinline__ uint4 SymbolsOf16(const uint4* q) {
  if constexpr (kIsBf16<E>) {
    return make_uint4(Bf16Symbols4(q[0].x, q[0].y), Bf16Symbols4(q[0].z, q[0].w), Bf16Symbols4(q[1].x, q[1].y),
                      Bf16Symbols4(q[1].z, q[1].w));
  }
  uint32_t out[4] = {0, 0, 0, 0};
#pragma unroll
  for (uint32_t k = 0; k < 16; ++k) {
    const uint32_t per = 16 / E::bytes;  // elements per uint4
    out[k / 4] |= E::Symbol(PieceElement<E>(q[k / per], k % per)) << (8 * (k % 4));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// The same with the dtype known at run time only.
__device__ __forceinline__ uint4 LoadSymbols16(const ChunkPlan& p, uint64_t e) {
  uint4 r = make_uint4(0, 0, 0, 0);
  WithElem(p.dtype, [&](auto el) {
    using E = decltype(el);
    uint4 q[4];
    LoadElems16<E>(p, e, q);
    r = SymbolsOf16<E>(q);
  });
  return r;
}

// The symbol of element e (< n).
__device__ __forceinline__ uint32_t SymbolAt(const ChunkPlan& p, uint64_t e) {
  const uint8_t* src = p.in.At(e * p.e.bytes);  // an element never straddles blocks
  uint32_t v = 0;
  for (uint32_t b = 0; b < p.e.bytes; ++b) v |= static_cast<uint32_t>(src[b]) << (8 * b);
  return p.e.Symbol(v);
}

__global__ void __launch_bounds__(256) Hist16Kernel(const int32_t* status, Workspace ws) {
  WaitForPrevious();
  const int c = blockIdx.y;
  if (status[c] != kOk) return;
  const ChunkPlan p = ws.plan[c];
  const uint64_t e0 = static_cast<uint64_t>(blockIdx.x) * kSplitElems;
  if (p.stored || !p.grouping || e0 >= p.n) return;
  __shared__ uint32_t hist[16 * 256];
  __shared__ uint8_t group[kMaxGroupedChannels];
  const uint32_t C = static_cast<uint32_t>(p.channels);
  for (uint32_t k = threadIdx.x; k < 16 * 256; k += blockDim.x) hist[k] = 0;
  for (uint32_t k = threadIdx.x; k < C; k += blockDim.x) group[k] = ws.group16[c * 1ull * kMaxGroupedChannels + k];
  __syncthreads();
  const uint64_t e1 = min(p.n, e0 + kSplitElems);
  const uint32_t base_ch = static_cast<uint32_t>(e0 % C);
  for (uint64_t i = e0 + 16ull * threadIdx.x; i < e1; i += 16ull * blockDim.x) {
    const uint32_t count = static_cast<uint32_t>(min(static_cast<uint64_t>(16), e1 - i));
    const uint4 q = LoadSymbols16(p, i);
    uint8_t s[16];
    std::memcpy(s, &q, 16);
    uint32_t chn = (base_ch + static_cast<uint32_t>(i - e0)) % C;
    for (uint32_t k = 0; k < count; ++k) {
      atomicAdd(&hist[group[chn] * 256 + s[k]], 1u);
      if (++chn == C) chn = 0;
    }
  }
  __syncthreads();
  for (uint32_t k = threadIdx.x; k < 16 * 256; k += blockDim.x) {
    if (hist[k] != 0) atomicAdd(&ws.hist16[c * 4096ull + k], static_cast<unsigned long long>(hist[k]));
  }
}

// A table's encode entries, freq | cum << 16 (cum: the frequencies of the
// symbols before), where lane l holds the frequencies of symbols 8l .. 8l + 7:
// put(s, entry) for each symbol s. The whole warp calls it.
template <typename Put>
__device__ __forceinline__ void WarpEncodeEntries(const uint32_t (&f)[8], const Put& put) {
  const uint32_t lane = threadIdx.x % 32;
  uint32_t run = 0;
  for (int k = 0; k < 8; ++k) run += f[k];
  uint32_t cum = WarpInclusiveScan(run) - run;
  for (int k = 0; k < 8; ++k) {
    put(8 * lane + k, f[k] | cum << 16);
    cum += f[k];
  }
}

// A table as the chunk stores it at tp: lo, count, then freq(s) for s = lo ..
// lo + count - 1. The whole warp calls it.
template <typename Freq>
__device__ __forceinline__ void WarpStoreTable(uint8_t* tp, uint2 range, const Freq& freq) {
  const uint32_t lane = threadIdx.x % 32;
  if (lane == 0) {
    St16(tp, range.x);
    St16(tp + 2, range.y);
  }
  for (uint32_t k = lane; k < range.y; k += 32) St16(tp + 4 + 2 * k, freq(range.x + k));
}

// The plan's directory and tile offsets, after tables that end at
// tables_end.
__device__ __forceinline__ void SetSections(ChunkPlan& p, uint64_t tables_end) {
  p.tables_bytes = tables_end - kHeader - p.raw_plane;
  p.dir_off = tables_end;
  const uint64_t dir_end = tables_end + 4ull * p.tiles;
  p.tiles_off = dir_end + (4 - dir_end % 4) % 4;
}

// Zeros between the directory and tile 0 (SetSections).
__device__ __forceinline__ void ZeroDirectoryPadding(const ChunkPlan& p, uint8_t* out) {
  for (uint64_t b = p.dir_off + 4ull * p.tiles; b < p.tiles_off; ++b) out[b] = 0;
}

// Picks the table count (order-0 first, then 2, 4, 8, 16 channel groups; the
// first strictly cheaper wins), writes map and tables into the chunk and the
// encode tables into the workspace.
__global__ void __launch_bounds__(256) PlanKernel(const EncodeChunk* chunks, const int32_t* status, Workspace ws) {
  WaitForPrevious();
  LetNextStart();
  const int c = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Plan is a chain of round trips to memory, so everything that depends on
  // nothing else loads at once: the status, the chunk's plan (SharedPlan),
  // the order-0 histogram, and the chunk's output (measured on an H100: 8.1
  // -> 7.6 us at 64 MiB).
  ChunkPlan& p = SharedPlan();
  const int32_t st = status[c];
  if (threadIdx.x == 0) p = ws.plan[c];
  uint64_t h0[8];
  if (warp == 0) {
    for (int k = 0; k < 8; ++k) h0[k] = ws.hist[c * 256ull + 8 * lane + k];
  }
  uint8_t* const out = chunks[c].out;
  const uint64_t out_capacity = chunks[c].out_capacity;
  const bool allow_stored = chunks[c].allow_stored;
  if (warp == 0) {  // read: zero again for the next call's Split, whatever becomes of this chunk
    for (int k = 0; k < 8; ++k) ws.hist[c * 256ull + 8 * lane + k] = 0;
  }
  if (threadIdx.x == 0) ws.table_ok[c] = 0;  // set again below once an order-0 table is written
  __syncthreads();
  if (st != kOk || p.stored) return;  // uniform for the block
  __shared__ uint32_t freq[31][256];  // 0: order-0; then 2 + 4 + 8 + 16 group tables
  __shared__ uint64_t cost[31];
  __shared__ uint32_t chosen_first, chosen_count, chosen_shift, stored;
  __shared__ uint64_t chosen_cost;
  const uint32_t C = static_cast<uint32_t>(p.channels);
  if (warp == 0 && p.sampled) {  // a sample's holes (plan::SampleHole) count 1
    // A lane's neighbours: the symbol below its first and above its last.
    const uint64_t below = __shfl_up_sync(0xffffffffu, h0[7], 1), above = __shfl_down_sync(0xffffffffu, h0[0], 1);
    bool hole[8];
    uint32_t holes = 0;
    for (int k = 0; k < 8; ++k) {
      const uint64_t b = k > 0 ? h0[k - 1] : lane > 0 ? below : 0, a = k < 7 ? h0[k + 1] : lane < 31 ? above : 0;
      hole[k] = plan::SampleHole(b, h0[k], a);
      holes += hole[k];
    }
    if (__reduce_add_sync(0xffffffffu, holes) <= plan::kMaxSampleHoles) {
      for (int k = 0; k < 8; ++k) h0[k] += hole[k];
    }
  }
  if (warp == 0) {  // the order-0 table
    uint32_t f[8];
    const uint64_t q = WarpNormalize(h0, f, p.grouping || ws.estimate != nullptr ? ws.log2q16 : nullptr, nullptr,
                                     plan::Refined(p.dtype) ? ws.log2q16 : nullptr);
    for (int k = 0; k < 8; ++k) freq[0][8 * lane + k] = f[k];
    if (lane == 0) cost[0] = q;
  }
  if (p.grouping) {
    // Table t of the G-table candidate is slot G - 1 + t (G = 2, 4, 8, 16).
    for (uint32_t slot = 1 + warp; slot < 31; slot += blockDim.x / 32) {
      const uint32_t G = slot < 3 ? 2 : slot < 7 ? 4 : slot < 15 ? 8 : 16;
      const uint32_t t = slot - (G - 1), shift = G == 2 ? 3 : G == 4 ? 2 : G == 8 ? 1 : 0;
      uint64_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (uint32_t g = t << shift; g < ((t + 1) << shift); ++g) {
        for (int k = 0; k < 8; ++k) h[k] += ws.hist16[c * 4096ull + g * 256 + 8 * lane + k];
      }
      uint32_t f[8];
      const uint64_t q = WarpNormalize(h, f, ws.log2q16, nullptr, plan::Refined(p.dtype) ? ws.log2q16 : nullptr);
      for (int k = 0; k < 8; ++k) freq[slot][8 * lane + k] = f[k];
      if (lane == 0) cost[slot] = q;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t best = cost[0];
    uint32_t first = 0, count = 1, shift = 0;
    if (p.grouping) {
      for (uint32_t G = 2; G <= 16 && G <= C; G *= 2) {
        uint64_t q = static_cast<uint64_t>(C) << 19;  // the map
        for (uint32_t t = 0; t < G; ++t) q += cost[G - 1 + t];
        if (q < best) {
          best = q;
          first = G - 1;
          count = G;
          shift = G == 2 ? 3 : G == 4 ? 2 : G == 8 ? 1 : 0;
        }
      }
    }
    chosen_first = first;
    chosen_count = count;
    chosen_shift = shift;
    chosen_cost = best;
    p.tables = count;
    p.shift = shift;
  }
  __syncthreads();
  const uint32_t first = chosen_first, G = chosen_count;
  // Table byte offsets within the chunk.
  __shared__ uint64_t table_off[17];
  __shared__ uint32_t table_lo[16], table_n[16];
  for (uint32_t t = warp; t < G; t += blockDim.x / 32) {  // each table's symbol range
    uint32_t f[8];
    for (int k = 0; k < 8; ++k) f[k] = freq[first + t][8 * lane + k];
    const uint2 range = WarpTableRange(f);
    if (lane == 0) table_lo[t] = range.x, table_n[t] = range.y;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t off = kHeader + p.raw_plane + (G > 1 ? C : 0);
    for (uint32_t t = 0; t < G; ++t) {
      table_off[t] = off;
      off += 4 + 2ull * table_n[t];
    }
    table_off[G] = off;
    SetSections(p, off);
    // Like the CPU, code only when it can pay: side sections alone must leave
    // room (unless STORED is not allowed: split-send).
    stored = p.tiles_off - kHeader >= p.bytes && (allow_stored || p.raw_plane == 0);
    if (stored) p.stored = 1;
    ws.plan[c] = p;
    // A STORED chunk overwrites them.
    if (p.tiles_off <= out_capacity) ZeroDirectoryPadding(p, out);
    if (!stored && ws.estimate != nullptr) {
      // A sampled table's symbol cost scaled by the stride, as the CPU's.
      const uint64_t side = p.tables_bytes << 19;  // one table, no map
      const uint64_t q = p.sampled ? plan::kSampleStride * (chosen_cost - side) + side : chosen_cost;
      ws.estimate[c] = plan::EstimatedChunkBytes(p.raw_plane, q, p.tiles, p.carry_tiles);
    }
  }
  __syncthreads();
  if (stored) return;
  if (G > 1) {
    for (uint32_t k = threadIdx.x; k < C; k += blockDim.x) {
      const uint8_t m = ws.group16[c * 1ull * kMaxGroupedChannels + k] >> chosen_shift;
      ws.map[c * 1ull * kMaxGroupedChannels + k] = m;
      out[kHeader + p.raw_plane + k] = m;
    }
  }
  for (uint32_t t = warp; t < G; t += blockDim.x / 32) {
    const uint32_t* ft = freq[first + t];
    WarpStoreTable(out + table_off[t], make_uint2(table_lo[t], table_n[t]), [ft](uint32_t s) { return ft[s]; });
    // Encode tables (one warp, 8 symbols a lane).
    uint32_t f[8];
    for (int k = 0; k < 8; ++k) f[k] = ft[8 * lane + k];
    WarpEncodeEntries(f, [&](uint32_t s, uint32_t e) { ws.enc[(c * 16ull + t) * 256 + s] = e; });
  }
  // Table 0 is the whole chunk's: what a later call may reuse.
  if (G == 1 && threadIdx.x == 0) ws.table_ok[c] = 1;
}

// Table reuse: a block a chunk. The chunk's plan as Split makes it, then as
// a fused chunk (one pass in the fused Tiles kernel: raw plane, checksum,
// coding) whose order-0 table is the one Plan last wrote for this chunk slot
// (ws.enc, table_ok), treated as a sample's (a tile with a symbol it lacks is
// RAW), as the CPU's EncodeOptions::table. The table, the directory's padding
// and the chunk's plan are written here; Tiles and Place do the rest.
__global__ void __launch_bounds__(256)
    ReuseKernel(const EncodeChunk* chunks, int32_t* status, uint64_t* sizes, Workspace ws) {
  WaitForPrevious();
  LetNextStart();
  const int c = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const EncodeChunk& ch = chunks[c];
  ChunkPlan& p = SharedPlan();
  __shared__ int32_t err;
  __shared__ uint32_t count, freq[256];
  uint32_t f[8];
  if (warp == 0) {  // the table, loaded beside the request
    for (int k = 0; k < 8; ++k) freq[8 * lane + k] = f[k] = ws.enc[c * 4096ull + 8 * lane + k] & 0xffff;
  }
  if (threadIdx.x == 0) {
    err = MakePlan(ch, ws, &p);
    // The fused path's requests: bf16 in whole 4 KiB blocks, the raw plane
    // 8-byte aligned, STORED allowed (the chunk is coded in one pass).
    const bool fusable = ch.dtype == kBf16Dtype && ch.bytes > 0 && ch.bytes % checksum::kBlockBytes == 0 &&
                         reinterpret_cast<uintptr_t>(ch.out + kHeader) % 8 == 0 && ch.allow_stored;
    if (err == kOk && !fusable) err = kBadInput;
    if (err == kOk && ws.table_ok[c] == 0) err = kNoTable;
    p.grouping = 0, p.sampled = 1, p.fused = 1, p.tables = 1, p.shift = 0;
  }
  __syncthreads();
  bool ok = err == kOk;
  if (ok && p.in.blocks != nullptr) ok = BlockPointersOk(ch.in);  // uniform for the block
  if (warp == 0 && ok) {
    const uint2 range = WarpTableRange(f);  // Plan wrote a table of kM: not empty
    if (lane == 0) count = range.y;
    __syncwarp();  // freq[] as the lanes stored it
    const uint32_t* fr = freq;
    WarpStoreTable(ch.out + kHeader + p.raw_plane, range, [fr](uint32_t s) { return fr[s]; });
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (ok) {
      // Whole 4 KiB blocks leave the side sections room, so the chunk is
      // never STORED before Tiles (which alone sums its checksum).
      SetSections(p, kHeader + p.raw_plane + 4 + 2ull * count);
      ZeroDirectoryPadding(p, ch.out);
    }
    status[c] = ok ? kOk : err != kOk ? err : kBadInput;
    sizes[c] = 0;
    ws.plan[c] = p;
  }
  if (ok) {
    for (uint32_t k = threadIdx.x; k < TsumSlots(p.tiles); k += blockDim.x) {
      ws.tsum[c * 1ull * TsumSlots(ws.max_tiles) + k] = 0;
    }
  }
}

// ---- tiles -----------------------------------------------------------------------

// A symbol's encode entry as the rANS step uses it. Order-0 tables are kept
// in shared memory as ExactEntry gives it (16 bytes a symbol: no unpacking
// in the step); channel-group tables, up to 16 of them, as {freq | cum <<
// 16, rcp} (8 bytes), rcp = floor((2^32 - 1) / freq), unpacked here into
// {rcp, freq, M - freq, cum} for the step that corrects its quotient.
__device__ __forceinline__ uint4 StepEntry(uint2 e) {
  const uint32_t f = e.x & 0xffff;
  return make_uint4(e.y, f, kM - f, e.x >> 16);
}

// The order-0 entry of table entry e (freq | cum << 16): {m_lo, m_hi, M -
// freq, cum}, m = ceil(2^40 / f) from `magic` (Workspace::magic, here a
// shared-memory copy). f = 0, a symbol a sampled table lacks: {0, 0, M, cum}
// (its tile is RAW, whatever the step makes).
__device__ __forceinline__ uint4 ExactEntry(uint32_t e, const uint2* magic) {
  const uint32_t f = e & 0xffff;  // <= kM
  const uint2 m = magic[f];
  return make_uint4(m.x, m.y, kM - f, e >> 16);
}

// The frequency of a step entry: ExactEntry (kExact) or StepEntry.
template <bool kExact>
__device__ __forceinline__ uint32_t EntryFreq(uint4 e) {
  return kExact ? kM - e.z : e.y;
}

// One rANS step of a lane: in an odd round (kOdd), emits a word
// (ballot-compacted into the stream, which is written backwards from
// words_end) if x >= f * f_even << 16, f_even the frequency of the lane's
// symbol in the even round before it (docs/codec-format.md: a lane
// renormalises once per two symbols); then folds symbol entry `e` into x:
// an ExactEntry (kExact, order-0 tables) or a StepEntry. Written for a
// short chain from x to the next x (the latency of a 4 MiB call's Tiles is
// 128 rounds of these chains one after another): compare, shift, then
// umulhi, multiply-add, shift, multiply-add (kExact) or umulhi,
// multiply-add, compare, select.
template <bool kOdd, bool kExact>
__device__ __forceinline__ void EncodeStep(bool active, uint4 e, uint32_t f_even, uint32_t lt, uint16_t* words_end,
                                           uint32_t& x, uint32_t& emitted) {
  const uint32_t f = EntryFreq<kExact>(e);
  bool need = false;
  if (kOdd) {
    // x >> 16 >= f f_even as one compare of x: x > (f f_even << 16) - 1,
    // which for f f_even = 2^16 wraps to 2^32 - 1 (never), as x < 2^32.
    const uint32_t bound = (f * f_even << 16) - 1u;
    need = active && x > bound;
    const unsigned mask = __ballot_sync(0xffffffffu, need);
    const uint32_t k = __popc(mask);
    // The word from a register of its own: the shift below then need not
    // wait for the store to read x.
    uint32_t word;
    asm("and.b32 %0, %1, 0xffff;" : "=r"(word) : "r"(x));
    if (need) words_end[static_cast<int32_t>(__popc(mask & lt)) - static_cast<int32_t>(emitted + k)] =
        static_cast<uint16_t>(word);
    emitted += k;
  }
  // x = (v / f) * M + v % f + cum = v + q * (M - f) + cum with q = v / f,
  // where v < f << 24 before either step of a pair (f = M is the identity,
  // whichever q).
  const uint32_t v = need ? x >> 16 : x;
  if constexpr (kExact) {
    // q = floor(v m / 2^40) = (v m_hi + umulhi(v, m_lo)) >> 8, exact: with
    // m f = 2^40 + d, d < f, the error v d / (f 2^40) stays under 1 / f
    // (v d < f^2 2^24 < 2^40), and the sum under 2^32 (q < 2^24). f = M:
    // m = 2^32. On an H100 this chain took 59.6 cycles a round against 67.7
    // for the corrected one (docs/performance.md).
    const uint32_t h = __umulhi(v, e.x);
    uint32_t a, nx;
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(a) : "r"(v), "r"(e.y), "r"(h));
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(nx) : "r"(a >> 8), "r"(e.z), "r"(v + e.w));
    if (active) x = nx;
  } else {
    // umulhi(v, rcp) is q or one short of it ((q + 1) f <= v + f < 2^32).
    // Both results are formed while the correction is decided.
    const uint32_t q = __umulhi(v, e.x);
    // x0 and x1 as two multiply-adds (in PTX, so that x1 is not rewritten
    // as x0 plus a selected term, which puts the add back on the chain).
    uint32_t x0, x1;
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x0) : "r"(q), "r"(e.z), "r"(v + e.w));
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(x1) : "r"(q), "r"(e.z), "r"(v + e.w + e.z));
    if (active) x = v >= q * f + f ? x1 : x0;
  }
}

// EncodeStep for a round r known only at run time.
template <bool kExact>
__device__ __forceinline__ void EncodeStepAt(uint32_t r, bool active, uint4 e, uint32_t f_even, uint32_t lt,
                                             uint16_t* words_end, uint32_t& x, uint32_t& emitted) {
  if (r % 2 == 1) {
    EncodeStep<true, kExact>(active, e, f_even, lt, words_end, x, emitted);
  } else {
    EncodeStep<false, kExact>(active, e, 0, lt, words_end, x, emitted);
  }
}

__device__ __forceinline__ void AddTileSize(const Workspace& ws, int c, uint32_t tile, uint32_t size) {
  unsigned long long* t = ws.tsum + c * 1ull * TsumSlots(ws.max_tiles);
  atomicAdd(&t[0], static_cast<unsigned long long>(size));
  atomicAdd(&t[1 + tile / kTsumGroup], static_cast<unsigned long long>(size));
}

// A RAW tile's symbols (groups of 8 from element `begin`) into scratch: the
// symbols again, 16 elements a lane per load (zeros past the chunk's end,
// which a partial tile shares), packed two groups at a time. Not inlined, so
// that it leaves the rANS loop's code as it is (inlined, it cost Tiles 12%).
__device__ __noinline__ void PackRawTile(const ChunkPlan* plan, uint64_t begin, uint32_t groups, uint8_t* scratch) {
  const ChunkPlan& p = *plan;
  WithElem(p.dtype, [&](auto el) {
    using E = decltype(el);
    for (uint32_t g2 = threadIdx.x % 32; 2 * g2 < groups; g2 += 32) {
      uint4 q[E::bytes];
      LoadElems16<E>(p, begin + 16ull * g2, q);
      const uint4 sy = SymbolsOf16<E>(q);
      uint32_t v[16];
#pragma unroll
      for (uint32_t k = 0; k < 16; ++k) {
        const uint32_t w = k < 4 ? sy.x : k < 8 ? sy.y : k < 12 ? sy.z : sy.w;
        v[k] = (w >> (8 * (k % 4))) & 0xff;
      }
      PackGroup8(v, E::exp_bits, scratch + 2 * g2 * E::exp_bits);
      if (2 * g2 + 1 < groups) PackGroup8(v + 8, E::exp_bits, scratch + (2 * g2 + 1) * E::exp_bits);
    }
  });
}

constexpr uint32_t kStageRounds = 16;  // symbols are staged through shared memory 16 rounds (512 B) at a time

// A fused chunk's tile (ChunkPlan::fused: bf16, whole segments): the order-0
// rounds of CodeSegments, and the raw plane and the kvsum64 that Split writes
// and sums for other chunks. Lane t takes the 16-byte pieces at 16t and 16t + 512 of each
// segment's 1 KiB: pieces 2(sg % 4) and 2(sg % 4) + 1 of Kvsum64Pairs' layout
// of the segment's checksum block (the tile starts on a block). The pieces
// come in through the warp's shared-memory stage `in` (two segments of 64
// pieces, fetched a segment ahead by cp.async), so that no register holds
// them while a segment is coded (as registers, they cost Tiles spills).
// The input's loads and the raw plane's stores carry the L2 policy `pol`.
// Returns the lane's OR of M - f over its symbols: bit kProbBits set if the table
// lacks one of them. kContig: the input is one buffer, not a block list.
template <bool kContig>
__device__ __forceinline__ uint32_t CodeFusedTile(const ChunkPlan& p, uint64_t begin, uint32_t tile, uint32_t segs,
                                                  const uint4* tables, uint4 (*stage)[32], uint4 (*in)[64],
                                                  ulonglong2* sums, uint64_t (*sd)[checksum::kLanes],
                                                  const uint64_t* key, unsigned long long* gsum, uint64_t pol,
                                                  uint32_t lt, uint16_t* words_end, uint32_t& x, uint32_t& emitted) {
  const uint32_t lane = threadIdx.x % 32;
  sums[lane] = make_ulonglong2(0, 0);  // the lane's Kvsum64Pairs, kept in shared memory between segments
  // The raw plane: a byte an element, less the carry of each tile before
  // this one; this tile's own carry (its last kCarryBytes elements, in the
  // last segment) is in its states.
  const bool carries = tile < p.carry_tiles;
  uint8_t* const plane = p.out + kHeader - plan::CarriedBefore(tile, p.carry_tiles);
  uint32_t unseen = 0;
  auto fetch = [&](uint32_t sg) {  // whole 16-byte pieces never straddle blocks of a list
    const uint64_t off = 2 * (begin + 512ull * sg) + 16 * lane;
    CpAsync16Hint(&in[sg & 1][lane], kContig ? p.in.data + off : p.in.At(off), pol);
    CpAsync16Hint(&in[sg & 1][lane + 32], kContig ? p.in.data + off + 512 : p.in.At(off + 512), pol);
    CpAsyncCommit();
  };
  fetch(segs - 1);
  for (uint32_t sg = segs; sg-- > 0;) {
    if (sg > 0) {
      fetch(sg - 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    const uint4 q[2] = {in[sg & 1][lane], in[sg & 1][lane + 32]};  // this lane's own copies
    const uint4 sy = SymbolsOf16<Bf16>(q);
    uint8_t* st = reinterpret_cast<uint8_t*>(stage[sg & 1]);
    *reinterpret_cast<uint2*>(st + 8 * lane) = make_uint2(sy.x, sy.y);
    *reinterpret_cast<uint2*>(st + 256 + 8 * lane) = make_uint2(sy.z, sy.w);
    {
      const uint64_t blk = (2 * begin + 1024ull * sg) / checksum::kBlockBytes;
      const uint64_t e = begin + 512ull * sg + 8 * lane;
      kvferry::cuda::Kvsum64Pairs sum;
      sum.a = sums[lane].x;
      sum.b = sums[lane].y;
#pragma unroll
      for (uint32_t h = 0; h < 2; ++h) {
        const ulonglong2 k = *reinterpret_cast<const ulonglong2*>(key + 64 * (2 * (sg % 4) + h) + 2 * lane);
        sum.Add(q[h].x | static_cast<uint64_t>(q[h].y) << 32, q[h].z | static_cast<uint64_t>(q[h].w) << 32, k);
        if (!carries || sg + 1 < segs || h == 0 || lane < 32 - plan::kCarryBytes / 8) {
          Store64Hint(plane + e + 256 * h, Bf16Raw8(q[h]), pol);
        }
      }
      if (sg % 4 == 0) {  // the block's lane sums (Kvsum64WarpFinishPairs), digested after the tile
        for (int o = 4; o < 32; o *= 2) {
          sum.a += __shfl_xor_sync(0xffffffffu, sum.a, o);
          sum.b += __shfl_xor_sync(0xffffffffu, sum.b, o);
        }
        const uint32_t l = lane % checksum::kLanes;  // checksum lane l is held by lane l / 2
        const uint64_t pa = __shfl_sync(0xffffffffu, sum.a, l / 2), pb = __shfl_sync(0xffffffffu, sum.b, l / 2);
        if (lane < checksum::kLanes) sd[sg / 4][lane] = l % 2 ? pb : pa;
        sum.a = sum.b = 0;
      }
      sums[lane] = make_ulonglong2(sum.a, sum.b);
    }
    __syncwarp();
#pragma unroll 4  // pairs of rounds; 8: spills at 64 registers
    for (int r = kStageRounds - 1; r >= 0; r -= 2) {
      const uint4 odd = tables[st[r * 32 + lane]], even = tables[st[(r - 1) * 32 + lane]];
      unseen |= odd.z | even.z;
      EncodeStep<true, true>(true, odd, EntryFreq<true>(even), lt, words_end, x, emitted);
      EncodeStep<false, true>(true, even, 0, lt, words_end, x, emitted);
    }
  }
  // The digests of the tile's blocks, four at a time: lanes 8j .. 8j + 7 merge
  // block j's checksum lanes (Kvsum64AddBlockAcc for each).
  __syncwarp();
  const uint32_t blocks = segs / 4;
  const uint64_t blk0 = 2 * begin / checksum::kBlockBytes;
  for (uint32_t j0 = 0; j0 < blocks; j0 += 4) {
    const uint32_t j = j0 + lane / checksum::kLanes, l = lane % checksum::kLanes;
    const bool valid = j < blocks;
    const uint64_t round = checksum::Round(0, checksum::Seed(blk0 + j, static_cast<int>(l)) + (valid ? sd[j][l] : 0));
    uint64_t d = checksum::MergeStart(checksum::kBlockBytes);
    for (uint32_t k = 0; k < checksum::kLanes; ++k) {
      d = checksum::MergeStep(d, __shfl_sync(0xffffffffu, round, (lane & ~(checksum::kLanes - 1)) + k));
    }
    if (valid && l == 0) atomicAdd(gsum, static_cast<unsigned long long>(checksum::Avalanche(d)));
  }
  return unseen;
}

// A barrier of a block's first n threads (a multiple of 32): the coding
// warps of the small Tiles instance, without its helper warps.
__device__ __forceinline__ void CodersSync(uint32_t n) { asm volatile("bar.sync 1, %0;" ::"r"(n) : "memory"); }

// A helper warp of the small Tiles instance (plane_in_tiles chunks): what
// Split does for other chunks, for one 4 KiB checksum block `blk` of a
// tile, while the tile's coding warp plans and codes: the raw plane (a byte
// an element, less the carry of each tile before; a tile's own carry, its
// last kCarryBytes elements, is in its states) and the block's kvsum64
// digest, lane t the pieces at 16t + 512i as in Kvsum64Pairs' layout.
__device__ __forceinline__ void TilePlaneBlock(const ChunkPlan& p, int c, uint64_t blk, const Workspace& ws) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t tile = blk * (checksum::kBlockBytes / 2) >> p.tile_log2;
  const uint64_t end = min((tile + 1) << p.tile_log2, p.n);                    // whole 4 KiB blocks (MakePlan)
  const uint64_t kept = tile < p.carry_tiles ? end - plan::kCarryBytes : end;  // elements in the plane
  uint8_t* const plane = p.out + kHeader - plan::CarriedBefore(tile, p.carry_tiles);
  constexpr uint32_t kPieces = checksum::kBlockBytes / 512;
  uint4 q[kPieces];
#pragma unroll
  for (uint32_t i = 0; i < kPieces; ++i) {
    q[i] = *reinterpret_cast<const uint4*>(p.in.At(blk * checksum::kBlockBytes + 512 * i + 16 * lane));
  }
  kvferry::cuda::Kvsum64Pairs sum;
#pragma unroll
  for (uint32_t i = 0; i < kPieces; ++i) {
    const ulonglong2 k = __ldg(reinterpret_cast<const ulonglong2*>(ws.keys + 64 * i + 2 * lane));
    sum.Add(q[i].x | static_cast<uint64_t>(q[i].y) << 32, q[i].z | static_cast<uint64_t>(q[i].w) << 32, k);
    const uint64_t e = (blk * checksum::kBlockBytes + 512 * i + 16 * lane) / 2;  // 8 elements, in or out of the carry
    if (e < kept) *reinterpret_cast<uint64_t*>(plane + e) = Bf16Raw8(q[i]);
  }
  sum.Finish(blk, checksum::kBlockBytes, SumSlot(ws.sum, c, blk));
}

// A self-planned call (Workspace::self_plan: small, order-0, no split
// point, no chunk large enough to be sampled) has no Plan kernel: each block
// of the small Tiles instance normalises the chunk's order-0 histogram
// itself, the same table Plan would make (WarpNormalize), and its block 0
// writes what Plan writes: the table into the chunk, the encode table (for
// table reuse), the plan's table and section fields, the directory padding
// and table_ok. Place clears the histogram once every block has read it.
// For a coded chunk (status kOk, not STORED by Split) sets p.tables and
// p.stored and leaves the entries (freq | cum << 16) in words[0, 256); word
// 256 carries the STORED decision. The block's coding warps call it (the
// first coder_threads threads). kOnly: 0, or the chunk's dtype.
template <uint32_t kOnly>
__device__ void SelfPlan(const EncodeChunk& ch, int c, bool coded, ChunkPlan& p, const Workspace& ws, uint32_t* words,
                         uint32_t coder_threads) {
  uint32_t& stored = words[256];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (!coded) {
    if (blockIdx.x == 0 && threadIdx.x == 0) ws.table_ok[c] = 0;
    return;
  }
  if (warp == 0) {
    uint64_t h[8];
    for (int k = 0; k < 8; ++k) h[k] = ws.hist[c * 256ull + 8 * lane + k];
    uint32_t f[8];
    uint2 range;
    WarpNormalize(h, f, nullptr, &range, plan::Refined(kOnly != 0 ? kOnly : p.dtype) ? ws.log2q16 : nullptr);
    WarpEncodeEntries(f, [words](uint32_t s, uint32_t e) { words[s] = e; });
    ChunkPlan q = p;
    q.tables = 1;
    q.shift = 0;
    SetSections(q, kHeader + q.raw_plane + 4 + 2ull * range.y);
    // As Plan: code only when the side sections leave room.
    const bool s = q.tiles_off - kHeader >= q.bytes && (ch.allow_stored || q.raw_plane == 0);
    if (blockIdx.x == 0) {
      __syncwarp();
      if (!s) {
        WarpStoreTable(ch.out + kHeader + q.raw_plane, range, [words](uint32_t k) { return words[k] & 0xffff; });
        for (int k = 0; k < 8; ++k) ws.enc[c * 4096ull + 8 * lane + k] = words[8 * lane + k];  // for table reuse
      }
      if (lane == 0) {
        // Field by field: the other blocks copy the plan as these land, and
        // use their own values of these fields.
        ChunkPlan& planned = ws.plan[c];
        planned.tables = 1;
        planned.shift = 0;
        planned.stored = s;
        planned.tables_bytes = q.tables_bytes;
        planned.dir_off = q.dir_off;
        planned.tiles_off = q.tiles_off;
        if (q.tiles_off <= ch.out_capacity) ZeroDirectoryPadding(q, ch.out);
        ws.table_ok[c] = s ? 0 : 1;
      }
    }
    if (lane == 0) stored = s;
  }
  CodersSync(coder_threads);
  p.tables = 1;
  p.stored = stored;
}

// A lane's channel a round (32 elements) earlier, of C channels, back =
// 32 mod C.
__device__ __forceinline__ uint32_t ChannelBefore(uint32_t ch, uint32_t back, uint32_t C) {
  return ch >= back ? ch - back : ch + C - back;
}

// A tile's full rounds in segments of 16 (TilesKernel, all but fused
// chunks): what they read, and the state they carry on.
struct SegmentsIn {
  uint64_t begin;
  uint32_t full, segs, lane, lt;
  uint32_t C, back;  // channels, and 32 mod C (groups)
  bool groups, sampled;
  bool have_pre;  // pre: the lane's 16 elements of the last segment, loaded ahead (self-planned)
  uint4 pre[4];
  uint16_t* words_end;
};
struct SegmentsState {
  uint32_t x, emitted, unseen, chn;
};

// The Tiles kernel's shared memory (CodeSegments reads it as well).
__shared__ uint4
    tiles_tables[kMaxTables * 256 / 2];  // order-0: uint4 ExactEntry; groups: uint2 {freq | cum << 16, rcp}
__shared__ alignas(16) uint8_t tiles_map[kMaxGroupedChannels];
__shared__ uint4 tiles_stage[kTilesPerBlock][2][32];

// Full rounds, last to first, in segments of 16 rounds; the next segment's
// 512 symbols load (one uint4 per lane) while this one is coded.
template <typename E, bool kSmall>
__device__ __forceinline__ void CodeSegments(const ChunkPlan& p, const SegmentsIn& a, SegmentsState& state) {
  const uint32_t warp = threadIdx.x / 32;
  const uint64_t begin = a.begin;
  const uint32_t full = a.full, segs = a.segs, lane = a.lane, lt = a.lt, C = a.C, back = a.back;
  const bool groups = a.groups, sampled = a.sampled, have_pre = a.have_pre;
  uint16_t* const words_end = a.words_end;
  const uint4* const tables = tiles_tables;
  const uint2* const enc = reinterpret_cast<const uint2*>(tiles_tables);
  const uint8_t* const map = tiles_map;
  uint4(*const stage)[32] = tiles_stage[warp];
  const uint8_t* st0 = reinterpret_cast<const uint8_t*>(stage[0]);
  const uint8_t* st1 = reinterpret_cast<const uint8_t*>(stage[1]);
  uint32_t &x = state.x, &emitted = state.emitted, &unseen = state.unseen, &chn = state.chn;
  auto before = [&](uint32_t ch) { return ChannelBefore(ch, back, C); };
  auto step_back = [&] {
    if (groups) chn = before(chn);
  };
  const uint4* const pre = a.pre;
  // A lane loads 16 elements of the segment (their symbols are staged when
  // the segment's turn comes, so no register waits on the load before that).
  uint4 next[E::bytes];
  if (kSmall && have_pre) {
#pragma unroll
    for (uint32_t k = 0; k < E::bytes; ++k) next[k] = pre[k];
  } else if (segs > 0) {
    LoadElems16<E>(p, begin + 512u * (segs - 1) + 16 * lane, next);
  }
  for (uint32_t sg = segs; sg-- > 0;) {
    stage[sg & 1][lane] = SymbolsOf16<E>(next);
    if (sg > 0) LoadElems16<E>(p, begin + 512u * (sg - 1) + 16 * lane, next);
    __syncwarp();
    const uint8_t* st = (sg & 1) ? st1 : st0;
    const uint32_t r0 = sg * kStageRounds, r1 = min(full, r0 + kStageRounds);
    // Segments start at even rounds (r0), so an odd round's partner is in
    // its segment; r1 may be odd (the partial last round was coded before).
    if (groups) {
      if (r1 - r0 == kStageRounds) {  // a whole segment: pairs of rounds, odd then even
#pragma unroll 2
        for (int r = kStageRounds - 1; r >= 0; r -= 2) {
          const uint32_t ch0 = before(chn);  // the even round's channel
          const uint2 odd = enc[map[chn] * 256u + st[r * 32 + lane]];
          const uint2 even = enc[map[ch0] * 256u + st[(r - 1) * 32 + lane]];
          EncodeStep<true, false>(true, StepEntry(odd), even.x & 0xffff, lt, words_end, x, emitted);
          EncodeStep<false, false>(true, StepEntry(even), 0, lt, words_end, x, emitted);
          chn = before(ch0);
        }
      } else {
        // An odd round loads its even partner's entry too, for the round after.
        uint2 even = make_uint2(0, 0);
        for (uint32_t r = r1; r-- > r0;) {
          if (r % 2 == 1) {
            even = enc[map[before(chn)] * 256u + st[(r - 1 - r0) * 32 + lane]];
            EncodeStep<true, false>(true, StepEntry(enc[map[chn] * 256u + st[(r - r0) * 32 + lane]]), even.x & 0xffff,
                                    lt, words_end, x, emitted);
          } else {
            if (r + 1 == r1) even = enc[map[chn] * 256u + st[(r - r0) * 32 + lane]];  // its partner was coded before
            EncodeStep<false, false>(true, StepEntry(even), 0, lt, words_end, x, emitted);
          }
          step_back();
        }
      }
    } else if (r1 - r0 == kStageRounds && !sampled) {
      if constexpr (kSmall) {
        uint4 en[kStageRounds];
#pragma unroll
        for (int r = 0; r < static_cast<int>(kStageRounds); ++r) en[r] = tables[st[r * 32 + lane]];
        // The segment's words are put out after its rounds: each odd
        // round keeps its word and whether it emits (bit k of nb), so that
        // no ballot or store sits between the rounds; then the ballots,
        // the places, and a store by every lane, one that emits nothing
        // storing into a spare slot just past the states (a tile's words
        // take at most half of their space, so none reaches it).
        uint32_t w[kStageRounds / 2], nb = 0;
#pragma unroll
        for (int r = kStageRounds - 1; r >= 0; r -= 2) {
          const int k = (kStageRounds - 1 - r) / 2;
          const uint32_t bound = (EntryFreq<true>(en[r]) * EntryFreq<true>(en[r - 1]) << 16) - 1u;
          const bool need = x > bound;
          asm("and.b32 %0, %1, 0xffff;" : "=r"(w[k]) : "r"(x));
          nb |= need ? 1u << k : 0u;
          x = need ? x >> 16 : x;
          EncodeStep<false, true>(true, en[r], 0, lt, words_end, x, emitted);
          EncodeStep<false, true>(true, en[r - 1], 0, lt, words_end, x, emitted);
        }
        unsigned m[kStageRounds / 2];
#pragma unroll
        for (int k = 0; k < static_cast<int>(kStageRounds / 2); ++k) m[k] = __ballot_sync(0xffffffffu, (nb >> k) & 1);
        const int32_t spare = static_cast<int32_t>(64 + lane) - static_cast<int32_t>(kScratch / 2);
#pragma unroll
        for (int k = 0; k < static_cast<int>(kStageRounds / 2); ++k) {
          emitted += __popc(m[k]);
          const int32_t at = static_cast<int32_t>(__popc(m[k] & lt)) - static_cast<int32_t>(emitted);
          words_end[(nb >> k) & 1 ? at : spare] = static_cast<uint16_t>(w[k]);
        }
      } else {
#pragma unroll
        for (int r = kStageRounds - 1; r >= 0; r -= 2) {
          const uint4 odd = tables[st[r * 32 + lane]], even = tables[st[(r - 1) * 32 + lane]];
          EncodeStep<true, true>(true, odd, EntryFreq<true>(even), lt, words_end, x, emitted);
          EncodeStep<false, true>(true, even, 0, lt, words_end, x, emitted);
        }
      }
    } else {
      for (uint32_t r = r1; r-- > r0;) {
        const uint4 en = tables[st[(r - r0) * 32 + lane]];
        unseen |= en.z;
        const uint32_t f_even = r % 2 == 1 ? EntryFreq<true>(tables[st[(r - 1 - r0) * 32 + lane]]) : 0;
        EncodeStepAt<true>(r, true, en, f_even, lt, words_end, x, emitted);
      }
    }
  }
}

// Two instances: kFused codes the fused chunks (ChunkPlan::fused) of a call
// and nothing else, the other all other chunks. Each has the registers its
// own loop needs; launched only where a call may hold fused chunks (see
// EncodeAsync), the fused one runs after the other.
// kSmall: a call of few tiles (fewer warps a block than kTilesPerBlock,
// WarpsPerTileBlock), where each scheduler has at most one warp, so that the
// kernel takes as long as one warp's rounds. Its order-0 loop loads a
// segment's 16 table entries before the segment's rounds, into registers
// such calls can spare (up to 126 against 64; they do not use the occupancy).
// Measured on an H100: one 1 MiB bf16 encode 41.6-42.3 -> 39.5-39.7 us,
// one 4 MiB 43.5-44.7 -> 41.7-43.8 us. Its blocks also plan self-planned
// calls (SelfPlan). A small call's Place is not let start early: with
// Place's blocks beside these, one 4 MiB encode took 0.4 us longer.
// The small instance comes in one build for each kind of call it serves,
// each holding only the code that kind runs: kSelfPlan for self-planned
// calls (Workspace::self_plan: order-0, nothing sampled, helper warps), and
// kOnly, 0 or the dtype of every chunk of the call (EncodeAsync's promise).
// A small call's Tiles warp runs its path once, so its time depends on how
// much code it fetches. One 4 MiB bf16 encode on an H200 took 19.1 us with
// bf16's rounds alone against 19.7-20.0 with every dtype's (run 202), then
// 18.2-18.4 against 18.9-19.3 once self-planned calls had builds of their
// own (6360 instructions against 8144; run 204; docs/performance.md).
template <bool kFused, bool kSmall = false, uint32_t kOnly = 0, bool kSelfPlan = false>
__global__ void __launch_bounds__(kTilesPerBlock * 32, kSmall ? 1 : 4)
    TilesKernel(const EncodeChunk* chunks, const int32_t* status, Workspace ws) {
  static_assert(kSmall || (kOnly == 0 && !kSelfPlan), "only the small instance comes in builds for kinds of call");
  const int c = blockIdx.y;
  // The coding warps (WarpsPerTileBlock, at most kTilesPerBlock), a tile
  // each; in a self-planned call the small instance's blocks have as many
  // warps again after them, the helpers (TilePlaneBlock), which take no
  // part in the block's barriers (CodersSync).
  constexpr bool helped = kSelfPlan;
  const uint32_t warp = threadIdx.x / 32, warps = blockDim.x / 32 / (helped ? 2 : 1);
  const uint32_t coder_threads = 32 * warps;
  const uint32_t tile = blockIdx.x * warps + (warp < warps ? warp : warp - warps);
  uint4* const tables = tiles_tables;
  // ExactEntry's reciprocals, staged while the kernel before finishes
  // (Create wrote them), past an order-0 table and SelfPlan's words; a
  // groups chunk's tables overwrite them, unread (after the barrier
  // before they are put).
  constexpr uint32_t kMagicAt = 384;
  static_assert(kMagicAt >= 256 + (257 + 3) / 4 && kMagicAt + (kM + 2) / 2 <= kMaxTables * 256 / 2,
                "the reciprocals fit the tables' space past table 0 and SelfPlan's words");
  uint2* const magic = reinterpret_cast<uint2*>(tables + kMagicAt);
  // The small instance loads all of a coding thread's entries (at most
  // kMost: WarpsPerTileBlock gives at least 64 coding threads) before the
  // wait and stores them once the status and plan loads are issued: one
  // round trip, not one an entry. The other instance stores each entry as
  // it comes: holding them through the wait cost 256 MiB calls 1%
  // (docs/performance.md).
  constexpr uint32_t kMost = kSmall ? (kM + 1 + 63) / 64 : 1;
  uint2 mv[kMost];
  if (threadIdx.x < coder_threads) {
    if constexpr (kSmall) {
#pragma unroll
      for (uint32_t u = 0; u < kMost; ++u) {
        const uint32_t k = threadIdx.x + u * coder_threads;
        if (k <= kM) mv[u] = ws.magic[k];
      }
    } else {
      for (uint32_t k = threadIdx.x; k <= kM; k += coder_threads) magic[k] = ws.magic[k];
    }
  }
  WaitForPrevious();
  const int32_t st = status[c];
  ChunkPlan p = ws.plan[c];
  if (kSmall && threadIdx.x < coder_threads) {
#pragma unroll
    for (uint32_t u = 0; u < kMost; ++u) {
      const uint32_t k = threadIdx.x + u * coder_threads;
      if (k <= kM) magic[k] = mv[u];
    }
  }
  if (helped && warp >= warps) {
    // A helper: the raw plane and checksum blocks of the block's tiles, in
    // turn with the other helpers. (Leaving the helper that shares warp 0's
    // scheduler out, as warp 0 plans, made no measurable difference.)
    const uint32_t helpers = warps, h = warp - warps;
    if (st == kOk && p.plane_in_tiles) {
      const uint64_t t0 = uint64_t{blockIdx.x} * warps, t1 = min(t0 + warps, uint64_t{p.tiles});
      const uint64_t b0 = (t0 << p.tile_log2) * 2 / checksum::kBlockBytes;
      const uint64_t b1 = min(t1 << p.tile_log2, p.n) * 2 / checksum::kBlockBytes;
      for (uint64_t b = b0 + h; b < b1; b += helpers) TilePlaneBlock(p, c, b, ws);
    }
    return;
  }
  // Lane l starts from 2^16 | u16 l of the tile's carry (docs/codec-format.md):
  // of a fused or plane_in_tiles chunk from its input (bf16, elements 2l and
  // 2l + 1 of the tile's last kCarryBytes), else as Split left it. Loaded
  // again for a RAW tile rather than held through the rounds (registers).
  auto carry_of = [&](uint64_t begin, uint32_t n, uint32_t lane) -> uint32_t {
    if (tile >= p.carry_tiles) return 0;
    if (kFused || (kSelfPlan && p.plane_in_tiles)) return InputCarry(p, begin, n, lane);
    return reinterpret_cast<const uint16_t*>(ws.carry + (static_cast<uint64_t>(c) * ws.max_tiles + tile) *
                                                            plan::kCarryBytes)[lane];
  };
  const uint32_t* planned = nullptr;  // self-planned: table 0's entries (SelfPlan's words)
  // Self-planned: the lane's carry and its 16 elements of the tile's last
  // segment (pre, where they are whole), loaded while warp 0 plans.
  uint32_t carry0 = 0;
  uint4 pre[4];
  bool have_pre = false;
  if constexpr (kSelfPlan) {
    const bool coded = st == kOk && !p.stored;  // uniform for the block
    if (coded && tile < p.tiles && !p.fused) {
      const uint32_t lane = threadIdx.x % 32;
      const uint64_t begin = static_cast<uint64_t>(tile) << p.tile_log2;
      const uint32_t n = static_cast<uint32_t>(min(uint64_t{1} << p.tile_log2, p.n - begin));
      const uint32_t segs = (n / 32 + kStageRounds - 1) / kStageRounds;
      carry0 = carry_of(begin, n, lane);
      const uint64_t e = begin + 512ull * (segs - 1) + 16 * lane;
      if (segs > 0 && e + 16 <= p.n) {
        const uint4* src = reinterpret_cast<const uint4*>(p.in.At(e * p.e.bytes));
#pragma unroll
        for (uint32_t k = 0; k < 4; ++k) {
          if (k < p.e.bytes) pre[k] = src[k];
        }
        have_pre = true;
      }
    }
    // In the tables' space past table 0's entries (formed after these are read).
    uint32_t* const words = reinterpret_cast<uint32_t*>(tables + 256);
    SelfPlan<kOnly>(chunks[c], c, coded, p, ws, words, coder_threads);
    planned = words;
  }
  // A fused chunk is never STORED before Tiles: its raw plane (n bytes) and
  // directory leave room (Plan).
  if (st != kOk || p.stored || p.fused != kFused || blockIdx.x * warps >= p.tiles) return;
  uint2* enc = reinterpret_cast<uint2*>(tables);
  uint8_t* const map = tiles_map;
  uint4(*const stage)[2][32] = tiles_stage;
  // A fused chunk's kvsum64 keys, in the map's space (fused chunks have no map).
  static_assert(checksum::kWordsPerBlock * 8 <= kMaxGroupedChannels, "the keys fit the map's space");
  uint64_t* const key = reinterpret_cast<uint64_t*>(map);
  const bool groups = !kSelfPlan && p.tables > 1;
  const bool sampled = !kSelfPlan && p.sampled;
  if (kFused) {
    for (uint32_t k = threadIdx.x; k < checksum::kWordsPerBlock; k += coder_threads) key[k] = checksum::Key(k);
  }
  // Each entry's step form is made here, an entry a thread (order-0: its
  // reciprocal from the staged table; groups: a division), rather than by
  // the single Plan block, where 8 divisions a lane sat on its path.
  auto put = [&](uint32_t i, uint32_t e) {
    if (groups) {
      const uint32_t f = e & 0xffff;
      enc[i] = make_uint2(e, f == 0 ? 0u : 0xffffffffu / f);
    } else {
      tables[i] = ExactEntry(e, magic);
    }
  };
  // The reciprocals staged by every thread (SelfPlan's barrier did this
  // for self-planned calls).
  if (planned == nullptr) CodersSync(coder_threads);
  // Self-planned: table 0's entries straight from SelfPlan's words, which
  // lie past them in the tables' space.
  const uint32_t loaded = kSmall && planned != nullptr ? 256 : 0;
  for (uint32_t i = threadIdx.x; i < loaded; i += coder_threads) put(i, planned[i]);
  BlockCopy4(
      p.tables * 256 - loaded, [&](uint32_t i) { return ws.enc[c * 4096ull + loaded + i]; },
      [&](uint32_t i, uint32_t e) { put(loaded + i, e); }, coder_threads);
  const uint32_t C = static_cast<uint32_t>(p.channels);
  if (groups) {
    for (uint32_t k = threadIdx.x; k < C; k += coder_threads) map[k] = ws.map[c * 1ull * kMaxGroupedChannels + k];
  }
  CodersSync(coder_threads);
  if (tile >= p.tiles) return;
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t begin = static_cast<uint64_t>(tile) << p.tile_log2;
  const uint32_t n = static_cast<uint32_t>(min(uint64_t{1} << p.tile_log2, p.n - begin));
  uint8_t* scratch = ws.scratch + (static_cast<uint64_t>(c) * ws.max_tiles + tile) * kScratch;
  uint16_t* words_end = reinterpret_cast<uint16_t*>(scratch + kScratch);
  const uint32_t rounds = (n + 31) / 32, full = n / 32;
  const uint32_t lt = (1u << lane) - 1;
  uint32_t x = kL | (kSelfPlan ? carry0 : carry_of(begin, n, lane)), emitted = 0;
  uint32_t unseen = 0;  // OR of M - f: bit kProbBits set where a sampled table lacks a symbol (f = 0)
  // Channel of this lane's element in round r: (begin + 32 r + lane) mod C,
  // stepped back by 32 mod C per round.
  uint32_t chn = groups ? static_cast<uint32_t>((begin + 32ull * (rounds - 1) + lane) % C) : 0;
  const uint32_t back = groups ? 32 % C : 0;
  auto before = [&](uint32_t ch) { return ChannelBefore(ch, back, C); };
  auto step_back = [&] {
    if (groups) chn = before(chn);
  };
  if (full < rounds) {  // the partial last round first
    const uint32_t j = 32 * full + lane;
    const uint32_t s = j < n ? SymbolAt(p, begin + j) : 0;
    const uint4 en = groups ? StepEntry(enc[map[chn] * 256u + s]) : tables[s];
    if (j < n) unseen |= en.z;
    uint32_t f_even = 0;  // an odd round's partner: the lane's symbol a round before (full >= 1)
    if (full % 2 == 1) {
      const uint32_t s0 = SymbolAt(p, begin + j - 32);
      f_even = groups ? enc[map[before(chn)] * 256u + s0].x & 0xffff : EntryFreq<true>(tables[s0]);
    }
    if (groups) {
      EncodeStepAt<false>(full, j < n, en, f_even, lt, words_end, x, emitted);
    } else {
      EncodeStepAt<true>(full, j < n, en, f_even, lt, words_end, x, emitted);
    }
    step_back();
  }
  // Full rounds (CodeSegments; fused chunks CodeFusedTile).
  const uint32_t segs = (full + kStageRounds - 1) / kStageRounds;
  if constexpr (kFused) {  // whole segments (MakePlan), at least one
    // The input stages and checksum sums in the order-0 table's unused
    // space (it holds 16 tables).
    auto in = reinterpret_cast<uint4(*)[2][64]>(tables + 256);
    auto sums = reinterpret_cast<ulonglong2(*)[32]>(tables + 256 + kTilesPerBlock * 2 * 64);
    constexpr uint32_t kTileBlocks = 2 * kMaxTile / checksum::kBlockBytes;  // checksum blocks in a bf16 tile
    auto sd = reinterpret_cast<uint64_t(*)[kTileBlocks][checksum::kLanes]>(tables + 256 + kTilesPerBlock * (2 * 64 + 32));
    static_assert(256 + kTilesPerBlock * (2 * 64 + 32 + kTileBlocks * checksum::kLanes / 2) <= kMaxTables * 256 / 2,
                  "the stages fit the tables' space");
    // The input is read once and the raw plane written once. Where the
    // call's coded tiles surely fit L2 (a fused chunk's are under a byte an
    // element), both go first when L2 evicts, so that the coded tiles are
    // still there when Place copies them, and the raw plane is written back
    // while Tiles runs rather than during Place. Measured on an H100: see
    // docs/performance.md (a 64 MiB call 1.05x; at 256 MiB, 0.94x, so larger
    // calls keep the normal policy).
    const uint64_t pol = p.n * gridDim.y <= ws.l2_bytes ? L2EvictFirst() : L2EvictNormal();
    if (p.in.blocks == nullptr) {
      unseen = CodeFusedTile<true>(p, begin, tile, segs, tables, stage[warp], in[warp], sums[warp], sd[warp], key,
                                   SumSlot(ws.sum, c, tile), pol, lt, words_end, x, emitted);
    } else {
      unseen = CodeFusedTile<false>(p, begin, tile, segs, tables, stage[warp], in[warp], sums[warp], sd[warp], key,
                                    SumSlot(ws.sum, c, tile), pol, lt, words_end, x, emitted);
    }
  } else {
    SegmentsIn a{begin, full, segs, lane, lt, C, back, groups, sampled, have_pre, {}, words_end};
    if constexpr (kSelfPlan) {
#pragma unroll
      for (uint32_t k = 0; k < 4; ++k) a.pre[k] = pre[k];
    }
    SegmentsState state{x, emitted, unseen, chn};
    if constexpr (kOnly != 0) {
      CodeSegments<ElemOf<kOnly>, kSmall>(p, a, state);
    } else {
      WithElem(p.dtype, [&](auto el) { CodeSegments<decltype(el), kSmall>(p, a, state); });
    }
    x = state.x;
    emitted = state.emitted;
    unseen = state.unseen;
  }
  const uint32_t coded = (128 + 2 * emitted + 3) & ~3u;
  const uint32_t packed = ((n + 7) / 8 * p.e.exp_bits + 3) & ~3u;
  const bool carries = tile < p.carry_tiles;
  const uint32_t raw = packed + (carries ? plan::kCarryBytes : 0);  // a RAW tile appends its carry
  // RAW when not smaller, or when a sampled table lacks one of the tile's
  // symbols (as the CPU; only order-0 tables are sampled).
  if (coded >= raw || (sampled && __any_sync(0xffffffffu, (unseen & kM) != 0))) {
    __syncwarp();
    const uint32_t groups = (n + 7) / 8;
    PackRawTile(&ws.plan[c], begin, groups, scratch);
    for (uint32_t b = groups * p.e.exp_bits + lane; b < packed; b += 32) scratch[b] = 0;
    if (carries) reinterpret_cast<uint16_t*>(scratch + packed)[lane] = static_cast<uint16_t>(carry_of(begin, n, lane));
    if (lane == 0) {
      ws.entry[static_cast<uint64_t>(c) * ws.max_tiles + tile] = raw | kTileRaw;
      AddTileSize(ws, c, tile, raw);
    }
    return;
  }
  reinterpret_cast<uint32_t*>(scratch)[lane] = x;
  if (lane == 0) {
    ws.entry[static_cast<uint64_t>(c) * ws.max_tiles + tile] = coded;
    ws.nwords[static_cast<uint64_t>(c) * ws.max_tiles + tile] = emitted;
    AddTileSize(ws, c, tile, coded);
  }
}

// ---- finish -----------------------------------------------------------------------

// Tiles into place, a CUDA block per tile (blockIdx.x). Each block finds
// its tile's offset itself from the sums the Tiles kernel left (per 64 tiles,
// then single tiles: at most a few hundred loads, no separate scan kernel),
// and decides STORED from their total; a STORED chunk's blocks copy the input
// instead, 16 KiB each. Block 0 writes the header and the chunk's size.
// A block's loads that depend on nothing else loaded are all issued first:
// the kernel is a few round trips to memory per block, not a copy. 128
// threads a block: a 4096-symbol bf16 tile (about 1.5 KiB coded) in one step
// of 4 words a thread, an 8192-symbol one (about 3 KiB) in two; against 256
// threads, half the warps repeat the block's bookkeeping (on an H100, Place
// 20.0 -> 18.9 us at 64 MiB and 56.8 -> 52.3 us at 256 MiB). 16 blocks an SM
// keep it at 32 registers (left to itself, ptxas takes 40: 12 blocks).
//
// kAhead, for self-planned calls (one wave of small tiles, so latency-bound
// rather than bandwidth-bound): the request's fields are read before the
// wait (the caller wrote them before the call; no kernel of it writes them),
// and each tile's words are read ahead (below), so that a block is one round
// trip to memory after its wait. The other instance reads them where they
// are used, as before: a 64 MiB call was 1% slower with them early.
constexpr uint32_t kPlaceThreads = 128;
constexpr uint32_t kPlaceAhead = 16 * kPlaceThreads;  // bytes of a tile's scratch kAhead reads ahead
static_assert(kPlaceAhead % 4 == 0 && kPlaceAhead <= kScratch - 128, "the read-ahead is whole words past the states");
// Output word b >= 32 of a coded tile: its nw 16-bit words, which end at
// byte `end` of an area that load4 reads 4 bytes of at a 2-aligned offset,
// from o = end - 2 nw + 4 (b - 32). One load when nw is even, else the
// halves of two; past the words' end is the padding, zero.
template <typename Load4>
__device__ __forceinline__ uint32_t CodedTileWord(Load4 load4, uint32_t end, uint32_t nw, uint32_t b) {
  const uint32_t o = end - 2 * nw + 4 * (b - 32);
  if (nw % 2 == 0) return load4(o);
  return __funnelshift_r(load4(o - 2), o + 2 < end ? load4(o + 2) : 0u, 16);
}
template <bool kAhead>
__global__ void __launch_bounds__(kPlaceThreads, 16)
    PlaceKernel(const EncodeChunk* chunks, int32_t* status, uint64_t* sizes, Workspace ws) {
  const int c = blockIdx.y;
  const EncodeChunk& ch = chunks[c];
  uint8_t* out = nullptr;
  uint64_t capacity = 0;
  bool allow_stored = false;
  auto read_request = [&] {
    out = ch.out;
    capacity = ch.out_capacity;
    allow_stored = ch.allow_stored;
  };
  if constexpr (kAhead) read_request();
  WaitForPrevious();
  const uint32_t t = blockIdx.x;  // < ws.max_tiles
  const ChunkPlan& p = ws.plan[c];
  const uint64_t at = static_cast<uint64_t>(c) * ws.max_tiles;
  const uint32_t* entry = ws.entry + at;
  const unsigned long long* tsum = ws.tsum + c * 1ull * TsumSlots(ws.max_tiles);
  // One round trip: the chunk's state, the tile's entry and word count, and
  // this thread's part of the sizes before tile t (whole groups of 64 tiles,
  // then single tiles; entries of tiles past the chunk's are never summed).
  const int32_t st = status[c];
  const bool p_stored = p.stored;
  const uint64_t bytes = p.bytes, tiles_off = p.tiles_off, raw_plane = p.raw_plane;
  uint64_t dir_off = 0;
  if constexpr (kAhead) dir_off = p.dir_off;  // else with the request's fields
  const uint32_t tiles = p.tiles;
  const unsigned long long total = tsum[0];
  const uint32_t e = entry[t], nw = ws.nwords[at + t];
  // kAhead: each thread also loads its 16 bytes of the last kPlaceAhead
  // bytes of the tile's scratch, and warp 0 the final states, before it
  // knows where the words begin. A coded tile's words end there, so most
  // tiles need no second round trip. (In wider calls, loading ahead moved
  // more bytes than it saved waiting: docs/performance.md.)
  const uint8_t* scratch = ws.scratch + (at + t) * kScratch;
  uint4 tail = make_uint4(0, 0, 0, 0);
  uint32_t state = 0;
  if constexpr (kAhead) {
    tail = __ldg(reinterpret_cast<const uint4*>(scratch + kScratch - kPlaceAhead) + threadIdx.x);
    if (threadIdx.x < 32) state = __ldg(reinterpret_cast<const uint32_t*>(scratch) + threadIdx.x);
  }
  // Block 0, warp 0: the chunk's checksum slots, a slot a lane, read in this
  // round trip and zeroed for the next call whatever becomes of the chunk;
  // added up before the header is written.
  unsigned long long slot = 0;
  if (blockIdx.x == 0 && threadIdx.x < kSumSlots) {
    slot = *SumSlot(ws.sum, c, threadIdx.x);
    *SumSlot(ws.sum, c, threadIdx.x) = 0;
  }
  uint64_t low = 0;
  {
    const uint32_t g0 = t / kTsumGroup;
    for (uint32_t g = threadIdx.x; g < g0; g += blockDim.x) low += tsum[1 + g];
    for (uint32_t k = g0 * kTsumGroup + threadIdx.x; k < t; k += blockDim.x) low += entry[k] & ~kTileRaw;
  }
  // Block 0, warp 0 of a self-planned call: the histogram the Tiles blocks
  // read, zeroed for the next call's Split whatever becomes of the chunk
  // (here and at the end: where Place has the registers).
  auto clear_histogram = [&] {
    if (ws.self_plan) {
      for (uint32_t k = threadIdx.x; k < 256; k += 32) ws.hist[c * 256ull + k] = 0;
    }
  };
  if (st != kOk) {  // uniform for the block, as every return before the barrier
    if (blockIdx.x == 0 && threadIdx.x < 32) clear_histogram();
    return;
  }
  if constexpr (!kAhead) {
    read_request();
    dir_off = p.dir_off;
  }
  uint64_t payload = bytes, before = 0;
  bool stored = p_stored;
  if (!stored) {
    payload = tiles_off - kHeader + total;
    if (payload >= bytes && (allow_stored || raw_plane == 0)) stored = true, payload = bytes;
  }
  if (!stored && t >= tiles && t != 0) return;
  if (!stored) {
    __shared__ uint64_t part[8];
    low = WarpSum(low);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = low;
    __syncthreads();
    for (uint32_t w = 0; w < blockDim.x / 32; ++w) before += part[w];
  }
  const bool too_big = !stored && kHeader + payload > capacity;  // only without STORED (Split checks the rest)
  if (stored) {
    const uint64_t b0 = static_cast<uint64_t>(t) * kMaxTile, b1 = min(bytes, b0 + kMaxTile);
    // 16-byte pieces never straddle blocks; the destination may be unaligned.
    for (uint64_t b = b0 + 16ull * threadIdx.x; b < b1; b += 16ull * blockDim.x) {
      const uint32_t len = static_cast<uint32_t>(min(static_cast<uint64_t>(16), b1 - b));
      const uint8_t* src = p.in.At(b);
      if (len == 16 && reinterpret_cast<uintptr_t>(out + kHeader + b) % 16 == 0) {
        *reinterpret_cast<uint4*>(out + kHeader + b) = *reinterpret_cast<const uint4*>(src);
      } else {
        for (uint32_t k = 0; k < len; ++k) out[kHeader + b + k] = src[k];
      }
    }
  } else if (!too_big && t < tiles) {
    const uint32_t size = e & ~kTileRaw;
    if (threadIdx.x == 0) St32(out + dir_off + 4ull * t, e);
    uint8_t* dst = out + tiles_off + before;
    const bool dst4 = reinterpret_cast<uintptr_t>(dst) % 4 == 0;
    auto put = [&](uint32_t b, uint32_t v) {
      if (dst4) {
        reinterpret_cast<uint32_t*>(dst)[b] = v;
      } else {
        St32(dst + 4 * b, v);
      }
    };
    // Output word b of the tile: RAW tiles as they are; coded ones are the
    // final states, then the words (which end at the end of the scratch
    // area), then zero padding to a multiple of 4 (CodedTileWord).
    const bool raw = e & kTileRaw;
    if (kAhead && !raw && 2 * nw <= kPlaceAhead) {  // uniform for the block
      // The words from what was read ahead, through shared memory (a word
      // of the tile's output straddles two threads' pieces). Word b < 32 is
      // the state thread b holds.
      __shared__ alignas(16) uint8_t window[kPlaceAhead];
      reinterpret_cast<uint4*>(window)[threadIdx.x] = tail;
      __syncthreads();
      auto at4 = [&](uint32_t o) { return *reinterpret_cast<const uint32_t*>(window + o); };
      for (uint32_t b = threadIdx.x; b < size / 4; b += blockDim.x) {
        put(b, b < 32 ? state : CodedTileWord(at4, kPlaceAhead, nw, b));
      }
    } else {
      auto at4 = [&](uint32_t o) { return __ldg(reinterpret_cast<const uint32_t*>(scratch + o)); };
      auto word = [&](uint32_t b) { return raw || b < 32 ? at4(4 * b) : CodedTileWord(at4, kScratch, nw, b); };
      // Four words a thread per step, loads first: the stores must not wait
      // on each load in turn.
      constexpr uint32_t kBatch = 4;
      for (uint32_t b0 = threadIdx.x; b0 < size / 4; b0 += blockDim.x * kBatch) {
        uint32_t v[kBatch];
#pragma unroll
        for (uint32_t u = 0; u < kBatch; ++u) v[u] = b0 + blockDim.x * u < size / 4 ? word(b0 + blockDim.x * u) : 0;
#pragma unroll
        for (uint32_t u = 0; u < kBatch; ++u) {
          const uint32_t b = b0 + blockDim.x * u;
          if (b >= size / 4) break;
          put(b, v[u]);
        }
      }
    }
  }
  // Block 0: the checksum (warp 0), then the header (thread 0), its fields
  // read before any of it is stored (a store through `out` could alias them,
  // so each read after one would wait for the one before).
  if (blockIdx.x != 0 || threadIdx.x >= 32) return;
  clear_histogram();
  const unsigned long long sum = WarpSum(slot);
  if (threadIdx.x != 0) return;
  // A planned chunk STORED or failed here leaves no table for a later call
  // to reuse.
  if ((too_big || stored) && !ws.reusing) ws.table_ok[c] = 0;
  if (too_big) {
    status[c] = kOutputTooSmall;
    return;
  }
  const uint8_t dtype = ch.dtype;
  const uint32_t tokens = ch.tokens, heads = ch.heads, head_dim = ch.head_dim;
  const uint64_t n = p.n, check = kvferry::checksum::Finish(sum, p.bytes);
  const uint32_t tables = p.tables, tile_log2 = p.tile_log2;
  for (uint32_t k = 0; k < kHeader; ++k) out[k] = 0;
  out[0] = 'K', out[1] = 'V', out[2] = 'Z', out[3] = '1', out[4] = plan::kFormatVersion, out[5] = dtype;
  St16(out + 6, stored ? kStored : (tables > 1 ? kGroups : 0));
  St64(out + 8, n);
  St32(out + 16, tokens);
  St32(out + 20, heads);
  St32(out + 24, head_dim);
  St16(out + 28, stored ? 0 : tables);
  out[30] = stored ? 0 : tile_log2;
  St32(out + 32, stored ? 0 : tiles);
  St64(out + 40, stored ? 0 : raw_plane);
  St64(out + 48, payload);
  St64(out + 56, check);
  sizes[c] = kHeader + payload;
}

// The workspace's regions, each 64-byte aligned, carved from `workspace`;
// *bytes, where given, gets the size they take in all. With a null
// workspace only that size is computed (Create's allocation).
Workspace Carve(void* workspace, int max_chunks, uint32_t max_tiles, uint64_t max_chunk_bytes,
                uint64_t* bytes = nullptr) {
  const uint64_t n = static_cast<uint64_t>(max_chunks);
  Carver<64> carve(workspace);
  Workspace ws{};
  ws.log2q16 = carve.Take<uint32_t>((kM + 1) * 4);                     // filled by Create
  ws.keys = carve.Take<const uint64_t>(checksum::kWordsPerBlock * 8);  // filled by Create
  ws.magic = carve.Take<const uint2>((kM + 1) * 8);                    // filled by Create
  ws.plan = carve.Take<ChunkPlan>(n * sizeof(ChunkPlan));
  ws.hist = carve.Take<unsigned long long>(n * 256 * 8);
  ws.chsum = carve.Take<unsigned long long>(n * kMaxGroupedChannels * 8);
  ws.hist16 = carve.Take<unsigned long long>(n * 4096 * 8);
  ws.sum = carve.Take<unsigned long long>(n * kSumBytesPerChunk);
  ws.group16 = carve.Take<uint8_t>(n * kMaxGroupedChannels);
  ws.map = carve.Take<uint8_t>(n * kMaxGroupedChannels);
  ws.enc = carve.Take<uint32_t>(n * 4096 * 4);
  ws.table_ok = carve.Take<uint32_t>(n * 4);
  ws.entry = carve.Take<uint32_t>(n * max_tiles * 4);
  ws.nwords = carve.Take<uint32_t>(n * max_tiles * 4);
  ws.tsum = carve.Take<unsigned long long>(n * TsumSlots(max_tiles) * 8ull);
  ws.scratch = carve.Take<uint8_t>(n * max_tiles * static_cast<uint64_t>(kScratch));
  ws.carry = carve.Take<uint8_t>(n * max_tiles * plan::kCarryBytes);
  ws.estimate = nullptr;
  ws.max_bytes = max_chunk_bytes;
  ws.l2_bytes = 0;
  ws.max_tiles = max_tiles;
  ws.groups = 0;
  ws.one_pass_only = 0;
  ws.dtype = 0;
  if (bytes != nullptr) *bytes = carve.used();
  return ws;
}

// The small Tiles builds: kSmallTiles<self-planned>[d] for a call whose
// chunks are all of dtype d (0: any).
using TilesFn = void (*)(const EncodeChunk*, const int32_t*, Workspace);
template <bool kSelfPlan>
const TilesFn kSmallTiles[kDtypes + 1] = {
    TilesKernel<false, true, 0, kSelfPlan>, TilesKernel<false, true, 1, kSelfPlan>,
    TilesKernel<false, true, 2, kSelfPlan>, TilesKernel<false, true, 3, kSelfPlan>,
    TilesKernel<false, true, 4, kSelfPlan>, TilesKernel<false, true, 5, kSelfPlan>,
    TilesKernel<false, true, 6, kSelfPlan>};

// A call cut short leaves the sums that Rank, Plan and Place would have
// zeroed: zero them, so that the next call starts clean.
cudaError_t Fail(const Workspace& ws, int max_chunks, cudaError_t r, cudaStream_t stream) {
  const uint64_t n = static_cast<uint64_t>(max_chunks);
  cudaMemsetAsync(ws.hist, 0, n * 256 * 8, stream);
  cudaMemsetAsync(ws.chsum, 0, n * kMaxGroupedChannels * 8, stream);
  cudaMemsetAsync(ws.sum, 0, n * kSumBytesPerChunk, stream);
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Encoder>> Encoder::Create(int max_chunks, uint64_t max_chunk_bytes) {
  if (max_chunks < 1 || max_chunk_bytes < 1) return absl::InvalidArgumentError("encoder must hold >= 1 chunk");
  auto e = std::unique_ptr<Encoder>(new Encoder());
  e->max_chunks_ = max_chunks;
  e->max_chunk_bytes_ = max_chunk_bytes;
  e->max_tiles_ = static_cast<uint32_t>(plan::MaxTiles(max_chunk_bytes));  // >= tiles of any dtype
  e->sms_ = CurrentDeviceSms();
  e->l2_bytes_ = CurrentDeviceL2Bytes();
  uint64_t bytes = 0;
  Carve(nullptr, max_chunks, e->max_tiles_, max_chunk_bytes, &bytes);
  if (cudaFuncSetAttribute(SplitKernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSplitShared)) != cudaSuccess ||
      cudaFuncSetAttribute(SplitKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSplitShared)) != cudaSuccess) {
    return absl::InternalError("cannot give the split kernel its shared memory");
  }
  if (cudaFuncSetAttribute(RankKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kMaxGroupedChannels * sizeof(uint64_t))) != cudaSuccess) {
    return absl::InternalError("cannot give the rank kernel its shared memory");
  }
  e->workspace_bytes_ = bytes;
  if (cudaMalloc(&e->workspace_, bytes) != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrFormat("cannot allocate %d bytes of encoder workspace", bytes));
  }
  // Zeros: the histogram, channel and checksum sums, which each call leaves
  // at zero.
  if (cudaMemset(e->workspace_, 0, bytes) != cudaSuccess) {
    return absl::InternalError("cannot clear the encoder workspace");
  }
  // The workspace's first three regions (Carve), written from the host in
  // one copy: the planner's log2 table, computed by the very function the
  // CPU planner calls, the checksum's position keys, and the rANS step's
  // reciprocals (ExactEntry).
  const Workspace ws = Carve(e->workspace_, max_chunks, e->max_tiles_, max_chunk_bytes);
  const auto at = [&e](const void* region) {
    return static_cast<uint64_t>(static_cast<const uint8_t*>(region) - static_cast<const uint8_t*>(e->workspace_));
  };
  std::vector<uint8_t> head(std::max({at(ws.log2q16) + (kM + 1) * 4, at(ws.keys) + checksum::kWordsPerBlock * 8,
                                      at(ws.magic) + (kM + 1) * 8}),
                            0);
  for (uint32_t f = 1; f <= kM; ++f) {
    const uint32_t v = plan::Log2Q16(f);
    std::memcpy(head.data() + at(ws.log2q16) + 4 * f, &v, 4);
    const uint64_t m = ((uint64_t{1} << 40) + f - 1) / f;
    const uint32_t lo_hi[2] = {static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32)};
    std::memcpy(head.data() + at(ws.magic) + 8 * f, lo_hi, 8);
  }
  for (uint32_t j = 0; j < checksum::kWordsPerBlock; ++j) {
    const uint64_t k = checksum::Key(j);
    std::memcpy(head.data() + at(ws.keys) + 8 * j, &k, 8);
  }
  // From pageable memory cudaMemcpy may return before the data has landed, and
  // callers' streams need not wait for the legacy stream: wait for it here.
  if (cudaMemcpy(e->workspace_, head.data(), head.size(), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaStreamSynchronize(0) != cudaSuccess) {
    return absl::InternalError("cannot initialise the encoder workspace");
  }
  e->graphs_ = std::make_unique<CallGraphs>();
  return e;
}

Encoder::~Encoder() {
  if (workspace_ != nullptr) cudaFree(workspace_);
}

size_t Encoder::graphs() const { return graphs_->size(); }

cudaError_t Encoder::EncodeAsync(const EncodeChunk* chunks, int count, uint64_t* sizes, int32_t* status,
                                 cudaStream_t stream, const SplitPoint* split, bool channel_groups, bool one_pass_only,
                                 uint8_t dtype) {
  if (count < 1 || count > max_chunks_ || dtype > kDtypes) return cudaErrorInvalidValue;
  // Fused chunks are bf16 chunks of >= plan::kSampleMinElements elements.
  const bool fusable = max_chunk_bytes_ >= 2 * plan::kSampleMinElements;
  if (one_pass_only && (split != nullptr || channel_groups || !fusable)) return cudaErrorInvalidValue;
  Workspace ws = Carve(workspace_, max_chunks_, max_tiles_, max_chunk_bytes_);
  ws.estimate = split != nullptr ? split->estimates : nullptr;
  ws.groups = channel_groups ? 1 : 0;
  ws.one_pass_only = one_pass_only ? 1 : 0;
  ws.dtype = dtype;
  ws.l2_bytes = l2_bytes_;
  const uint64_t split_2 =
      (max_chunk_bytes_ + 2 * kSplitWarps * checksum::kBlockBytes - 1) / (2 * kSplitWarps * checksum::kBlockBytes);
  const uint64_t checksum_blocks = (max_chunk_bytes_ + checksum::kBlockBytes - 1) / checksum::kBlockBytes;
  // Four warps a checksum block while that keeps the call in one wave of 32
  // warps an SM.
  // One-pass chunks only: Split counts their samples only, a sampled block
  // a warp, and a block of the grid per kSplitWarps of them (no blocks past
  // the samples to launch and retire: about 1/16 of the grid).
  const uint32_t split_subs_log2 =
      !one_pass_only && static_cast<uint64_t>(count) * checksum_blocks * kSplitMaxSubs <= 32ull * sms_
          ? kSplitMaxSubsLog2
          : 0;
  const uint32_t split_per_warp =
      !one_pass_only && split_subs_log2 == 0 && static_cast<uint64_t>(count) * split_2 >= 2ull * sms_ ? 2 : 1;
  const uint64_t split_span = (kSplitWarps >> split_subs_log2) * split_per_warp * checksum::kBlockBytes;
  const uint64_t split_covers = one_pass_only ? split_span * plan::kSampleStride : split_span;
  const unsigned split_blocks = static_cast<unsigned>((max_chunk_bytes_ + split_covers - 1) / split_covers);
  const unsigned hist16_blocks = static_cast<unsigned>((max_chunk_bytes_ + kSplitElems - 1) / kSplitElems);
  const uint32_t tile_warps = WarpsPerTileBlock(max_tiles_, count, sms_);
  const dim3 tile_grid((max_tiles_ + tile_warps - 1) / tile_warps, count);
  const bool small = tile_warps < kTilesPerBlock;
  // Small order-0 calls plan in Tiles (SelfPlan): no chunk is sampled (the
  // encoder takes none so large), and no split point waits for the plan.
  ws.self_plan = small && !channel_groups && split == nullptr && !fusable ? 1 : 0;
  const cudaEvent_t planned = split != nullptr ? split->planned : nullptr;
  auto launches = [&](cudaStream_t s, bool capturing) {
    cudaError_t e = cudaSuccess;
    auto launch = [&e](cudaError_t r) {
      if (e == cudaSuccess) e = r;
    };
    auto fail = [&](cudaError_t r) { return Fail(ws, max_chunks_, r, s); };
    launch(Launch(fusable ? SplitKernel<true> : SplitKernel<false>, dim3(split_blocks, count), kSplitWarps * 32,
                  kSplitShared, s, chunks, status, sizes, ws, split_per_warp, split_subs_log2));
    if (channel_groups) {
      launch(Launch(RankKernel, count, 1024, kMaxGroupedChannels * sizeof(uint64_t), s, status, ws));
      launch(Launch(Hist16Kernel, dim3(hist16_blocks, count), 256, 0, s, status, ws));
    }
    if (!ws.self_plan) launch(Launch(PlanKernel, count, 256, 0, s, chunks, status, ws));
    if (e != cudaSuccess) return fail(e);
    if (planned != nullptr) {
      // Into a graph (CallGraphs, or a caller's capture) as an event record
      // node of its own (cudaEventRecordExternal, which only a capture takes).
      const cudaError_t r =
          capturing ? cudaEventRecordWithFlags(planned, s, cudaEventRecordExternal) : cudaEventRecord(planned, s);
      if (r != cudaSuccess) return fail(r);
    }
    if (!one_pass_only) {
      // A self-planned call's blocks: a helper warp for each coding warp.
      launch(Launch(!small         ? TilesKernel<false>
                    : ws.self_plan ? kSmallTiles<true>[dtype]
                                   : kSmallTiles<false>[dtype],
                    tile_grid, tile_warps * 32 * (ws.self_plan ? 2 : 1), 0, s, chunks, status, ws));
    }
    if (fusable) {
      launch(Launch(TilesKernel<true>, tile_grid, tile_warps * 32, 0, s, chunks, status, ws));
    }
    launch(Launch(ws.self_plan ? PlaceKernel<true> : PlaceKernel<false>, dim3(max_tiles_, count), kPlaceThreads, 0, s,
                  chunks, status, sizes, ws));
    if (e != cudaSuccess) return fail(e);
    return cudaGetLastError();
  };
  // (ws.estimate and `planned` are all a split point changes.)
  const uint64_t flags =
      (channel_groups ? 1u : 0u) | (one_pass_only ? 2u : 0u) | (planned != nullptr ? 4u : 0u) | uint64_t{dtype} << 3;
  const CallGraphs::Key key = {2 | flags << 8,
                               reinterpret_cast<uintptr_t>(chunks),
                               static_cast<uint64_t>(count),
                               reinterpret_cast<uintptr_t>(sizes),
                               reinterpret_cast<uintptr_t>(status),
                               reinterpret_cast<uintptr_t>(ws.estimate)};
  return graphs_->Run(key, stream, planned, launches);
}

cudaError_t Encoder::EncodeReusingTablesAsync(const EncodeChunk* chunks, int count, uint64_t* sizes, int32_t* status,
                                              cudaStream_t stream) {
  if (count < 1 || count > max_chunks_) return cudaErrorInvalidValue;
  Workspace ws = Carve(workspace_, max_chunks_, max_tiles_, max_chunk_bytes_);
  ws.groups = 1;  // a chunk asking for channel groups is coded order-0 here, as the CPU does with a table
  ws.reusing = 1;
  const uint32_t tile_warps = WarpsPerTileBlock(max_tiles_, count, sms_);
  const dim3 tile_grid((max_tiles_ + tile_warps - 1) / tile_warps, count);
  auto launches = [&](cudaStream_t s, bool) {
    cudaError_t e = cudaSuccess;
    auto launch = [&e](cudaError_t r) {
      if (e == cudaSuccess) e = r;
    };
    launch(Launch(ReuseKernel, count, 256, 0, s, chunks, status, sizes, ws));
    launch(Launch(TilesKernel<true>, tile_grid, tile_warps * 32, 0, s, chunks, status, ws));
    launch(Launch(PlaceKernel<false>, dim3(max_tiles_, count), kPlaceThreads, 0, s, chunks, status, sizes, ws));
    if (e != cudaSuccess) return Fail(ws, max_chunks_, e, s);
    return cudaGetLastError();
  };
  const CallGraphs::Key key = {3, reinterpret_cast<uintptr_t>(chunks), static_cast<uint64_t>(count),
                               reinterpret_cast<uintptr_t>(sizes), reinterpret_cast<uintptr_t>(status)};
  return graphs_->Run(key, stream, nullptr, launches);
}

}  // namespace kvferry::codec::cuda
