// kvsum64 on the CPU (see checksum_core.h for the definition).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvferry {

// Checksum of n bytes at p.
uint64_t Kvsum64(const void* p, size_t n);

// Incremental form over a buffer that is filled front to back (e.g. a chunk
// being gathered): Update() hashes every complete 4 KiB block written so far,
// while it is still in cache; Finish() hashes the rest and returns kvsum64.
class Kvsum64Builder {
 public:
  explicit Kvsum64Builder(const void* base) : base_(static_cast<const uint8_t*>(base)) {}
  // `filled` bytes from base are final.
  void Update(size_t filled);
  uint64_t Finish(size_t total);

 private:
  const uint8_t* base_;
  size_t hashed_ = 0;  // multiple of 4096
  uint64_t sum_ = 0;
};

// Digest of one block (exposed for tests and the GPU cross-check): the fastest
// implementation this CPU supports, and the portable scalar reference.
uint64_t Kvsum64BlockDigest(const uint8_t* p, size_t m, uint64_t block_index);
uint64_t Kvsum64BlockDigestScalar(const uint8_t* p, size_t m, uint64_t block_index);

}  // namespace kvferry
