// Integer-only pieces of the encoder's choices, shared by the CPU reference and
// the CUDA encoder so that both reach the same decisions bit for bit: the
// size estimate of a frequency table, the channel order of KV-aware mode, and
// the channel-group arithmetic. (docs/codec-format.md, "KV-aware mode".)
#pragma once

#include <cstdint>

#include "kernels/checksum_core.h"  // KVF_HD

namespace kvferry::codec::plan {

// Frequencies sum to kM = 2^kProbBits. 8 bits (version 5) let a lane code
// two symbols between renormalisations (docs/codec-format.md, "rANS coding").
constexpr uint32_t kProbBits = 8;
constexpr uint32_t kM = 1u << kProbBits;

// floor(2^16 * log2(f)) for 1 <= f < 2^32, by repeated squaring.
KVF_HD uint32_t Log2Q16(uint32_t f) {
  uint32_t ip = 0;
  while ((f >> ip) > 1) ++ip;
  uint64_t y = static_cast<uint64_t>(f) << (31 - ip);  // f / 2^ip in Q31, in [1, 2)
  uint32_t frac = 0;
  for (int b = 15; b >= 0; --b) {
    y = (y * y) >> 31;
    if (y >= (uint64_t{1} << 32)) {
      y >>= 1;
      frac |= 1u << b;
    }
  }
  return (ip << 16) | frac;
}

// Estimated coded size, in 1/65536 bits, of `count` symbols whose normalised
// frequency is f (1..kM): count * (kProbBits - log2 f).
KVF_HD uint64_t CostQ16(uint64_t count, uint32_t f) { return count * ((uint64_t{kProbBits} << 16) - Log2Q16(f)); }

// Refined tables (fp8 e5m2; docs/codec-format.md, "Table refinement"):
// after the normalisation, unit moves of probability from one symbol to
// another while a move lowers the estimated size (CostQ16), at most
// kMaxRefineMoves of them. Each move takes one unit from the donor, the
// symbol (f > 1) of least MoveLoss, and gives it to the taker, the symbol
// (f < kM) of most MoveGain, the lower symbol on ties; the refinement stops
// when the taker is the donor or gains no more than the donor loses. (Donor
// and taker are chosen independently, so that a warp finds both at once.)
// Both values fit 56 bits (counts at most 2^40, log2 steps at most 2^16).
constexpr uint32_t kMaxRefineMoves = 64;  // e5m2 has 32 exponents: the normalisation is never that far off
// Whether tables of this dtype (codec::DType's value) are refined: fp8 e5m2.
KVF_HD constexpr bool Refined(uint32_t dtype) { return dtype == 5; }
KVF_HD uint64_t MoveLoss(uint64_t count, uint32_t f) { return count * (Log2Q16(f) - Log2Q16(f - 1)); }
KVF_HD uint64_t MoveGain(uint64_t count, uint32_t f) { return count * (Log2Q16(f + 1) - Log2Q16(f)); }

// The refinement on one thread (the CPU encoder; the CUDA encoder makes the
// same moves a warp at a time): f is a normalised table of hist.
inline void RefineTable(const uint64_t hist[256], uint32_t f[256]) {
  for (uint32_t move = 0; move < kMaxRefineMoves; ++move) {
    int d = -1, t = -1;
    uint64_t loss = 0, gain = 0;
    for (int s = 0; s < 256; ++s) {
      if (hist[s] == 0) continue;
      if (f[s] > 1) {
        const uint64_t l = MoveLoss(hist[s], f[s]);
        if (d < 0 || l < loss) d = s, loss = l;
      }
      if (f[s] < kM) {
        const uint64_t g = MoveGain(hist[s], f[s]);
        if (t < 0 || g > gain) t = s, gain = g;
      }
    }
    if (d < 0 || t < 0 || t == d || gain <= loss) return;
    --f[d];
    ++f[t];
  }
}

// The channel order of KV-aware mode sorts these keys: the channel's mean
// exponent in 16.16 fixed point (floor), ties broken by channel index.
KVF_HD uint64_t ChannelKey(uint64_t symbol_sum, uint64_t count, uint32_t channel) {
  return (count == 0 ? 0 : (symbol_sum << 16) / count) << 32 | channel;
}

// Elements of channel c among n elements of a C-channel layout.
KVF_HD uint64_t ChannelCount(uint64_t n, uint64_t channels, uint64_t c) {
  return n / channels + (c < n % channels ? 1 : 0);
}

// Channel at rank k (0-based, in key order) joins group k * G / C. The group
// for G tables is the group for 16 tables shifted right by log2(16 / G), so
// the histograms of 16 groups give those of 2, 4 and 8.
KVF_HD uint32_t Group16(uint64_t rank, uint64_t channels) { return static_cast<uint32_t>(rank * 16 / channels); }

// Symbols per tile, as log2 (header byte 30). Tiles are coded in parallel, one
// warp each on a GPU, so smaller tiles mean more parallel work per chunk, at
// 128 bytes of final rANS states per tile (64 of them the carry, below).
// Elements of 2 and 4 bytes use 4096-symbol tiles from 256 Ki to 2 Mi
// elements (a 4 MiB bf16 chunk: twice the warps, half the rounds each, for
// the latency of one chunk), 8192 up to 32 Mi elements, 16384 above. On real
// bf16 KV the tile's states cost +0.72%, +0.38% and +0.19% of the order-0
// bound at 4096, 8192 and 16384 symbols (docs/performance.md). Below 256 Ki
// elements chunks are small enough that their ratio matters more (partial
// tiles cost the most: per-layer KV planes of 20-70 KiB); above 32 Mi, more
// tiles no longer pay on an H100. 1-byte elements, whose coded tiles are
// smallest, always use 16384.
constexpr uint32_t kMinTileLog2 = 12, kMaxTileLog2 = 14;
// TileLog2's bands for 2- and 4-byte elements: 4096-symbol tiles for
// [kSmallTilesFrom, kSmallTilesTo] elements, 8192 up to kMidTilesTo.
constexpr uint64_t kSmallTilesFrom = uint64_t{1} << 18, kSmallTilesTo = uint64_t{1} << 21,
                   kMidTilesTo = uint64_t{1} << 25;
// Header byte 4. Version 1 had no tile size field; version 2 started every
// rANS lane from 2^16 and kept each tile's raw bits whole in the raw plane;
// version 3 had no 4096-symbol tiles; version 4 had 12-bit frequencies and
// renormalised after every symbol.
constexpr uint8_t kFormatVersion = 5;
KVF_HD constexpr uint32_t TileLog2(uint32_t elem_bytes, uint64_t elements) {
  if (elem_bytes < 2 || elements < kSmallTilesFrom || elements > kMidTilesTo) return 14;
  return elements <= kSmallTilesTo ? 12 : 13;
}
KVF_HD constexpr uint64_t TileCount(uint64_t elements, uint32_t tile_log2) {
  return (elements + (uint64_t{1} << tile_log2) - 1) >> tile_log2;
}
// The most tiles TileLog2 gives a chunk of at most input_bytes, over every
// element size: a tile count is largest at the top of each band of TileLog2.
constexpr uint64_t MaxTiles(uint64_t input_bytes) {
  uint64_t most = 0;
  for (uint32_t elem_bytes = 1; elem_bytes <= 4; elem_bytes *= 2) {
    const uint64_t top = input_bytes / elem_bytes;
    for (uint64_t n : {top, kSmallTilesTo, kMidTilesTo}) {
      n = n < top ? n : top;
      const uint64_t t = TileCount(n, TileLog2(elem_bytes, n));
      most = t > most ? t : most;
    }
  }
  return most;
}

// The carry (format version 3): the last kCarryBytes bytes of each whole
// tile's part of the raw plane leave the plane and ride in the tile instead,
// 2 bytes in each lane's initial rANS state (2^16 | bytes 2l, 2l + 1 as a
// little-endian u16), which the decoder's last state gives back. A coded
// tile's 32 final states then carry 16 bits of data each, where version 2's
// initial state 2^16 carried none: the states cost about 1 bit a lane over
// the information they hold, instead of about 16. A RAW tile appends the
// carry bytes after its packed symbols. Only tiles of 2^tile_log2 elements
// carry, and only dtypes with raw bits (a tile's part of the plane is then
// at least 3 KiB). The "whole plane" is the raw plane as version 2 laid it
// out, every carry in it: tile t's part starts at t * TileRawBytes there.
constexpr uint32_t kCarryBytes = 64;
KVF_HD constexpr uint64_t TileRawBytes(uint32_t raw_bits, uint32_t tile_log2) {
  return (uint64_t{1} << tile_log2) / 8 * raw_bits;
}
KVF_HD constexpr uint64_t CarryTiles(uint64_t elements, uint32_t raw_bits, uint32_t tile_log2) {
  return raw_bits == 0 ? 0 : elements >> tile_log2;
}
// Bytes of the raw plane in the chunk (header bytes 40..47).
KVF_HD constexpr uint64_t RawPlaneBytes(uint64_t elements, uint32_t raw_bits, uint32_t tile_log2) {
  return (elements + 7) / 8 * raw_bits - kCarryBytes * CarryTiles(elements, raw_bits, tile_log2);
}
// Bytes of the whole plane before tile t's part that tiles carry: a byte of
// tile t's part outside its carry is at (its whole-plane offset) - this in
// the chunk's plane.
KVF_HD constexpr uint64_t CarriedBefore(uint64_t tile, uint64_t carry_tiles) {
  return kCarryBytes * (tile < carry_tiles ? tile : carry_tiles);
}

// Large bf16 chunks coded without channel groups take their order-0 table
// from a sample: the symbols of every kSampleStride-th 4 KiB block of the
// input (blocks 0, 16, 32, ...). The table is then known after reading 1/16
// of the input, so the CUDA encoder codes the exponents in the same pass that
// writes the raw plane and sums the checksum. A tile holding a symbol that
// the sample lacks (frequency 0) is stored RAW. On real bf16 KV this costs
// about 0.8% of the exponent bits (0.2% of the chunk) from 16 Mi elements
// on; below that the sample is too small. Other dtypes have no one-pass
// encoder, so a sample would cost them ratio for nothing (docs/codec-format.md).
constexpr uint64_t kSampleMinElements = uint64_t{1} << 24;
constexpr uint32_t kSampleStride = 16;
constexpr uint32_t kSampleBlockBytes = 4096;
KVF_HD constexpr bool Sampled(bool bf16, uint64_t elements, bool grouping) {
  return bf16 && !grouping && elements >= kSampleMinElements;
}

// A sample misses rare symbols, and a missed symbol makes every tile that
// holds one RAW (slower to code and decode, and larger). So a sampled
// histogram counts 1 for each hole, a symbol the sample lacks whose two
// neighbours it has, when it has at most kMaxSampleHoles of them (more would
// cost the common symbols probability). On the real KV of
// tools/kv_capture.py, 64 MiB bf16 chunks' samples lack exponent 107 (21 of
// 32 Mi elements), between 106 and 108: 21 of their 4096 tiles were RAW.
constexpr uint32_t kMaxSampleHoles = 4;
KVF_HD constexpr bool SampleHole(uint64_t below, uint64_t at, uint64_t above) {
  return below != 0 && at == 0 && above != 0;
}

// Largest chunk once the encoder may no longer fall back to STORED (split-send):
// header, input, the largest map (8192) and tables (16 x 516), and per tile
// its directory entry and padding (a tile spans at least kMinTileInputBytes
// of input: 4096 symbols of 2 bytes).
constexpr uint64_t kMinTileInputBytes = 8192;
KVF_HD constexpr uint64_t MaxSplitChunkBytes(uint64_t input_bytes) {
  return 64 + input_bytes + 16 * 1024 + 256 + 16 * (input_bytes / kMinTileInputBytes + 1);
}

// Split-send's estimate of a coded chunk's size in bytes: the header, the raw
// plane, the chosen candidate's cost (coded symbols plus map and tables, in
// Q16 bits) and, per tile, its directory entry and 32 final states, less
// the carry bytes those states hold (carry_tiles: CarryTiles).
KVF_HD uint64_t EstimatedChunkBytes(uint64_t raw_plane, uint64_t cost_q16, uint64_t tiles, uint64_t carry_tiles) {
  return 64 + raw_plane + (cost_q16 >> 19) + 1 + tiles * (4 + 128) - carry_tiles * kCarryBytes + 3;
}

}  // namespace kvferry::codec::plan
