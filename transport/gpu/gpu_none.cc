// transport/gpu without CUDA: GPU pools are refused with a clear reason.
#include "transport/gpu/gpu.h"

namespace kvferry::gpu {
namespace {
absl::Status NoCuda() {
  return absl::UnimplementedError("this kvferryd was built without CUDA: GPU pools are not available");
}
}  // namespace

bool BuiltWithCuda() { return false; }
absl::StatusOr<int> ResolveDevice(absl::string_view) { return NoCuda(); }
absl::StatusOr<std::unique_ptr<IpcMapping>> IpcMapping::Open(absl::string_view, int) { return NoCuda(); }
IpcMapping::~IpcMapping() = default;
absl::StatusOr<std::unique_ptr<PinnedRange>> PinnedRange::Pin(void*, size_t) { return NoCuda(); }
PinnedRange::~PinnedRange() = default;

struct ChunkWorker::Impl {};
ChunkWorker::ChunkWorker(std::unique_ptr<Impl> impl, int device) : impl_(std::move(impl)), device_(device) {}
ChunkWorker::~ChunkWorker() = default;
uint64_t ChunkWorker::device_bytes() const { return 0; }
absl::StatusOr<std::unique_ptr<ChunkWorker>> ChunkWorker::Create(int, uint64_t) { return NoCuda(); }
absl::Status ChunkWorker::ToHost(const std::vector<DeviceRange>&, uint8_t*) { return NoCuda(); }
absl::Status ChunkWorker::FromHost(const uint8_t*, const std::vector<DeviceRange>&) { return NoCuda(); }
absl::StatusOr<uint64_t> ChunkWorker::Encode(const codec::EncodeOptions&, const std::vector<DeviceRange>&, uint64_t,
                                             uint8_t*) {
  return NoCuda();
}
absl::Status ChunkWorker::Decode(const uint8_t*, uint64_t, const std::vector<DeviceRange>&, uint64_t) {
  return NoCuda();
}
absl::Status ChunkWorker::Gather(const std::vector<DeviceRange>&, uint8_t*) { return NoCuda(); }
absl::StatusOr<uint64_t> ChunkWorker::EncodeInto(const codec::EncodeOptions&, const std::vector<DeviceRange>&,
                                                 uint64_t, uint8_t*) {
  return NoCuda();
}
absl::StatusOr<uint64_t> ChunkWorker::Checksum(const uint8_t*, uint64_t) { return NoCuda(); }
absl::Status ChunkWorker::CopyIn(const uint8_t*, uint64_t, uint8_t*) { return NoCuda(); }
absl::Status ChunkWorker::DecodeFrom(const uint8_t*, uint64_t, const std::vector<DeviceRange>&, uint64_t) {
  return NoCuda();
}
absl::Status ChunkWorker::Scatter(const uint8_t*, const std::vector<DeviceRange>&) { return NoCuda(); }
absl::StatusOr<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Allocate(int, uint64_t) { return NoCuda(); }
DeviceBuffer::~DeviceBuffer() = default;

}  // namespace kvferry::gpu
