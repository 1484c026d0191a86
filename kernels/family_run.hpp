// The three entries every kernel family of the round after verify offers (acceptance, the
// commit, the next round: docs/accept.md section 7), written once: each family supplies its
// checks and two bodies (its passes on the calling thread over host memory, and its passes
// enqueued on an executor), and gets run_<family> with every check made exactly once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specgraph/executor.hpp"
#include "specgraph/guard.hpp"

namespace specgraph::kernels {

// run_<family>: checks p once (validate; with host_memory validate_contents_host, which scans
// every content, before anything is written), resets guard_count guard words on ex's stream,
// then runs host_body(p) on the calling thread (host memory; synchronous) or launch_body(ex, p)
// (asynchronous on ex's stream, capture-safe). The bodies do no checks of their own.
template <class P, class Validate, class ValidateHost, class Host, class Launch>
void run_family(executor& ex, const P& p, bool host_memory, guard_word* guard,
                std::int32_t guard_count, Validate&& validate, ValidateHost&& validate_host,
                Host&& host_body, Launch&& launch_body) {
  if (host_memory) {
    validate_host(p);  // every content; nothing written
  } else {
    validate(p);
  }
  // The guard words start clean each run.
  ex.fill_bytes(guard, 0, sizeof(guard_word) * static_cast<std::size_t>(guard_count));
  if (host_memory) {
    host_body(p);
  } else {
    launch_body(ex, p);
  }
}

}  // namespace specgraph::kernels
