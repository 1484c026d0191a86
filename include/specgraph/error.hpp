// Error types. Every error carries a message that names the failing value and the limit.
// invalid_argument also names the field and records where the failing check was called from
// (location()); cuda_error messages start with the file:line of the CUDA call that failed.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace specgraph {

// Base of every exception specgraph throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller-supplied value is out of its allowed range. `field()` names the parameter (e.g.
// "page_size", "last_page_len[3]"), so an engine can map the error back to its own tensor;
// `location()` is the "file:line" of the specgraph function that checked it. The message is
// "<field>: <value> <why> <limit>" and never spans lines.
class invalid_argument : public error {
 public:
  invalid_argument(std::string field, const std::string& message, std::string location = {})
      : error(message), field_(std::move(field)), location_(std::move(location)) {}
  const std::string& field() const noexcept { return field_; }
  const std::string& location() const noexcept { return location_; }

 private:
  std::string field_;
  std::string location_;
};

// A kernel recorded a guard violation (a store that would have left its buffer, a layout
// violation, or an out-of-range input value in device memory), read back in checked mode.
class guard_violation : public error {
 public:
  using error::error;
};

// Something that CUDA stream capture forbids (allocating, freeing, synchronising, reading device
// memory, copying from host memory) was attempted while capturing.
class capture_violation : public error {
 public:
  using error::error;
};

// A CUDA runtime call failed. `code()` is the cudaError_t value. After such an error outside
// capture bookkeeping, draft_runtime refuses further work.
class cuda_error : public error {
 public:
  cuda_error(int code, const std::string& message) : error(message), code_(code) {}
  int code() const noexcept { return code_; }
  // True for the stream-capture error codes (900-908: unsupported during capture, invalidated,
  // merge, unmatched, unjoined, isolation, implicit, captured event, wrong thread): they end a
  // capture but leave the CUDA context usable.
  bool capture_related() const noexcept { return code_ >= 900 && code_ <= 908; }

 private:
  int code_;
};

// The requested executor is not available on this machine (e.g. "cuda" without a GPU).
class unavailable : public error {
 public:
  using error::error;
};

namespace detail {
[[noreturn]] void throw_invalid(const char* file, int line, const std::string& field,
                                const std::string& what);
// "dir/file.cpp:123", the path shortened to the source tree's top folders.
std::string where(const char* file, int line);
}  // namespace detail

// SPECGRAPH_EXPECTS(cond, field, message-expression): throws specgraph::invalid_argument naming
// the field, with this line as its location(), when cond is false. The message expression is
// only evaluated on failure.
#define SPECGRAPH_EXPECTS(cond, field, msg)                                              \
  do {                                                                                   \
    if (!(cond)) ::specgraph::detail::throw_invalid(__FILE__, __LINE__, (field), (msg)); \
  } while (0)

}  // namespace specgraph
