// Fuzzes the UCX address envelope: untrusted bytes from a peer's RPC.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "transport/ucx/address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto body = kvferry::transport::UnwrapUcxAddress(in);
  if (!body.ok()) return 0;
  if (kvferry::transport::WrapUcxAddress(body->data(), body->size()) != in) std::abort();
  return 0;
}
