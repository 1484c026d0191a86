// A typed buffer in executor memory with host upload and download, shared by the tests and the
// benchmarks (no GoogleTest here). Test code, not the library's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "specgraph/executor.hpp"

namespace specgraph::testing {

// A typed buffer in executor memory with host upload/download.
template <class T>
class dvec {
 public:
  dvec(executor& ex, const std::vector<T>& host)
      : ex_(&ex), n_(host.size()), buf_(ex, std::max<std::size_t>(1, host.size()) * sizeof(T)) {
    if (n_ > 0) ex.copy_to_device(buf_.data(), host.data(), n_ * sizeof(T));
  }
  dvec(executor& ex, std::size_t n, T fill) : dvec(ex, std::vector<T>(n, fill)) {}
  T* data() const { return buf_.as<T>(); }
  std::size_t size() const { return n_; }
  std::vector<T> download() const {
    std::vector<T> out(n_);
    if (n_ > 0) ex_->copy_to_host(out.data(), buf_.data(), n_ * sizeof(T));
    return out;
  }

 private:
  executor* ex_;
  std::size_t n_;
  device_buffer buf_;
};

}  // namespace specgraph::testing
