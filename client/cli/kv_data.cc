#include "client/cli/kv_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kvferry::cli {
namespace {

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Approximately N(0,1): sum of four uniforms (Irwin-Hall), centred and scaled.
float Gauss(uint64_t& s) {
  const uint64_t r = SplitMix(s);
  float acc = 0;
  for (int i = 0; i < 4; ++i) acc += static_cast<float>((r >> (16 * i)) & 0xffff) * (1.0f / 65536.0f);
  return (acc - 2.0f) * 1.7320508f;
}

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fff + ((u >> 16) & 1);                                                      // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

uint16_t ToFp16(float f) {
  // Enough for test data: normal range, round to nearest; tiny -> 0, huge -> inf.
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t mant = (u >> 13) & 0x3ff;
  if ((u >> 12) & 1) ++mant;
  return static_cast<uint16_t>(sign | ((static_cast<uint32_t>(exp) << 10) + mant));
}

}  // namespace

void FillKvLike(const client::HostPool& pool, uint64_t seed) {
  const v1::KvLayout& l = pool.layout();
  const uint32_t es = DTypeSize(l.dtype());
  const uint32_t channels = l.num_heads() * l.head_dim();
  std::vector<float> scale(channels);
  for (uint32_t layer = 0; layer < l.num_layers(); ++layer) {
    for (uint32_t plane = 0; plane < l.kv_planes(); ++plane) {
      // Per-channel scale, log-normal: a few channels are much larger (outliers).
      uint64_t cs = seed * 1000003 + layer * 7919 + plane;
      for (auto& s : scale) s = std::exp(0.8f * Gauss(cs));
      for (uint32_t block = 0; block < pool.geometry().num_blocks; ++block) {
        uint8_t* seg = pool.segment(layer, plane, block);
        uint64_t st = seed ^ (uint64_t{layer} << 40) ^ (uint64_t{plane} << 36) ^ (uint64_t{block} << 8);
        const uint64_t n = pool.geometry().segment_bytes / es;
        for (uint64_t i = 0; i < n; ++i) {
          const float v = Gauss(st) * scale[i % channels];
          switch (es) {
            case 2: {
              const uint16_t h = l.dtype() == v1::DTYPE_FP16 ? ToFp16(v) : ToBf16(v);
              std::memcpy(seg + 2 * i, &h, 2);
              break;
            }
            case 4:
              std::memcpy(seg + 4 * i, &v, 4);
              break;
            default:
              seg[i] = static_cast<uint8_t>(SplitMix(st));
          }
        }
      }
    }
  }
}

bool SameBlock(const client::HostPool& pa, uint32_t a, const client::HostPool& pb, uint32_t b) {
  const Geometry& g = pa.geometry();
  for (uint32_t layer = 0; layer < g.layers; ++layer) {
    for (uint32_t plane = 0; plane < g.planes; ++plane) {
      if (std::memcmp(pa.segment(layer, plane, a), pb.segment(layer, plane, b), g.segment_bytes) != 0) return false;
    }
  }
  return true;
}

int FillRealKv(const client::HostPool& pool, const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".bf16") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<uint8_t> data;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    data.insert(data.end(), b.begin(), b.end());
  }
  if (data.size() < 2) return 0;
  data.resize(data.size() & ~size_t{1});  // whole elements
  uint8_t* p = pool.base();
  for (uint64_t off = 0; off < pool.bytes(); off += data.size()) {
    std::memcpy(p + off, data.data(), std::min<uint64_t>(data.size(), pool.bytes() - off));
  }
  return static_cast<int>(files.size());
}

}  // namespace kvferry::cli
