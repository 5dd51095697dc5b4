// Fuzzes the receive path of the pipeline engine with hostile messages from a
// peer: whatever arrives, the transfer ends, and every destination chunk is
// either untouched (zero) or holds the bytes of a chunk that was sent for it
// with a matching checksum (raw: the payload; encoded: what it decodes to). A
// transfer reported OK holds exactly such chunks.
//
// Input: a flag byte, then messages [u16 length | bytes], alternating header
// and payload. Flag bit 0 set: headers of 48 bytes or more get this run's
// transfer id and a correct checksum (and, for split chunks, length) for what
// they carry, so that the fuzzer reaches the join, decode and write paths.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "kernels/checksum.h"
#include "kernels/codec.h"
#include "transport/chunk.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/pipeline/engine.h"

namespace {

using namespace kvferry;  // NOLINT

constexpr size_t kChunk = 4096;
constexpr size_t kTotal = 3 * kChunk + 100;  // 4 chunks, the last short

struct World {
  std::shared_ptr<transport::LoopbackFabric> fabric = transport::NewLoopbackFabric();
  std::unique_ptr<pipeline::Engine> rx;
  std::unique_ptr<transport::Transport> tx;
  std::unique_ptr<transport::Endpoint> ep;
  uint64_t next_id = 1;
  World() {
    spdlog::set_level(spdlog::level::off);
    rx = pipeline::Engine::Create(transport::CreateLoopbackTransport(fabric).value(),
                                  pipeline::EngineOptions{kChunk, 8 * (64 << 10), 4})
             .value();
    tx = transport::CreateLoopbackTransport(fabric).value();
    ep = tx->Connect(rx->address()).value();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* w = new World();
  if (size < 1) return 0;
  const bool fix_sums = data[0] & 1;
  const uint64_t id = w->next_id++;
  std::vector<uint8_t> dst(kTotal, 0);
  std::promise<absl::Status> done;
  auto fut = done.get_future();
  pipeline::RecvSpec spec;
  spec.transfer_id = id;
  spec.destination = pipeline::SegmentList({{dst.data(), dst.size()}});
  spec.chunk_bytes = kChunk;
  spec.deadline = absl::Now() + absl::Seconds(5);
  spec.done = [&done](absl::Status s) { done.set_value(std::move(s)); };
  if (!w->rx->StartRecv(std::move(spec)).ok()) std::abort();

  // seq -> payloads sent for it with a header whose checksum matched.
  std::map<uint32_t, std::vector<std::string>> valid;
  std::vector<std::string> msgs;
  for (size_t pos = 1; pos + 2 <= size && msgs.size() < 16;) {
    const size_t len = std::min<size_t>(data[pos] | (data[pos + 1] << 8), size - pos - 2);
    msgs.emplace_back(reinterpret_cast<const char*>(data + pos + 2), len);
    pos += 2 + len;
  }
  std::vector<transport::Completion> sink;
  for (size_t m = 0; m + 1 < msgs.size(); m += 2) {
    std::string& header = msgs[m];
    const std::string& payload = msgs[m + 1];
    if (header.size() >= transport::kChunkHeaderBytes) {
      // The bytes the header vouches for: the payload, or a split chunk's
      // codec chunk joined from the tail's codec header, the payload (its raw
      // plane) and the rest of the tail.
      uint16_t flags;
      std::memcpy(&flags, header.data() + 6, 2);
      const bool split =
          (flags & transport::kChunkSplit) != 0 && header.size() >= transport::kChunkHeaderBytes + codec::kHeaderBytes;
      std::string chunk = payload;
      if (split) {
        const std::string tail = header.substr(transport::kChunkHeaderBytes);
        chunk = tail.substr(0, codec::kHeaderBytes) + payload + tail.substr(codec::kHeaderBytes);
      }
      const uint64_t sum = Kvsum64(chunk.data(), chunk.size());
      if (fix_sums) {
        std::memcpy(header.data() + 8, &id, 8);  // this run's transfer
        std::memcpy(header.data() + 40, &sum, 8);
        if (split) {
          const uint64_t length = chunk.size();
          std::memcpy(header.data() + 32, &length, 8);
        }
      }
      uint64_t hsum;
      uint32_t seq;
      std::memcpy(&hsum, header.data() + 40, 8);
      std::memcpy(&seq, header.data() + 16, 4);
      if (hsum == sum) {
        if (flags & transport::kChunkEncoded) {
          std::string out(kChunk, '\0');
          auto n = codec::Decode(chunk.data(), chunk.size(), out.data(), out.size(), 1);
          if (n.ok()) valid[seq].push_back(out.substr(0, *n));
        } else {
          valid[seq].push_back(payload);
        }
      }
    }
    w->ep->SubmitSend(transport::HeaderTag(id), header.data(), header.size(), m);
    w->ep->SubmitSend(transport::PayloadTag(id), payload.data(), payload.size(), m + 1);
  }
  w->tx->Progress(&sink);
  // Let the engine see the messages, then end the transfer if it is still open.
  if (fut.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) {
    w->rx->Cancel(pipeline::Direction::kRecv, id, absl::CancelledError("fuzz"));
  }
  const absl::Status result = fut.get();

  for (uint32_t seq = 0; seq < 4; ++seq) {
    const size_t off = seq * kChunk, len = std::min(kChunk, kTotal - off);
    const std::string got(reinterpret_cast<const char*>(dst.data() + off), len);
    const bool zero = got == std::string(len, '\0');
    bool matches_valid = false;
    for (const auto& p : valid[seq]) matches_valid |= p == got;
    if (!zero && !matches_valid) std::abort();  // unverified bytes reached the destination
    if (result.ok() && !matches_valid) std::abort();
  }
  // Staging must be whole again once the job has ended.
  auto st = w->rx->stats();
  if (st.recv_slots_free != st.recv_slots) std::abort();
  return 0;
}
