#include "common/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace kvferry {
namespace {
absl::Status Errno(const char* what, const std::string& name) {
  const int e = errno;
  std::string msg = absl::StrFormat("%s(%s): %s", what, name, std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EEXIST) return absl::AlreadyExistsError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  if (e == ENOMEM || e == ENOSPC) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}
}  // namespace

absl::Status ShmSegment::ValidateName(const std::string& name) {
  if (name.size() < 2 || name.size() > 201 || name[0] != '/') {
    return absl::InvalidArgumentError(absl::StrFormat("shm name '%s' must be '/' + 1..200 characters", name));
  }
  for (size_t i = 1; i < name.size(); ++i) {
    const char c = name[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return absl::InvalidArgumentError(absl::StrFormat("shm name '%s' has a character outside [A-Za-z0-9._-]", name));
    }
  }
  if (name == "/." || name == "/..") return absl::InvalidArgumentError("bad shm name");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name, size_t bytes,
                                                               bool unlink_on_close) {
  if (auto st = ValidateName(name); !st.ok()) return st;
  if (bytes == 0) return absl::InvalidArgumentError("shm segment of 0 bytes");
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Errno("shm_open", name);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    auto st = Errno("ftruncate", name);
    close(fd);
    shm_unlink(name.c_str());
    return st;
  }
  auto seg = Open(name);
  close(fd);
  if (!seg.ok()) {
    shm_unlink(name.c_str());
    return seg.status();
  }
  (*seg)->unlink_ = unlink_on_close;
  return seg;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name) {
  if (auto st = ValidateName(name); !st.ok()) return st;
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno("shm_open", name);
  struct stat sb {};
  if (fstat(fd, &sb) != 0) {
    auto st = Errno("fstat", name);
    close(fd);
    return st;
  }
  if (sb.st_size <= 0) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrFormat("shm segment %s is empty", name));
  }
  void* p = mmap(nullptr, static_cast<size_t>(sb.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Errno("mmap", name);
  auto seg = std::unique_ptr<ShmSegment>(new ShmSegment());
  seg->name_ = name;
  seg->data_ = static_cast<uint8_t*>(p);
  seg->size_ = static_cast<size_t>(sb.st_size);
  seg->dev_ = sb.st_dev;
  seg->ino_ = sb.st_ino;
  return seg;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) munmap(data_, size_);
  if (unlink_) shm_unlink(name_.c_str());
}

}  // namespace kvferry
