// An executor that forwards every call to another one it owns. Derive from it and override what
// you need to instrument an executor or inject faults (the tests inject a CUDA error; the
// benchmarks empty graph launches) without restating the whole interface. Each member has the
// stream, synchronisation and capture rules of the executor it forwards to. counters() are this
// executor's own (zero unless a subclass counts); the inner executor keeps its own.
#pragma once

#include <memory>
#include <utility>

#include "specgraph/executor.hpp"

namespace specgraph {

class forwarding_executor : public executor {
 public:
  explicit forwarding_executor(std::unique_ptr<executor> inner) : inner_(std::move(inner)) {}

  const char* name() const noexcept override { return inner_->name(); }
  device_stream stream() const noexcept override { return inner_->stream(); }
  void* allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  std::size_t memory_capacity() override { return inner_->memory_capacity(); }
  void deallocate(void* p) override { inner_->deallocate(p); }
  void release(void* p) noexcept override { inner_->release(p); }
  void* allocate_pinned(std::size_t bytes) override { return inner_->allocate_pinned(bytes); }
  void deallocate_pinned(void* p) noexcept override { inner_->deallocate_pinned(p); }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_to_device(dst, src, bytes);
  }
  void copy_from_pinned(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_from_pinned(dst, src, bytes);
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_on_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    inner_->copy_to_host(dst, src, bytes);
  }
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes) override {
    inner_->fill_bytes(dst, value, bytes);
  }
  void launch(const kernel_launch& k) override { inner_->launch(k); }
  device_event create_event() override { return inner_->create_event(); }
  void destroy_event(device_event e) noexcept override { inner_->destroy_event(e); }
  using executor::record_event;
  using executor::wait_event;
  void record_event(device_event e, event_scope scope) override { inner_->record_event(e, scope); }
  void wait_event(device_event e, event_scope scope) override { inner_->wait_event(e, scope); }
  bool event_complete(device_event e) override { return inner_->event_complete(e); }
  void synchronize_event(device_event e) override { inner_->synchronize_event(e); }
  device_timing time_device(const std::function<void()>& enqueue) override {
    return inner_->time_device(enqueue);
  }
  void synchronize() override { inner_->synchronize(); }
  void begin_capture() override { inner_->begin_capture(); }
  void begin_private_capture() override { inner_->begin_private_capture(); }
  std::unique_ptr<graph> end_capture() override { return inner_->end_capture(); }
  void abort_capture() noexcept override { inner_->abort_capture(); }
  bool capturing() const noexcept override { return inner_->capturing(); }
  conditional_handle begin_while(bool initial) override { return inner_->begin_while(initial); }
  void end_while() override { inner_->end_while(); }
  void record_graph(const graph& g) override { inner_->record_graph(g); }
  std::unique_ptr<graph_exec> instantiate(const graph& g) override {
    return inner_->instantiate(g);
  }
  bool update(graph_exec& exec, const graph& g) override { return inner_->update(exec, g); }
  void upload(graph_exec& exec) override { inner_->upload(exec); }
  void launch_graph(graph_exec& exec) override { inner_->launch_graph(exec); }

 protected:
  executor& inner() noexcept { return *inner_; }

 private:
  std::unique_ptr<executor> inner_;
};

}  // namespace specgraph
