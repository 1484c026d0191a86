// What `specgraph run` prints: the configuration header (before anything runs), the report
// (plan, capture, per-step table, rounds, verification) and the JSON form of both.
#pragma once

#include <iosfwd>
#include <string>

#include "specgraph/plan.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::tools {

// The build's version (CMake's project version) and the git commit it was built from
// ("unknown" outside a git checkout; "-dirty" appended when tracked files were modified).
const char* build_version() noexcept;
const char* build_commit() noexcept;

// The header line, ending in '\n': executor, shape of the configuration, the attention format
// and the mode (depth, graph mode, checked), so a pasted output says how it was made.
std::string run_header(const sim::sim_options& o, const std::string& executor);

// The plan line, the CSR line (plans holding CSR) and the capture line (with the arena's bytes),
// printed once the graphs are captured.
void write_capture_text(std::ostream& out, const plan& pl, const capture_report& cap);

// The report of the rounds: one row per step that ran (a step no round reached, e.g. under
// --depth, has no row), the rounds, the verification (per path with --format both, then the
// line comparing the two paths).
void write_rounds_text(std::ostream& out, const sim::sim_options& o, const sim::run_report& r);

// The same as one JSON object (with "version" and "commit"), ending in '\n'.
void write_run_json(std::ostream& j, const sim::sim_options& o, const plan& pl,
                    const sim::run_report& r);

}  // namespace specgraph::tools
