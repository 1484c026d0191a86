// The cuda executor's capture side: stream capture (its own or the engine's), conditional
// WHILE nodes, instantiation with upload, whole-graph update and launch.
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda_blocking.hpp"
#include "device/cuda_check.hpp"
#include "device/cuda_executor.hpp"
#include "device/cuda_probe.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph::detail {

void cuda_executor::begin_capture() {
  device_scope d(device_);
  if (capturing()) throw capture_violation("cuda executor: begin_capture while already capturing");
  // Thread-local mode: other threads of the engine may keep allocating without invalidating
  // this capture.
  SPECGRAPH_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  own_capture_ = true;
}

void cuda_executor::begin_private_capture() {
  device_scope d(device_);
  if (capturing()) throw capture_violation("cuda executor: begin_capture while already capturing");
  // A non-blocking stream of our own: the caller's may be the legacy default stream, which
  // cannot be captured (and a capture on it would also sweep up other threads' work).
  if (!capture_stream_) capture_stream_ = detail::make_stream();
  SPECGRAPH_CUDA_TRY(
      cudaStreamBeginCapture(capture_stream_.get(), cudaStreamCaptureModeThreadLocal));
  origin_stream_ = stream_;
  stream_ = capture_stream_.get();
  private_capture_ = true;
  own_capture_ = true;
}

void cuda_executor::restore_origin_stream() noexcept {
  if (!private_capture_) return;
  stream_ = origin_stream_;  // null too: the legacy stream
  origin_stream_ = nullptr;
  private_capture_ = false;
}

std::unique_ptr<graph> cuda_executor::end_capture() {
  if (!own_capture_) throw capture_violation("cuda executor: end_capture without begin_capture");
  device_scope d(device_);
  if (main_stream_ != nullptr) {
    abort_capture();
    throw capture_violation("cuda executor: end_capture inside a conditional body");
  }
  own_capture_ = false;
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &g);
  restore_origin_stream();
  free_deferred();
  if (e != cudaSuccess) {
    if (g != nullptr) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();  // capture errors are not sticky; the stream stays usable
    detail::throw_cuda(e, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  return std::make_unique<cuda_graph>(g);
}

void cuda_executor::abort_capture() noexcept {
  // A body capture may be in flight inside the engine's capture too (begin_while in a capture
  // the engine began): that one is ours to end, and stream() must be the engine's again.
  if (!own_capture_ && main_stream_ == nullptr) return;
  int previous = 0;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device_);
  if (main_stream_ != nullptr) {  // a body capture in flight: end it first
    cudaGraph_t body = nullptr;   // owned by its conditional node
    (void)cudaStreamEndCapture(stream_, &body);
    stream_ = main_stream_;
    main_stream_ = nullptr;
  }
  if (own_capture_) {
    own_capture_ = false;
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(stream_, &g);  // always end, even after invalidation
    if (g != nullptr) (void)cudaGraphDestroy(g);
    restore_origin_stream();
    free_deferred();  // the engine's capture (if any) is its own: frees wait for ours only
  }
  (void)cudaGetLastError();
  (void)cudaSetDevice(previous);
}

conditional_handle cuda_executor::begin_while(bool initial) {
  device_scope d(device_);
  if (!capturing()) throw capture_violation("cuda executor: begin_while outside capture");
  if (main_stream_ != nullptr) {
    throw capture_violation("cuda executor: conditional nodes do not nest here");
  }
  // The WHILE node goes after everything captured so far; the main capture continues after
  // it, and the body is captured into the node's own graph on an internal stream.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t g = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  std::size_t n = 0;
  SPECGRAPH_CUDA_TRY(cudaStreamGetCaptureInfo(stream_, &status, nullptr, &g, &deps, &edges, &n));
  cudaGraphConditionalHandle handle = 0;
  SPECGRAPH_CUDA_TRY(
      cudaGraphConditionalHandleCreate(&handle, g, initial ? 1u : 0u, cudaGraphCondAssignDefault));
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = cudaGraphCondTypeWhile;
  params.conditional.size = 1;
  cudaGraphNode_t node = nullptr;
  SPECGRAPH_CUDA_TRY(cudaGraphAddNode(&node, g, deps, edges, n, &params));
  SPECGRAPH_CUDA_TRY(cudaStreamUpdateCaptureDependencies(stream_, &node, nullptr, 1,
                                                         cudaStreamSetCaptureDependencies));
  // Made with the executor, before any capture (load_kernels); only an executor made inside a
  // capture gets it here.
  if (!body_stream_) body_stream_ = detail::make_stream();
  SPECGRAPH_CUDA_TRY(cudaStreamBeginCaptureToGraph(body_stream_.get(),
                                                   params.conditional.phGraph_out[0], nullptr,
                                                   nullptr, 0, cudaStreamCaptureModeThreadLocal));
  main_stream_ = stream_;
  stream_ = body_stream_.get();
  return handle;
}

void cuda_executor::end_while() {
  if (main_stream_ == nullptr)
    throw capture_violation("cuda executor: end_while without begin_while");
  device_scope d(device_);
  cudaGraph_t body = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &body);
  stream_ = main_stream_;
  main_stream_ = nullptr;
  SPECGRAPH_CUDA_TRY(e);
}

namespace {

const char* node_type_name(cudaGraphNodeType t) {
  switch (t) {
    case cudaGraphNodeTypeEventRecord: return "an event record node";
    case cudaGraphNodeTypeWaitEvent: return "an event wait node";
    case cudaGraphNodeTypeHost: return "a host function node";
    case cudaGraphNodeTypeMemAlloc: return "a memory allocation node";
    case cudaGraphNodeTypeMemFree: return "a memory free node";
    case cudaGraphNodeTypeExtSemaphoreSignal: return "an external semaphore signal node";
    case cudaGraphNodeTypeExtSemaphoreWait: return "an external semaphore wait node";
    default: return "a node type a conditional body does not allow";
  }
}

// record_graph adds `g` as a child graph node. CUDA refuses a graph holding a conditional node
// (at any depth) as a child graph, and allows only kernels, memsets, copies, empty, child graph
// and conditional nodes in a conditional body; refusing here names the node instead of failing
// in cudaGraphAddNode or at instantiate.
void check_recordable(cudaGraph_t g, bool in_conditional_body) {
  std::size_t n = 0;
  SPECGRAPH_CUDA_TRY(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n != 0) SPECGRAPH_CUDA_TRY(cudaGraphGetNodes(g, nodes.data(), &n));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t = cudaGraphNodeTypeEmpty;
    SPECGRAPH_CUDA_TRY(cudaGraphNodeGetType(node, &t));
    switch (t) {
      case cudaGraphNodeTypeKernel:
      case cudaGraphNodeTypeMemcpy:
      case cudaGraphNodeTypeMemset:
      case cudaGraphNodeTypeEmpty: break;
      case cudaGraphNodeTypeConditional:
        throw capture_violation(
            "cuda executor: record_graph: a graph with a conditional node cannot be recorded "
            "(it would become a child graph, and CUDA refuses conditional nodes in child "
            "graphs); record its work with begin_while instead");
      case cudaGraphNodeTypeGraph: {
        cudaGraph_t child = nullptr;
        SPECGRAPH_CUDA_TRY(cudaGraphChildGraphNodeGetGraph(node, &child));
        check_recordable(child, in_conditional_body);
        break;
      }
      default:
        if (!in_conditional_body) break;
        throw capture_violation(std::string("cuda executor: record_graph: a graph with ") +
                                node_type_name(t) +
                                " is not allowed inside a conditional body (CUDA allows only "
                                "kernels, memsets, device copies, child graphs and conditional "
                                "nodes there)");
    }
  }
}

}  // namespace

void cuda_executor::record_graph(const graph& g) {
  device_scope d(device_);
  if (!capturing()) throw capture_violation("cuda executor: record_graph outside capture");
  const cudaGraph_t child = as_cuda(g).get();
  check_recordable(child, main_stream_ != nullptr);
  // One child graph node (CUDA clones `child` into it) after everything captured so far; the
  // capture continues after it. Works in the engine's capture of this stream as in our own.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t captured = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  std::size_t n = 0;
  SPECGRAPH_CUDA_TRY(
      cudaStreamGetCaptureInfo(stream_, &status, nullptr, &captured, &deps, &edges, &n));
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeGraph;
  params.graph.graph = child;
  cudaGraphNode_t node = nullptr;
  SPECGRAPH_CUDA_TRY(cudaGraphAddNode(&node, captured, deps, edges, n, &params));
  SPECGRAPH_CUDA_TRY(cudaStreamUpdateCaptureDependencies(stream_, &node, nullptr, 1,
                                                         cudaStreamSetCaptureDependencies));
}

bool cuda_executor::capturing() const noexcept {
  if (own_capture_) return true;
  // Someone else (the engine's torch.cuda.graph, its own cudaStreamBeginCapture) may be
  // capturing this stream; what capture forbids is forbidden then too.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

std::unique_ptr<graph_exec> cuda_executor::instantiate(const graph& g) {
  device_scope d(device_);
  forbid_during_capture("instantiate");
  cudaGraphInstantiateParams params{};
  params.flags = cudaGraphInstantiateFlagUpload;
  params.uploadStream = stream_;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiateWithParams(&exec, as_cuda(g).get(), &params);
  if (e != cudaSuccess || params.result_out != cudaGraphInstantiateSuccess) {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    (void)cudaGetLastError();  // ours: do not leave it for the next launch to be blamed for
    throw cuda_error(static_cast<int>(e),
                     detail::where(__FILE__, __LINE__) +
                         ": cudaGraphInstantiateWithParams failed: " + cudaGetErrorName(e) +
                         ", result " + std::to_string(static_cast<int>(params.result_out)));
  }
  return std::make_unique<cuda_graph_exec>(exec);
}

bool cuda_executor::update(graph_exec& exec, const graph& g) {
  device_scope d(device_);
  forbid_during_capture("update");
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t e =
      cudaGraphExecUpdate(static_cast<cuda_graph_exec&>(exec).get(), as_cuda(g).get(), &info);
  if (e == cudaErrorGraphExecUpdateFailure) {
    (void)cudaGetLastError();
    return false;
  }
  SPECGRAPH_CUDA_TRY(e);
  return true;
}

void cuda_executor::upload(graph_exec& exec) {
  device_scope d(device_);
  forbid_during_capture("upload");
  SPECGRAPH_CUDA_TRY(cudaGraphUpload(static_cast<cuda_graph_exec&>(exec).get(), stream_));
}

void cuda_executor::launch_graph(graph_exec& exec) {
  device_scope d(device_);
  if (capturing()) throw capture_violation("cuda executor: graph launch during capture");
  SPECGRAPH_CUDA_TRY(cudaGraphLaunch(static_cast<cuda_graph_exec&>(exec).get(), stream_));
  ++counters_.graph_launches;
}

const cuda_graph& cuda_executor::as_cuda(const graph& g) {
  const auto* c = dynamic_cast<const cuda_graph*>(&g);
  if (c == nullptr) throw error("cuda executor: graph was not captured by a cuda executor");
  return *c;
}

void cuda_executor::free_deferred() noexcept {
  for (void* p : deferred_frees_) {
    if (cudaFree(p) == cudaSuccess) ++counters_.frees;
  }
  deferred_frees_.clear();
}

}  // namespace specgraph::detail

namespace specgraph {

std::unique_ptr<graph> import_cuda_graph(void* cuda_graph) {
  SPECGRAPH_EXPECTS(cuda_graph != nullptr, "cuda_graph", "null: expected a cudaGraph_t");
  cudaGraph_t copy = nullptr;
  const cudaError_t e = cudaGraphClone(&copy, static_cast<cudaGraph_t>(cuda_graph));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // ours, not sticky: nothing ran
    throw invalid_argument("cuda_graph",
                           std::string("cuda_graph: cannot be copied (cudaGraphClone: ") +
                               cudaGetErrorName(e) +
                               "); a graph holding allocation or conditional nodes cannot be");
  }
  return std::make_unique<detail::cuda_graph>(copy);
}

}  // namespace specgraph
