#include "tools/run_report.hpp"

#include <algorithm>
#include <iomanip>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tools/build_info.hpp"  // generated at build time: SPECGRAPH_BUILD_COMMIT
#include "tools/json.hpp"

namespace specgraph::tools {
namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// Draft tokens/s of one step: the real draft rows it produced (batch x topk of every round that
// reached it, padded rows not counted) over the summed wall time of its replays, each replay
// timed up to a synchronisation.
double tokens_per_second(const sim::step_stats& st) {
  const double total = sum(st.seconds);
  return total > 0 ? static_cast<double>(st.draft_tokens) / total : 0.0;
}

// "1 round", "2 rounds": a count and its noun, in the singular for one.
std::string count_of(std::int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string depth_text(const sim::sim_options& o) {
  if (o.depth < 0) return "random 1.." + std::to_string(o.num_steps);
  if (o.depth == 0) return "all " + std::to_string(o.num_steps);
  return std::to_string(o.depth) + " of " + std::to_string(o.num_steps);
}

}  // namespace

const char* build_version() noexcept {
  return SPECGRAPH_BUILD_VERSION;
}
const char* build_commit() noexcept {
  return SPECGRAPH_BUILD_COMMIT;
}

std::string run_header(const sim::sim_options& o, const std::string& executor) {
  std::ostringstream h;
  h << "specgraph run: " << executor << " executor, max batch " << o.max_batch << ", topk "
    << o.topk << ", " << o.num_steps << " steps"
    << (o.slot_stride > o.num_steps ? ", slot stride " + std::to_string(o.slot_stride) : "")
    << ", depth " << depth_text(o) << ", page size " << o.page_size << ", " << o.heads
    << " heads x " << o.head_dim << ", context <= " << o.max_context << ", format "
    << to_string(o.format) << ", " << count_of(o.rounds, "round") << ", seed " << o.seed << ", "
    << (o.device_steps ? "device step counter (--device-steps)" : "per-step graphs") << ", "
    << (o.checked ? "checked (--checked)" : "unchecked") << ", "
    << (o.verify_tokens > 0 ? "verify step D " + std::to_string(o.verify_tokens)
                            : std::string("no verify step (--verify-tokens 0)"))
    << "\n";
  return h.str();
}

void write_capture_text(std::ostream& out, const plan& pl, const capture_report& cap) {
  out << std::fixed << std::setprecision(1) << "plan: " << pl.total_bytes << " bytes in one arena ("
      << pl.config.buckets.size() << " buckets up to " << pl.max_bucket()
      << "); today's engine sizing: " << pl.today.total_bytes << " bytes ("
      << static_cast<double>(pl.today.total_bytes) / static_cast<double>(pl.total_bytes)
      << "x more)\n";
  if (!pl.layout.csr_kv_indices.empty()) {
    out << "csr: req_to_token rows " << pl.config.max_context_len
        << " wide (the longest prefix, then each branch's draft region); " << pl.csr_report_line();
  }
  // The memory the graphs work in is the arena (the runtime allocates nothing else for them);
  // graph-private memory exists only under CUDA and is not measured here.
  out << std::setprecision(3) << "capture: " << cap.graphs << " graphs in "
      << 1e3 * cap.total_seconds << " ms (" << 1e6 * cap.total_seconds / std::max(1, cap.graphs)
      << " us each), " << cap.instantiated << " instantiated, " << cap.updated << " updated; arena "
      << pl.total_bytes << " bytes\n";
  out << std::defaultfloat;
}

void write_rounds_text(std::ostream& out, const sim::sim_options& o, const sim::run_report& r) {
  out << std::fixed << "\n step    d  replays   mean ms    p50 ms    p99 ms   draft tokens/s\n";
  std::int64_t replays = 0;
  for (const sim::step_stats& st : r.steps) {
    if (st.replays == 0) continue;  // no round reached this step (--depth): no row of zeros
    replays += st.replays;
    out << std::setw(5) << st.step << std::setw(5) << st.step + 1 << std::setw(9) << st.replays
        << std::setprecision(3) << std::setw(10) << 1e3 * mean(st.seconds) << std::setw(10)
        << 1e3 * percentile(st.seconds, 0.5) << std::setw(10) << 1e3 * percentile(st.seconds, 0.99)
        << std::setprecision(0) << std::setw(17) << tokens_per_second(st) << "\n";
  }
  const sim::verify_stats& v = r.verify;
  const double requests = static_cast<double>(std::max<std::int64_t>(1, v.requests));
  if (v.steps > 0) {
    // The verify forward of each round: its time, and the accept length (accepted draft tokens
    // + the target's bonus token, per request per round).
    out << "verify" << std::setw(4) << o.verify_tokens << std::setw(9) << v.steps
        << std::setprecision(3) << std::setw(10) << 1e3 * mean(v.seconds) << std::setw(10)
        << 1e3 * percentile(v.seconds, 0.5) << std::setw(10) << 1e3 * percentile(v.seconds, 0.99)
        << std::setprecision(2) << std::setw(13) << "accept len "
        << 1.0 + static_cast<double>(v.accepted) / requests << "\n";
  }
  const sim::extend_stats& x = r.extend;
  if (x.steps > 0) {
    // The draft model's extend forward over each request's window of W tokens.
    out << "extend" << std::setw(4) << o.verify_tokens << std::setw(9) << x.steps
        << std::setprecision(3) << std::setw(10) << 1e3 * mean(x.seconds) << std::setw(10)
        << 1e3 * percentile(x.seconds, 0.5) << std::setw(10) << 1e3 * percentile(x.seconds, 0.99)
        << std::setprecision(0) << std::setw(17)
        << static_cast<double>(x.window_tokens) /
               std::max(1e-30, std::accumulate(x.seconds.begin(), x.seconds.end(), 0.0))
        << "\n";
  }
  std::set<std::int32_t> buckets;
  for (const auto& round : r.rounds) buckets.insert(round.bucket);
  out << std::setprecision(2) << "\nrounds: " << r.rounds.size() << " ("
      << count_of(replays, "replay") << ", "
      << count_of(static_cast<std::int64_t>(buckets.size()), "distinct bucket") << ") in "
      << r.run_seconds << " s; per-step times include a synchronisation after each replay\n";
  if (v.steps > 0) {
    const char* path = o.format == metadata_formats::fa3   ? "the fa3 cascade"
                       : o.format == metadata_formats::csr ? "the masked prefill (csr)"
                                                           : "the fa3 cascade and the masked "
                                                             "prefill (csr)";
    out << std::setprecision(2) << "verify: " << count_of(v.requests, "request tree")
        << " of D = min(" << o.verify_tokens << ", 1 + topk x depth) tokens, " << v.tree_tokens
        << " tree tokens, tree attention over prefix + tree through " << path << "; "
        << static_cast<double>(v.accepted) / requests
        << " draft tokens accepted per request (accept len "
        << 1.0 + static_cast<double>(v.accepted) / requests << "), "
        << count_of(v.finished, "request")
        << (v.finished == 1 ? " reached --max-context and was replaced\n"
                            : " reached --max-context and were replaced\n");
  }
  if (x.steps > 0) {
    const char* path = o.format == metadata_formats::fa3 ? "the fa3 page table (C1)"
                       : o.format == metadata_formats::csr
                           ? "the csr full (C2f) and prefix (C2p) layouts"
                           : "the fa3 page table (C1) and the csr full (C2f) and prefix (C2p) "
                             "layouts";
    out << std::setprecision(2) << "extend: " << count_of(x.requests, "request window")
        << " of W = " << o.verify_tokens << " tokens, " << x.window_tokens
        << " window tokens, causal attention over prefix + window through " << path << "; "
        << x.accepted << " window tokens committed (accept len "
        << static_cast<double>(x.accepted) /
               static_cast<double>(std::max<std::int64_t>(1, x.requests))
        << ")\n";
  }
  if (o.verify == sim::sim_options::verify_mode::none) {
    out << "verification: off (--verify none)\n";
  } else {
    out << std::scientific << std::setprecision(2)
        << "verification: " << count_of(r.verified_rounds, "round") << ", " << r.verified_outputs
        << " attention outputs";
    if (o.format == metadata_formats::both) {
      out << " per path against a float64 dense reference, max relative error fa3 "
          << r.max_relative_error_fa3 << ", csr " << r.max_relative_error_csr;
    } else {
      out << " against a float64 dense reference, max relative error " << r.max_relative_error;
    }
    out << " (tolerance " << o.tolerance << "): PASSED\n";
    if (o.format == metadata_formats::both) {
      out << "fa3 vs csr: " << count_of(r.agreement_rounds, "round") << ", " << r.agreement_outputs
          << " attention outputs, max abs difference " << r.max_abs_difference << " (relative "
          << r.max_relative_difference << ", tolerance " << o.tolerance << "): AGREE\n";
    }
    if (v.steps > 0) {
      out << "verify step: " << count_of(v.verified_rounds, "round") << ", " << v.verified_outputs
          << " tree-token outputs";
      if (o.format == metadata_formats::both) {
        out << " per path against a float64 dense reference over the tree mask, max relative "
               "error fa3 "
            << v.max_relative_error_fa3 << ", csr " << v.max_relative_error_csr;
      } else {
        out << " against a float64 dense reference over the tree mask, max relative error "
            << std::max(v.max_relative_error_fa3, v.max_relative_error_csr);
      }
      out << " (tolerance " << o.tolerance << "): PASSED\n";
      if (o.format == metadata_formats::both) {
        out << "verify step fa3 vs csr: " << count_of(v.agreement_rounds, "round") << ", "
            << v.agreement_outputs << " tree-token outputs, max abs difference "
            << v.max_abs_difference << " (relative " << v.max_relative_difference << ", tolerance "
            << o.tolerance << "): AGREE\n";
      }
    }
    if (x.steps > 0) {
      out << "extend step: " << count_of(x.verified_rounds, "round") << ", " << x.verified_outputs
          << " window-token outputs per path against a float64 dense reference by position, max "
             "relative error";
      if (o.format != metadata_formats::csr) out << " fa3 " << x.max_relative_error_fa3;
      if (o.format == metadata_formats::both) out << ",";
      if (o.format != metadata_formats::fa3) {
        out << " csr full " << x.max_relative_error_full << ", csr prefix "
            << x.max_relative_error_prefix;
      }
      out << " (tolerance " << o.tolerance << "): PASSED\n";
      if (o.format == metadata_formats::both) {
        out << "extend step fa3 vs csr: " << count_of(x.agreement_rounds, "round") << ", "
            << x.agreement_outputs << " window-token outputs, max relative difference "
            << x.max_relative_difference << " (tolerance " << o.tolerance << "): AGREE\n";
      }
    }
  }
  out << std::defaultfloat;
}

void write_run_json(std::ostream& j, const sim::sim_options& o, const plan& pl,
                    const sim::run_report& r) {
  j << "{\"version\":" << quote(build_version()) << ",\"commit\":" << quote(build_commit())
    << ",\"executor\":" << quote(r.executor) << ",\"config\":{\"max_batch\":" << o.max_batch
    << ",\"min_batch\":" << o.min_batch << ",\"topk\":" << o.topk << ",\"steps\":" << o.num_steps
    << ",\"depth\":" << o.depth << ",\"page_size\":" << o.page_size << ",\"heads\":" << o.heads
    << ",\"head_dim\":" << o.head_dim << ",\"max_context\":" << o.max_context
    << ",\"rounds\":" << o.rounds << ",\"seed\":" << o.seed
    << ",\"checked\":" << (o.checked ? "true" : "false")
    << ",\"device_steps\":" << (o.device_steps ? "true" : "false")
    << ",\"format\":" << quote(to_string(o.format)) << ",\"verify_tokens\":" << o.verify_tokens
    << "},\"plan\":" << pl.report_json() << ",\"capture\":{\"graphs\":" << r.capture.graphs
    << ",\"instantiated\":" << r.capture.instantiated << ",\"updated\":" << r.capture.updated
    << ",\"total_seconds\":" << r.capture.total_seconds << ",\"arena_bytes\":" << pl.total_bytes
    << "},\"steps\":[";
  bool first = true;
  std::int64_t replays = 0;
  for (const sim::step_stats& st : r.steps) {
    if (st.replays == 0) continue;  // as in the text: only the steps that ran
    replays += st.replays;
    j << (first ? "" : ",") << "{\"step\":" << st.step << ",\"decode_length\":" << st.step + 1
      << ",\"replays\":" << st.replays << ",\"mean_seconds\":" << mean(st.seconds)
      << ",\"p50_seconds\":" << percentile(st.seconds, 0.5)
      << ",\"p99_seconds\":" << percentile(st.seconds, 0.99)
      << ",\"draft_tokens\":" << st.draft_tokens
      << ",\"draft_tokens_per_second\":" << tokens_per_second(st) << "}";
    first = false;
  }
  j << "],\"rounds\":" << r.rounds.size() << ",\"replays\":" << replays
    << ",\"run_seconds\":" << r.run_seconds << ",\"verification\":{\"rounds\":" << r.verified_rounds
    << ",\"outputs\":" << r.verified_outputs << ",\"max_relative_error\":" << r.max_relative_error
    << ",\"tolerance\":" << o.tolerance;
  // Per path: the paths that ran, each against the reference.
  j << ",\"paths\":{";
  if (o.format != metadata_formats::csr) {
    j << "\"fa3\":{\"max_relative_error\":" << r.max_relative_error_fa3 << "}";
  }
  if (o.format != metadata_formats::fa3) {
    j << (o.format == metadata_formats::both ? "," : "")
      << "\"csr\":{\"max_relative_error\":" << r.max_relative_error_csr << "}";
  }
  j << "},\"passed\":true}";
  if (o.format == metadata_formats::both && o.verify != sim::sim_options::verify_mode::none) {
    j << ",\"agreement\":{\"rounds\":" << r.agreement_rounds
      << ",\"outputs\":" << r.agreement_outputs
      << ",\"max_abs_difference\":" << r.max_abs_difference
      << ",\"max_relative_difference\":" << r.max_relative_difference
      << ",\"tolerance\":" << o.tolerance << ",\"passed\":true}";
  }
  const sim::verify_stats& v = r.verify;
  if (v.steps > 0) {
    const double requests = static_cast<double>(std::max<std::int64_t>(1, v.requests));
    j << ",\"verify_step\":{\"tokens\":" << o.verify_tokens << ",\"steps\":" << v.steps
      << ",\"mean_seconds\":" << mean(v.seconds)
      << ",\"p50_seconds\":" << percentile(v.seconds, 0.5)
      << ",\"p99_seconds\":" << percentile(v.seconds, 0.99) << ",\"requests\":" << v.requests
      << ",\"tree_tokens\":" << v.tree_tokens << ",\"accepted\":" << v.accepted
      << ",\"accept_length_mean\":" << 1.0 + static_cast<double>(v.accepted) / requests
      << ",\"finished\":" << v.finished << ",\"verified_rounds\":" << v.verified_rounds
      << ",\"verified_outputs\":" << v.verified_outputs
      << ",\"max_relative_error_fa3\":" << v.max_relative_error_fa3
      << ",\"max_relative_error_csr\":" << v.max_relative_error_csr
      << ",\"agreement_outputs\":" << v.agreement_outputs
      << ",\"max_relative_difference\":" << v.max_relative_difference << "}";
  }
  const sim::extend_stats& x = r.extend;
  if (x.steps > 0) {
    j << ",\"extend_step\":{\"tokens\":" << o.verify_tokens << ",\"steps\":" << x.steps
      << ",\"mean_seconds\":" << mean(x.seconds)
      << ",\"p50_seconds\":" << percentile(x.seconds, 0.5)
      << ",\"p99_seconds\":" << percentile(x.seconds, 0.99) << ",\"requests\":" << x.requests
      << ",\"window_tokens\":" << x.window_tokens << ",\"accepted\":" << x.accepted
      << ",\"verified_rounds\":" << x.verified_rounds
      << ",\"verified_outputs\":" << x.verified_outputs
      << ",\"max_relative_error_fa3\":" << x.max_relative_error_fa3
      << ",\"max_relative_error_full\":" << x.max_relative_error_full
      << ",\"max_relative_error_prefix\":" << x.max_relative_error_prefix
      << ",\"agreement_outputs\":" << x.agreement_outputs
      << ",\"max_relative_difference\":" << x.max_relative_difference << "}";
  }
  j << "}\n";
}

}  // namespace specgraph::tools
