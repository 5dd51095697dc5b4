// POSIX shared-memory segments: created by workers (Create), mapped by the
// daemon (Open). RAII: the mapping is released with the object; the creator
// also unlinks the name unless told to keep it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvferry {

class ShmSegment {
 public:
  // Name rules: "/" followed by 1..200 of [A-Za-z0-9._-].
  static absl::Status ValidateName(const std::string& name);
  // Creates a new segment of `bytes` (fails if the name exists).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, size_t bytes,
                                                            bool unlink_on_close = true);
  // Maps an existing segment read-write, whatever its size.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Identity of the underlying object (same for every mapping of it).
  dev_t device() const { return dev_; }
  ino_t inode() const { return ino_; }

 private:
  ShmSegment() = default;
  std::string name_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool unlink_ = false;
};

}  // namespace kvferry
