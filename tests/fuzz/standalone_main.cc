// Runs a libFuzzer-style target without libFuzzer (for the gcc/Bazel test
// build): every file of the given corpus directories, then a deterministic
// stream of mutations of them (bit flips, truncations, splices, random bytes).
//   fuzz_target [--iterations=N] DIR...
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  long iterations = 20000;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--iterations=", 13) == 0) {
      iterations = std::atol(argv[i] + 13);
      continue;
    }
    DIR* d = opendir(argv[i]);
    if (d == nullptr) {
      std::fprintf(stderr, "cannot open corpus %s\n", argv[i]);
      return 2;
    }
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(std::string(argv[i]) + "/" + e->d_name, std::ios::binary);
      corpus.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    closedir(d);
  }
  if (corpus.empty()) corpus.emplace_back();
  for (const auto& c : corpus) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(c.data()), c.size());
  std::mt19937_64 rng(12345);
  for (long it = 0; it < iterations; ++it) {
    std::string s = corpus[rng() % corpus.size()];
    switch (rng() % 5) {
      case 0:
        for (int k = 0, n = 1 + rng() % 4; k < n && !s.empty(); ++k) s[rng() % s.size()] ^= 1 << (rng() % 8);
        break;
      case 1:
        if (!s.empty()) s.resize(rng() % s.size());
        break;
      case 2:
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng());
        break;
      case 3: {
        const std::string& o = corpus[rng() % corpus.size()];
        s = s.substr(0, s.empty() ? 0 : rng() % s.size()) + o.substr(o.empty() ? 0 : rng() % o.size());
        break;
      }
      default:
        s.assign(rng() % 300, '\0');
        for (auto& ch : s) ch = static_cast<char>(rng());
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::printf("%zu corpus inputs and %ld mutations ran clean\n", corpus.size(), iterations);
  return 0;
}
