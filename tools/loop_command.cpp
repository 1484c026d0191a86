#include "tools/loop_command.hpp"

#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

#include "tools/json.hpp"
#include "tools/run_report.hpp"
#include "tools/sim/round_loop.hpp"

namespace specgraph::tools {
namespace {

double per(std::int64_t n, std::int64_t rounds) {
  return rounds > 0 ? static_cast<double>(n) / static_cast<double>(rounds) : 0.0;
}

void mode_row(std::ostream& out, const sim::loop_mode_stats& s) {
  // Every copy back synchronises the stream (executor::copy_to_host), as synchronize() does.
  const std::int64_t syncs = s.synchronizations + s.copies_to_host;
  out << std::left << std::setw(12) << s.mode << std::right << std::setw(7) << s.rounds
      << std::fixed << std::setprecision(2) << std::setw(15) << per(s.graph_launches, s.rounds)
      << std::setw(16) << per(s.kernel_launches, s.rounds) << std::setw(13) << per(syncs, s.rounds)
      << std::setw(13) << per(s.copies_to_device, s.rounds) << std::setprecision(1) << std::setw(10)
      << 1e6 * s.seconds / static_cast<double>(std::max<std::int64_t>(1, s.rounds)) << std::setw(10)
      << 1e6 * s.host_seconds / static_cast<double>(std::max<std::int64_t>(1, s.rounds))
      << std::setw(12) << s.host_steps << std::setw(10) << s.finished << std::setprecision(2)
      << std::setw(15) << per(s.accepted + s.row_rounds, s.row_rounds) << '\n';
}

void mode_json(std::ostream& j, const sim::loop_mode_stats& s) {
  const double rounds = static_cast<double>(std::max<std::int64_t>(1, s.rounds));
  j << "{\"rounds\": " << s.rounds << ", \"graph_launches\": " << s.graph_launches
    << ", \"kernel_launches\": " << s.kernel_launches
    << ", \"synchronizations\": " << s.synchronizations
    << ", \"host_syncs\": " << s.synchronizations + s.copies_to_host
    << ", \"copies_to_host\": " << s.copies_to_host
    << ", \"copies_to_device\": " << s.copies_to_device << ", \"wall_seconds\": " << s.seconds
    << ", \"host_seconds\": " << s.host_seconds
    << ", \"wall_us_per_round\": " << 1e6 * s.seconds / rounds
    << ", \"host_us_per_round\": " << 1e6 * s.host_seconds / rounds
    << ", \"host_steps\": " << s.host_steps << ", \"finished\": " << s.finished
    << ", \"finished_by_budget\": " << s.finished_by_budget << ", \"replaced\": " << s.replaced
    << ", \"accepted\": " << s.accepted << ", \"emitted\": " << s.emitted
    << ", \"row_rounds\": " << s.row_rounds << ", \"stalled_rounds\": " << s.stalled_rounds
    << ", \"reruns\": " << s.reruns << "}";
}

}  // namespace

std::string loop_flags_error(const sim::sim_options& o, const loop_flags& f, bool depth,
                             bool dump_graphs) {
  if (f.rounds_per_launch == 0) {
    if (f.max_new_tokens > 0)
      return "--max-new-tokens: only the round loop has a budget; add --rounds-per-launch";
    if (f.short_ring > 0)
      return "--short-ring: only the round loop has a ring; add --rounds-per-launch";
    return "";
  }
  const std::pair<bool, const char*> off[] = {{o.format != metadata_formats::fa3, "--format"},
                                              {depth, "--depth"},
                                              {o.device_steps, "--device-steps"},
                                              {!o.draft_extend, "--no-extend"},
                                              {o.verify_tokens == 0, "--verify-tokens 0"},
                                              {o.slot_stride != 0, "--slot-stride"},
                                              {o.checked, "--checked"},
                                              {dump_graphs, "--dump-graphs"}};
  for (const auto& [set, name] : off) {
    if (set) {
      return std::string(
                 "--rounds-per-launch: runs fa3 whole rounds of every step with draft "
                 "extend; drop ") +
             name;
    }
  }
  if (f.rounds_per_launch > o.rounds) {
    return "--rounds-per-launch: " + std::to_string(f.rounds_per_launch) + " exceeds --rounds " +
           std::to_string(o.rounds);
  }
  if (f.short_ring > f.rounds_per_launch) {
    return "--short-ring: " + std::to_string(f.short_ring) + " exceeds --rounds-per-launch " +
           std::to_string(f.rounds_per_launch) + " (the ring holds one host step's rounds)";
  }
  return "";
}

void run_loop_command(executor& ex, const sim::sim_options& o, const loop_flags& flags,
                      std::ostream& out, std::ostream* json) {
  const std::int32_t rounds_per_launch = flags.rounds_per_launch;
  sim::loop_options l;
  l.batch = o.max_batch;
  l.topk = o.topk;
  l.num_steps = o.num_steps;
  l.verify_tokens = o.verify_tokens;
  l.page_size = o.page_size;
  l.heads = o.heads;
  l.head_dim = o.head_dim;
  l.min_context = o.min_context;
  l.max_context = o.max_context;
  l.rounds = o.rounds;
  l.rounds_per_launch = rounds_per_launch;
  l.seed = o.seed;
  l.verify = o.verify == sim::sim_options::verify_mode::all ? sim::loop_options::verify_mode::all
             : o.verify == sim::sim_options::verify_mode::sample
                 ? sim::loop_options::verify_mode::sample
                 : sim::loop_options::verify_mode::none;
  l.verify_every = o.verify_every;
  l.tolerance = o.tolerance;
  l.max_new_tokens = flags.max_new_tokens;
  l.short_ring = flags.short_ring;
  out << "round loop: executor " << ex.name() << ", batch " << l.batch << ", topk " << l.topk
      << ", " << l.num_steps << " steps, D " << l.verify_tokens << ", page size " << l.page_size
      << ", " << l.heads << " heads x " << l.head_dim << ", " << l.rounds << " rounds, "
      << rounds_per_launch << " per launch, "
      << (l.max_new_tokens > 0 ? "budget " + std::to_string(l.max_new_tokens) + " tokens"
                               : std::string("no budget"))
      << ", seed " << l.seed << '\n'
      << std::flush;
  const sim::loop_report r = sim::run_round_loop(ex, l);
  out << "plan: bucket " << r.bucket << ", arena " << r.arena_bytes
      << " bytes (draft, verify, extend and round sections)\n";
  out << "mode         rounds  graph launches  kernel launches   host syncs   copies in   wall us "
         "  host us  host steps  finished  accept length\n";
  out << std::left << std::setw(12) << "" << std::right << std::setw(7) << "" << std::setw(15)
      << "/round" << std::setw(16) << "/round" << std::setw(13) << "/round" << std::setw(13)
      << "/round" << std::setw(10) << "/round" << std::setw(10) << "/round" << '\n';
  mode_row(out, r.host);
  mode_row(out, r.device);
  std::ostringstream err;
  err << std::scientific << std::setprecision(2) << r.max_relative_error;
  std::ostringstream tol;
  tol << std::scientific << std::setprecision(2) << l.tolerance;
  out << "verification: " << r.verified_rounds << " rounds (both modes), " << r.verified_outputs
      << " draft attention outputs against a float64 reference by position, max relative error "
      << err.str() << " (tolerance " << tol.str()
      << "): " << (r.verified_rounds > 0 ? "PASSED" : "NONE") << '\n';
  const bool budget = l.max_new_tokens > 0;
  const sim::loop_mode_stats& d = r.device;
  out << "emitted: " << d.emitted << " tokens to the clients (" << std::fixed
      << std::setprecision(2) << per(d.emitted, d.row_rounds)
      << " per live request per round); finished " << d.finished;
  if (budget) out << ", " << d.finished_by_budget << " of them by the budget";
  out << '\n';
  if (l.short_ring > 0) {
    out << "short ring: " << l.short_ring << " round" << (l.short_ring == 1 ? "" : "s")
        << "' pages per host step; " << d.stalled_rounds << " rounds ran behind a stall, "
        << d.reruns << " next rounds rerun after a refill (both modes alike)\n";
  }
  out << "device loop vs host-driven: " << r.compared_rounds
      << " rounds of accepted paths, lengths, bonus tokens, finished flags, emitted lengths"
      << (budget ? ", budgets" : "") << " and draft outputs, then the final seq_len, allocated_len"
      << (budget ? ", budgets" : "") << ", ring head and req_to_token (" << r.compared_cells
      << " cells): " << (r.identical ? "IDENTICAL" : "DIFFERENT") << '\n';
  if (json != nullptr) {
    std::ostream& j = *json;
    j << "{\"version\": " << quote(build_version()) << ", \"commit\": " << quote(build_commit())
      << ", \"mode\": \"round_loop\", \"executor\": " << quote(ex.name())
      << ", \"config\": {\"batch\": " << l.batch << ", \"bucket\": " << r.bucket
      << ", \"topk\": " << l.topk << ", \"num_steps\": " << l.num_steps
      << ", \"verify_tokens\": " << l.verify_tokens << ", \"page_size\": " << l.page_size
      << ", \"heads\": " << l.heads << ", \"head_dim\": " << l.head_dim
      << ", \"rounds\": " << l.rounds << ", \"rounds_per_launch\": " << rounds_per_launch
      << ", \"max_new_tokens\": " << l.max_new_tokens << ", \"short_ring\": " << l.short_ring
      << ", \"seed\": " << l.seed << "}, \"arena_bytes\": " << r.arena_bytes
      << ", \"host_driven\": ";
    mode_json(j, r.host);
    j << ", \"device_loop\": ";
    mode_json(j, r.device);
    j << ", \"verified_rounds\": " << r.verified_rounds
      << ", \"verified_outputs\": " << r.verified_outputs
      << ", \"max_relative_error\": " << r.max_relative_error
      << ", \"compared_rounds\": " << r.compared_rounds
      << ", \"compared_cells\": " << r.compared_cells
      << ", \"identical\": " << (r.identical ? "true" : "false") << "}\n";
  }
}

}  // namespace specgraph::tools
