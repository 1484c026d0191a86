// The cuda executor (see executor.hpp). Compiled only when SPECGRAPH_ENABLE_CUDA is on; the
// runtime links cudart only (never libcuda directly), so binaries start on machines without a
// driver and report the cuda executor as unavailable.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>

#include "cuda_check.hpp"
#include "cuda_handles.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"

namespace specgraph {
namespace {

struct cuda_probe {
  bool available = false;
  std::string reason;
};

const cuda_probe& probe() {
  static const cuda_probe p = [] {
    cuda_probe r;
    int count = 0;  // left untouched by a failing cudaGetDeviceCount
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      r.reason = cudaGetErrorName(e);
      (void)cudaGetLastError();
    } else if (count <= 0) {
      r.reason = "no CUDA device";
    } else {
      r.available = true;
    }
    return r;
  }();
  return p;
}

class cuda_graph final : public graph {
 public:
  explicit cuda_graph(cudaGraph_t g) : g_(g) {}
  cudaGraph_t get() const noexcept { return g_.get(); }
  std::size_t node_count() const override {
    std::size_t n = 0;
    SPECGRAPH_CUDA_TRY(cudaGraphGetNodes(g_.get(), nullptr, &n));
    return n;
  }
  void write_dot(const std::string& path) const override {
    SPECGRAPH_CUDA_TRY(
        cudaGraphDebugDotPrint(g_.get(), path.c_str(), cudaGraphDebugDotFlagsVerbose));
  }

 private:
  detail::unique_graph g_;
};

// Only cuda_executor::instantiate creates one.
class cuda_graph_exec final : public graph_exec {
 public:
  explicit cuda_graph_exec(cudaGraphExec_t e) : e_(e) {}
  cudaGraphExec_t get() const noexcept { return e_.get(); }

 private:
  detail::unique_graph_exec e_;
};

class cuda_executor final : public executor {
 public:
  cuda_executor() = default;
  ~cuda_executor() override {
    if (capturing_) abort_capture();
  }

  const char* name() const noexcept override { return "cuda"; }
  device_stream stream() const noexcept override { return stream_.get(); }

  void* allocate(std::size_t bytes) override {
    forbid_during_capture("allocate");
    void* p = nullptr;
    checked(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    ++counters_.allocations;
    return p;
  }
  void deallocate(void* p) noexcept override { (void)cudaFree(p); }

  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    forbid_during_capture("copy_to_device (a copy from host memory)");
    // From pageable memory the call returns once the source is staged, so it may be reused.
    checked(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()),
            "cudaMemcpyAsync(HostToDevice)");
    ++counters_.copies_to_device;
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    checked(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()),
            "cudaMemcpyAsync(DeviceToDevice)");
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    forbid_during_capture("copy_to_host (a host read of device memory)");
    checked(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()),
            "cudaMemcpyAsync(DeviceToHost)");
    checked(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize");
    ++counters_.copies_to_host;
  }
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) override {
    checked(cudaMemsetAsync(dst, value, bytes, stream_.get()), "cudaMemsetAsync");
  }

  void launch(const kernel_launch& k) override {
    if (k.cuda_run == nullptr) {
      throw error(std::string("kernel '") + (k.name ? k.name : "?") +
                  "' has no CUDA implementation");
    }
    k.cuda_run(k.params, k.rows, stream_.get());
    checked(cudaGetLastError(), k.name);
    if (!capturing_) ++counters_.kernel_launches;
  }

  double time_device(const std::function<void()>& enqueue) override {
    forbid_during_capture("time_device");
    checked(cudaEventRecord(start_.get(), stream_.get()), "cudaEventRecord");
    enqueue();
    checked(cudaEventRecord(stop_.get(), stream_.get()), "cudaEventRecord");
    checked(cudaEventSynchronize(stop_.get()), "cudaEventSynchronize");
    float ms = 0;
    checked(cudaEventElapsedTime(&ms, start_.get(), stop_.get()), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }

  void synchronize() override {
    forbid_during_capture("synchronize");
    checked(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize");
    ++counters_.synchronizations;
  }

  void begin_capture() override {
    if (capturing_) throw capture_violation("cuda executor: begin_capture while already capturing");
    // Thread-local mode: other threads of the engine may keep allocating without invalidating
    // this capture.
    checked(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal),
            "cudaStreamBeginCapture");
    capturing_ = true;
  }
  std::unique_ptr<graph> end_capture() override {
    if (!capturing_) throw capture_violation("cuda executor: end_capture without begin_capture");
    capturing_ = false;
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_.get(), &g);
    if (e != cudaSuccess) {
      if (g != nullptr) (void)cudaGraphDestroy(g);
      (void)cudaGetLastError();  // capture errors are not sticky; the stream stays usable
      detail::throw_cuda(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    return std::make_unique<cuda_graph>(g);
  }
  void abort_capture() noexcept override {
    if (!capturing_) return;
    capturing_ = false;
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(stream_.get(), &g);  // always end, even after invalidation
    if (g != nullptr) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
  }
  bool capturing() const noexcept override { return capturing_; }

  std::unique_ptr<graph_exec> instantiate(const graph& g) override {
    forbid_during_capture("instantiate");
    cudaGraphInstantiateParams params{};
    params.flags = cudaGraphInstantiateFlagUpload;
    params.uploadStream = stream_.get();
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiateWithParams(&exec, as_cuda(g).get(), &params);
    if (e != cudaSuccess || params.result_out != cudaGraphInstantiateSuccess) {
      if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
      throw cuda_error(static_cast<int>(e),
                       std::string("cudaGraphInstantiateWithParams failed: ") +
                           cudaGetErrorName(e) + ", result " +
                           std::to_string(static_cast<int>(params.result_out)));
    }
    return std::make_unique<cuda_graph_exec>(exec);
  }
  bool update(graph_exec& exec, const graph& g) override {
    forbid_during_capture("update");
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t e =
        cudaGraphExecUpdate(static_cast<cuda_graph_exec&>(exec).get(), as_cuda(g).get(), &info);
    if (e == cudaErrorGraphExecUpdateFailure) {
      (void)cudaGetLastError();
      return false;
    }
    checked(e, "cudaGraphExecUpdate");
    return true;
  }
  void upload(graph_exec& exec) override {
    forbid_during_capture("upload");
    checked(cudaGraphUpload(static_cast<cuda_graph_exec&>(exec).get(), stream_.get()),
            "cudaGraphUpload");
  }
  void launch_graph(graph_exec& exec) override {
    if (capturing_) throw capture_violation("cuda executor: graph launch during capture");
    checked(cudaGraphLaunch(static_cast<cuda_graph_exec&>(exec).get(), stream_.get()),
            "cudaGraphLaunch");
    ++counters_.graph_launches;
  }

 private:
  static const cuda_graph& as_cuda(const graph& g) {
    const auto* c = dynamic_cast<const cuda_graph*>(&g);
    if (c == nullptr) throw error("cuda executor: graph was not captured by a cuda executor");
    return *c;
  }
  void forbid_during_capture(const char* what) const {
    if (capturing_) {
      throw capture_violation(std::string("cuda executor: ") + what +
                              " is not allowed during graph capture");
    }
  }
  void checked(cudaError_t e, const char* call) {
    if (e != cudaSuccess) detail::throw_cuda(e, call, __FILE__, __LINE__);
  }

  detail::unique_stream stream_ = detail::make_stream();
  detail::unique_event start_ = detail::make_event(), stop_ = detail::make_event();  // time_device
  bool capturing_ = false;
};

}  // namespace

bool cuda_available() noexcept {
  try {
    return probe().available;
  } catch (...) {
    return false;
  }
}

std::string cuda_unavailable_reason() {
  return probe().available ? "" : probe().reason;
}

std::unique_ptr<executor> make_cuda_executor() {
  if (!probe().available) {
    throw unavailable("cuda executor unavailable: " + probe().reason);
  }
  return std::make_unique<cuda_executor>();
}

}  // namespace specgraph
