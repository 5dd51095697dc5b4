// Envelope for UCX worker addresses exchanged over RPC: bytes that did not come
// from a kvferry UCX transport are refused before UCX parses them.
//   "KVFU" | u32 length | u64 kvsum64(address) | address bytes
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvferry::transport {

std::string WrapUcxAddress(const void* addr, size_t len);
// The address bytes inside `wrapped` (a view into it), or INVALID_ARGUMENT.
absl::StatusOr<std::string_view> UnwrapUcxAddress(std::string_view wrapped);

}  // namespace kvferry::transport
