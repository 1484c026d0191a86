// Shared pieces of the benchmark programs.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "specgraph/executor.hpp"

namespace specgraph::bench {

// First thing in main(), before any CUDA call: CUDA loads modules lazily by default, and a
// kernel's first launch behind time_device's spinning kernel could then wait until the spin
// times out. Eager loading (unless the caller chose otherwise) loads every kernel at start.
inline void load_modules_eagerly() {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);  // 0: a value already set is kept
}

// Wraps a benchmark body so that an exception (a CUDA error, a timed-out time_device) ends that
// benchmark with SkipWithError, named in the output and the JSON, instead of std::terminate: the
// program goes on to the next benchmark and always writes its JSON.
template <class F>
auto guarded(F body) {
  return [body](benchmark::State& state) {
    try {
      body(state);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    } catch (...) {
      state.SkipWithError("unknown exception");
    }
  };
}

// The executors this machine can run: always "host", plus "cuda" when a device is usable.
inline std::vector<std::string> available_executors() {
  std::vector<std::string> out{"host"};
  if (cuda_available()) out.push_back("cuda");
  return out;
}

// One executor per kind for the whole program (a CUDA context is expensive to create).
inline executor& shared_executor(const std::string& kind) {
  static std::unique_ptr<executor> host, cuda;
  std::unique_ptr<executor>& slot = kind == "cuda" ? cuda : host;
  if (!slot) slot = make_executor(kind);
  return *slot;
}

// Device time of the work `enqueue` puts on the executor's stream, in seconds: on CUDA the work
// is queued behind a blocking kernel and timed with events, so host submission is excluded (it
// is accumulated separately, for the host_submit_us counter); wall clock on the host executor.
class device_clock {
 public:
  double operator()(executor& ex, const std::function<void()>& enqueue) {
    const device_timing t = ex.time_device(enqueue);
    submit_seconds_ += t.submit_seconds;
    if (samples_ == 0 || t.device_seconds < min_seconds_) min_seconds_ = t.device_seconds;
    ++samples_;
    return t.device_seconds;
  }
  // Adds the counters that say which time is which: the benchmark's (manual) time is device
  // time; host_submit_us is the mean host time to enqueue the same work; device_us_min the
  // fastest single sample (on a shared machine the least disturbed one: preemption only ever
  // adds time, so the minimum compares builds where the mean drifts with the load).
  void report(benchmark::State& state) const {
    state.counters["host_submit_us"] =
        samples_ > 0 ? 1e6 * submit_seconds_ / static_cast<double>(samples_) : 0.0;
    state.counters["device_us_min"] = 1e6 * min_seconds_;
    state.SetLabel("time: device (host submission excluded); host_submit_us: enqueueing");
  }

 private:
  double submit_seconds_ = 0;
  double min_seconds_ = 0;
  std::int64_t samples_ = 0;
};

}  // namespace specgraph::bench
