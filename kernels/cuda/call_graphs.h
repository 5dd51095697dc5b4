// A coder call's kernel launches replayed as a CUDA graph.
//
// A call of the codec is three to six kernels. Launched one by one, each
// launch costs the host a few microseconds, and on an idle stream the GPU
// waits for the first of them: on an H100 host an empty kernel took 6.2-7.2
// us from an idle stream and 3.2 us when queued, three chained empty kernels
// 14-16 us against 4.7. A graph of the same three kernels, launched whole,
// took 4.8 us from an idle stream (docs/performance.md).
//
// CallGraphs records a call's launches into a graph the first time it sees
// the call's arguments (its key: device pointers, counts and flags), and
// launches that graph for every later call with the same key. The kernels'
// programmatic dependent launches stay programmatic edges in the graph.
// Callers that keep their descriptor arrays (a daemon's per-worker control
// block) reuse one graph for every call.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cuda/codec_cuda.h"

namespace kvferry::codec::cuda {

class CallGraphs {
 public:
  using Key = std::array<uint64_t, 8>;
  // Launches of one call on a stream; returns the first error. `capturing`:
  // the stream is being captured into a graph (this one's or a caller's).
  using Launches = std::function<cudaError_t(cudaStream_t stream, bool capturing)>;

  // KVFERRY_CUDA_GRAPHS=0 in the environment turns the graphs off: every
  // call launches its kernels one by one (for comparison and debugging).
  CallGraphs();
  ~CallGraphs();
  CallGraphs(const CallGraphs&) = delete;
  CallGraphs& operator=(const CallGraphs&) = delete;

  // Runs `launches` on `stream`: from the graph recorded for `key`, recorded
  // now (on a stream of its own) if there is none. `event`, if not null, is
  // the one event the launches record (when capturing, with
  // cudaEventRecordWithFlags and cudaEventRecordExternal); it is set in the
  // graph at each launch, so it is not part of the key. Where `stream` is being captured into a graph
  // of the caller's, or no graph can be recorded (this includes launches
  // that fail), the launches run directly on `stream` and their own error
  // is returned.
  cudaError_t Run(const Key& key, cudaStream_t stream, cudaEvent_t event, const Launches& launches);

  // Graphs held (at most kMaxGraphs; the least recently used goes first).
  size_t size() const { return graphs_.size(); }
  static constexpr size_t kMaxGraphs = CallGraphsHeld;

 private:
  struct Graph {
    Key key;
    cudaGraph_t graph = nullptr;  // kept: its nodes name the exec's nodes
    cudaGraphExec_t exec = nullptr;
    cudaGraphNode_t event_node = nullptr;  // the event record node of `graph`, if any
    uint64_t used = 0;
    void Destroy();
  };
  // Records `launches` into a new graph and its executable (false: cannot).
  bool Record(const Launches& launches, Graph* g);

  bool enabled_ = true;
  std::vector<Graph> graphs_;
  cudaStream_t record_ = nullptr;  // the stream graphs are captured on
  uint64_t clock_ = 0;
};

}  // namespace kvferry::codec::cuda
