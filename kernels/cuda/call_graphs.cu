#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/call_graphs.h"

namespace kvferry::codec::cuda {

CallGraphs::CallGraphs() {
  const char* v = std::getenv("KVFERRY_CUDA_GRAPHS");
  enabled_ = v == nullptr || std::strcmp(v, "0") != 0;
}

// A graph still running is freed when it completes (cudaGraphExecDestroy).
void CallGraphs::Graph::Destroy() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  exec = nullptr;
  graph = nullptr;
}

CallGraphs::~CallGraphs() {
  for (Graph& g : graphs_) g.Destroy();
  if (record_ != nullptr) cudaStreamDestroy(record_);
}

bool CallGraphs::Record(const Launches& launches, Graph* g) {
  if (record_ == nullptr && cudaStreamCreateWithFlags(&record_, cudaStreamNonBlocking) != cudaSuccess) {
    record_ = nullptr;
    cudaGetLastError();
    return false;
  }
  // Thread-local mode: other threads' CUDA calls are not disturbed.
  if (cudaStreamBeginCapture(record_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const cudaError_t launched = launches(record_, true);
  const cudaError_t ended = cudaStreamEndCapture(record_, &g->graph);
  bool ok = launched == cudaSuccess && ended == cudaSuccess && g->graph != nullptr;
  if (ok) ok = cudaGraphInstantiate(&g->exec, g->graph, 0) == cudaSuccess;
  if (ok) {
    size_t n = 0;
    ok = cudaGraphGetNodes(g->graph, nullptr, &n) == cudaSuccess;
    std::vector<cudaGraphNode_t> nodes(n);
    if (ok && n > 0) ok = cudaGraphGetNodes(g->graph, nodes.data(), &n) == cudaSuccess;
    for (size_t k = 0; ok && k < n; ++k) {
      cudaGraphNodeType type;
      ok = cudaGraphNodeGetType(nodes[k], &type) == cudaSuccess;
      if (ok && type == cudaGraphNodeTypeEventRecord) g->event_node = nodes[k];
    }
  }
  if (!ok) {
    g->Destroy();
    cudaGetLastError();  // the capture's error is not sticky: cleared
  }
  return ok;
}

cudaError_t CallGraphs::Run(const Key& key, cudaStream_t stream, cudaEvent_t event, const Launches& launches) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    cudaGetLastError();  // not sticky: cleared, so that the call's result is the launches'
    capture = cudaStreamCaptureStatusNone;
  }
  if (!enabled_ || capture != cudaStreamCaptureStatusNone) {
    return launches(stream, capture == cudaStreamCaptureStatusActive);
  }
  auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const Graph& g) { return g.key == key; });
  if (it == graphs_.end()) {
    Graph g;
    g.key = key;
    // No graph (the launches failed, or the capture did): the launches run
    // as they are, and return their own error if they have one.
    if (!Record(launches, &g)) return launches(stream, false);
    if (graphs_.size() == kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const Graph& a, const Graph& b) { return a.used < b.used; });
      lru->Destroy();
      graphs_.erase(lru);
    }
    graphs_.push_back(g);
    it = graphs_.end() - 1;
  }
  it->used = ++clock_;
  if (event != nullptr && it->event_node != nullptr) {
    if (const cudaError_t e = cudaGraphExecEventRecordNodeSetEvent(it->exec, it->event_node, event); e != cudaSuccess) {
      return e;
    }
  }
  return cudaGraphLaunch(it->exec, stream);
}

}  // namespace kvferry::codec::cuda
