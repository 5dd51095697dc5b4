#include "transport/ucx/address.h"

#include <cstring>

#include "kernels/checksum.h"

namespace kvferry::transport {
namespace {
constexpr char kMagic[4] = {'K', 'V', 'F', 'U'};
constexpr size_t kHeader = 16;
constexpr size_t kMaxAddress = 1 << 16;
}  // namespace

std::string WrapUcxAddress(const void* addr, size_t len) {
  std::string out(kHeader + len, '\0');
  std::memcpy(out.data(), kMagic, 4);
  const uint32_t l32 = static_cast<uint32_t>(len);
  const uint64_t sum = Kvsum64(addr, len);
  std::memcpy(out.data() + 4, &l32, 4);
  std::memcpy(out.data() + 8, &sum, 8);
  if (len > 0) std::memcpy(out.data() + kHeader, addr, len);
  return out;
}

absl::StatusOr<std::string_view> UnwrapUcxAddress(std::string_view wrapped) {
  if (wrapped.size() < kHeader || std::memcmp(wrapped.data(), kMagic, 4) != 0) {
    return absl::InvalidArgumentError("not a kvferry UCX address");
  }
  uint32_t len;
  uint64_t sum;
  std::memcpy(&len, wrapped.data() + 4, 4);
  std::memcpy(&sum, wrapped.data() + 8, 8);
  if (len == 0 || len > kMaxAddress || len != wrapped.size() - kHeader) {
    return absl::InvalidArgumentError("UCX address length mismatch");
  }
  std::string_view body = wrapped.substr(kHeader);
  if (Kvsum64(body.data(), body.size()) != sum) return absl::InvalidArgumentError("UCX address checksum mismatch");
  return body;
}

}  // namespace kvferry::transport
