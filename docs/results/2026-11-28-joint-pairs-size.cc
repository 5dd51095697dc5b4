// What a joint rANS step for a lane's pair of symbols (one step over the product alphabet:
// F = f_a f_b, C = c_b 256 + f_b c_a, M = 2^16) would cost in size against format 5's two
// steps a pair (M = 256 each, one renormalisation a pair), on real bf16 KV exponents: three
// 4 MiB windows, 4096-symbol tiles of 32 states started at 2^16 | lane, 16 bits a state
// counted (the carry gives the other 16 back). A simple normalisation (floor, at least 1,
// the largest fixed up), the same for both. Results: docs/performance.md ("The rANS rounds
// in place, and a joint step for a pair", 2026-11-28).
// Build: g++ -O2 -o pairsize 2026-11-28-joint-pairs-size.cc; run: ./pairsize KV_DIR
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

static std::vector<uint16_t> Load(const std::string& path) {
  std::vector<uint16_t> v;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return v;
  uint16_t b[4096];
  size_t n;
  while ((n = fread(b, 2, 4096, f)) > 0) v.insert(v.end(), b, b + n);
  fclose(f);
  return v;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "kv";
  std::vector<uint16_t> d;
  for (const char* n : {"chat", "code", "prose"}) {
    const auto v = Load(dir + "/" + n + ".bf16");
    d.insert(d.end(), v.begin(), v.end());
  }
  if (d.empty()) {
    fprintf(stderr, "no bf16 KV in %s\n", dir.c_str());
    return 1;
  }
  const size_t N = size_t{1} << 21;  // 4 MiB of bf16
  const int T = 4096;
  for (size_t off : {size_t{0}, size_t{1} << 20, size_t{3} << 20}) {
    std::vector<int> s(N);
    for (size_t i = 0; i < N; ++i) s[i] = (d[(off + i) % d.size()] >> 7) & 0xff;
    std::vector<uint64_t> h(256, 0);
    for (int x : s) h[x]++;
    std::vector<uint32_t> f(256, 0);
    uint32_t sum = 0;
    for (int k = 0; k < 256; ++k) {
      if (h[k]) f[k] = static_cast<uint32_t>(std::max<uint64_t>(1, h[k] * 256 / N)), sum += f[k];
    }
    while (sum > 256) --f[std::max_element(f.begin(), f.end()) - f.begin()], --sum;
    f[std::max_element(h.begin(), h.end()) - h.begin()] += 256 - sum;
    std::vector<uint32_t> c(257, 0);
    for (int k = 0; k < 256; ++k) c[k + 1] = c[k] + f[k];
    double ideal = 0;
    for (int x : s) ideal += 8 - std::log2(f[x]);
    uint64_t wseq = 0, wjoint = 0;
    for (size_t t0 = 0; t0 < N; t0 += T) {
      for (int lane = 0; lane < 32; ++lane) {
        uint32_t x = (1u << 16) | lane, y = x;
        for (int r = T / 32 - 1; r >= 1; r -= 2) {
          const int a = s[t0 + 32 * r + lane], b = s[t0 + 32 * (r - 1) + lane];
          const uint64_t F = uint64_t{f[a]} * f[b];
          if (x >= (F << 16)) ++wseq, x >>= 16;
          x = (x / f[a]) * 256 + x % f[a] + c[a];
          x = (x / f[b]) * 256 + x % f[b] + c[b];
          if (y >= (F << 16)) ++wjoint, y >>= 16;
          y = static_cast<uint32_t>((y / F) * 65536 + y % F + c[b] * 256 + f[b] * c[a]);
        }
      }
    }
    const double states = static_cast<double>(N / T) * 32 * 16;
    const double seq = wseq * 16.0 + states, joint = wjoint * 16.0 + states;
    printf(
        "window at %zu MiB: ideal %.4f bits a symbol, format 5 %.4f, joint %.4f: joint %+.3f%% of the "
        "exponent bits, %+.3f%% of the chunk\n",
        off >> 19, ideal / N, seq / N, joint / N, (joint / seq - 1) * 100, (joint - seq) / (N * 8.0 + seq) * 100);
  }
}
