// `specgraph run --rounds-per-launch N` (docs/main-job.md, "The round loop"): the round loop
// (tools/sim/round_loop.hpp) from the run's flags, its report as text and JSON.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "specgraph/executor.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::tools {

// The round loop's own flags: --rounds-per-launch N (> 0: the loop runs), --max-new-tokens
// (every request's length budget; 0: none) and --short-ring (sim::loop_options::short_ring).
struct loop_flags {
  std::int32_t rounds_per_launch = 0;
  std::int32_t max_new_tokens = 0;
  std::int32_t short_ring = 0;
};

// What is wrong with the round loop's flags, as one line naming the flag, or "": a loop flag
// without --rounds-per-launch, the first of the run's flags the loop does not take (format csr
// / both, --depth, --device-steps, --no-extend, --verify-tokens 0, --slot-stride, --checked,
// --dump-graphs), --rounds-per-launch past --rounds, --short-ring past --rounds-per-launch.
// `depth` and `dump_graphs`: whether those flags were given.
std::string loop_flags_error(const sim::sim_options& o, const loop_flags& f, bool depth,
                             bool dump_graphs);

// The round loop's options from the run's (batch = max_batch, the shape, the rounds, the seed,
// the verification) and its own; throws sim::verification_error, guard_violation or
// invalid_argument as run_round_loop does. Writes the header first (flushed), then the report;
// `json` (may be null) gets the JSON form with the version and commit.
void run_loop_command(executor& ex, const sim::sim_options& o, const loop_flags& flags,
                      std::ostream& out, std::ostream* json);

}  // namespace specgraph::tools
