// Error types. Every error carries a message that names the failing value and the limit; errors
// raised by specgraph's own checks also carry the source location of the check.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace specgraph {

// Base of every exception specgraph throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller-supplied value is out of its allowed range. `field()` names the parameter (e.g.
// "page_size", "last_page_len[3]"), so an engine can map the error back to its own tensor.
class invalid_argument : public error {
 public:
  invalid_argument(std::string field, const std::string& message)
      : error(message), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

// A kernel recorded a guard violation (a store that would have left its buffer, or a layout
// violation) in checked mode.
class guard_violation : public error {
 public:
  using error::error;
};

// Something that CUDA stream capture forbids (allocating, synchronising, reading device memory,
// changing a launch shape) was attempted while capturing or between capture and replay.
class capture_violation : public error {
 public:
  using error::error;
};

// A CUDA runtime call failed. After such an error the runtime refuses further replays.
class cuda_error : public error {
 public:
  cuda_error(int code, const std::string& message) : error(message), code_(code) {}
  int code() const noexcept { return code_; }

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
std::string where(const char* file, int line);
}  // namespace detail

// SPECGRAPH_EXPECTS(cond, field, message-expression): throws specgraph::invalid_argument naming
// the field when cond is false. The message expression is only evaluated on failure.
#define SPECGRAPH_EXPECTS(cond, field, msg)                                              \
  do {                                                                                   \
    if (!(cond)) ::specgraph::detail::throw_invalid(__FILE__, __LINE__, (field), (msg)); \
  } while (0)

}  // namespace specgraph
