#include "tools/run_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tools/cli_text.hpp"
#include "tools/format_flag.hpp"
#include "tools/json.hpp"
#include "tools/loop_command.hpp"
#include "tools/run_report.hpp"
#include "tools/sim/sim_engine.hpp"

namespace specgraph::tools {
namespace {

constexpr const char* run_usage =
    "usage: specgraph run [flags]\n"
    "  --executor host|cuda|auto   where to run (default auto: cuda when a GPU is usable)\n"
    "  --max-batch N    largest batch; buckets are the default list up to N (default 32)\n"
    "  --min-batch N    smallest batch drawn per round (default 1)\n"
    "  --topk N         draft branches per request (default 4)\n"
    "  --steps N        draft steps per round (default 5)\n"
    "  --slot-stride S  slots per out_cache_loc branch row, >= steps (default: steps); the\n"
    "                   extra slots hold an out-of-range slot that must never be read\n"
    "  --depth N|random steps replayed per round, N <= steps, or 1..steps drawn per round\n"
    "                   (default: all; the table then lists only the steps that ran)\n"
    "  --page-size N    KV page size in tokens (default 16)\n"
    "  --heads N        attention heads (default 4)\n"
    "  --head-dim N     head dimension, <= 256 (default 64)\n"
    "  --max-context N  longest request prefix (default 1024)\n"
    "  --rounds N       draft rounds (default 200)\n"
    "  --seed N         random seed (default 1)\n"
    "  --verify all|sample|none  compare attention outputs with a float64 reference\n"
    "                   (default sample: the first round and every --verify-every rounds)\n"
    "  --verify-every N (default 10)\n"
    "  --checked        read guard words after every round and check branch layouts\n"
    "  --device-steps   one graph per bucket, the step read from a device counter\n"
    "  --format fa3|csr|both  the attention path: FA3's page tables (default), the CSR\n"
    "                   kv_indptr / kv_indices FlashInfer and Triton read, or both (their\n"
    "                   outputs are then also compared with each other on every round;\n"
    "                   --formats is the same flag, as in specgraph plan)\n"
    "  --verify-tokens D  the verify step's tree size, root included, in [1, 1 + topk x\n"
    "                   steps] (default min(8, 1 + topk x steps); a round uses\n"
    "                   min(D, 1 + topk x depth)); 0 or --no-verify-round: draft steps only\n"
    "  --no-extend      no draft-extend step after the verify step (default: one per round,\n"
    "                   over each request's window of W = D tokens; docs/extend.md)\n"
    "  --rounds-per-launch N  the round loop instead (docs/main-job.md): batch\n"
    "                   --max-batch, whole rounds as one graph launch each, N back to back\n"
    "                   per host step, beside the same rounds driven from the host\n"
    "  --max-new-tokens N  with it: every request's length budget (default: none)\n"
    "  --short-ring N   with it: ring pages for N rounds published per host step, so rounds\n"
    "                   stall and the host reruns the next round (default: every round's)\n"
    "  --json FILE      write the report as JSON (with the version and git commit)\n"
    "  --dump-graphs DIR  one Graphviz file per captured graph\n"
    "\n"
    "output: the configuration (executor, shape, depth, graph mode, checked) first, then the\n"
    "plan, the capture (graphs, time, the arena's bytes) and one row per step: replays, mean,\n"
    "p50 and p99 time of a replay (each waited for) and draft tokens/s, the real draft tokens\n"
    "that step produced (batch x topk per round, padded rows not counted) divided by the summed\n"
    "time of its replays. With --format csr or both, a line after the plan gives the CSR\n"
    "buffers' exact sizes; verification covers each path; both adds a line comparing them.\n"
    "The verify row: the target's forward over each request's draft tree (time as above) and\n"
    "the accept length, accepted draft tokens + 1 per request per round; the accepted path\n"
    "extends the request for the next round (docs/verify.md section 10). The extend row: the\n"
    "draft model's extend forward over each request's window (time as above) and window\n"
    "tokens/s; its accepted tokens' draft K/V are committed (docs/main-job.md).\n";

class flag_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct parsed {
  sim::sim_options options;
  std::string json_path, dot_dir;
  bool help = false;
  loop_flags loop;  // rounds_per_launch > 0: the round loop (tools/loop_command.hpp)
};

std::int64_t parse_int(const std::string& flag, const std::string& text, std::int64_t lo,
                       std::int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw flag_error(flag + ": " + echo(text) + " is not an integer");
  }
  if (v < lo || v > hi) {
    throw flag_error(flag + ": " + text + " is outside [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  }
  return v;
}

// Everything the simulated run allocates, host and executor memory together (on the host
// executor both are this machine's RAM), computed in double so no product can overflow. Mirrors
// the allocations of tools/sim/sim_engine.cpp.
void check_memory(const sim::sim_options& o) {
  const double ps = o.page_size, hd = static_cast<double>(o.heads) * o.head_dim;
  const double rows = static_cast<double>(o.max_batch) * o.topk;
  const double request_pages = o.max_batch * std::ceil(o.max_context / ps);
  const bool csr = o.format != metadata_formats::fa3;
  // req_to_token rows: the longest prefix, plus every branch's region with CSR.
  const double width = std::max<double>(
      o.max_context +
          (csr ? (o.topk - 1) * ps * std::ceil((ps - 1 + o.num_steps) / ps) + o.num_steps : 0),
      static_cast<double>(o.max_context) + o.verify_tokens);
  const double branch_pages = rows * std::ceil((ps - 1 + o.num_steps) / ps);
  const double slots = (2 + 1.5 * (request_pages + branch_pages)) * ps;
  double bytes = 2 * slots * hd * 4;                    // K and V pools
  bytes += 2.0 * (o.max_batch + 1) * width * 4;         // req_to_token, host + device
  bytes += 2.0 * o.max_batch * o.max_context * hd * 4;  // host K/V ground truth
  bytes += 6.0 * rows * o.num_steps * hd * 4;           // q/k/v sources, host + device
  bytes += rows * hd * 4 * (2 + o.num_steps);           // attention outputs
  bytes += rows * o.heads * 4 * (2 + o.num_steps);      // log-sum-exp outputs
  bytes += 3.0 * rows * o.num_steps * hd * 4;           // verification copies
  if (csr) bytes += 2.0 * rows * o.num_steps * hd * 4;  // the csr output and its copy
  if (o.verify_tokens > 0) {  // the verify step: its tree tokens' pages, inputs and outputs
    const double d = o.verify_tokens, tree_rows = o.max_batch * d;
    bytes += 2 * 1.5 * o.max_batch * std::ceil(d / ps + 1) * ps * hd * 4;  // K/V pool pages
    bytes += tree_rows * hd * 4 * 16;  // q/k/v (device, host), 4 outputs and their copies
    bytes += 3.0 * tree_rows * (o.max_context + d);  // mask, packed mask, kv_indices (bytes)
    bytes += 4.0 * tree_rows * (o.max_context + d);
    bytes += 4.0 * o.max_batch * std::ceil(o.max_context / ps) + 4.0 * tree_rows * d;
  }
  draft_config c;
  c.max_batch = o.max_batch;
  c.topk = o.topk;
  c.num_steps = o.num_steps;
  c.slot_stride = o.slot_stride;
  c.page_size = o.page_size;
  c.max_context_len = static_cast<std::int32_t>(std::min(width, 2e9));
  c.pool_rows = o.max_batch + 1;
  c.formats = csr ? metadata_formats::both : metadata_formats::fa3;
  c.kv_slots = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::min(slots, 1e18)));
  try {
    bytes += static_cast<double>(make_plan(c).total_bytes);
  } catch (const invalid_argument& e) {
    throw flag_error(std::string("the configuration is out of range: ") + e.what());
  }
  const double gib = bytes / (1024.0 * 1024 * 1024);
  if (gib > 8.0) {
    std::ostringstream m;
    m << std::fixed << std::setprecision(1) << "--max-context: the simulated run would need " << gib
      << " GiB (limit 8 GiB); lower --max-context, --max-batch, --heads or --head-dim";
    throw flag_error(m.str());
  }
}

parsed parse(const std::vector<std::string>& args) {
  parsed p;
  sim::sim_options& o = p.options;
  std::string depth_text;
  const std::set<std::string> switches{"--checked",   "--device-steps", "--no-verify-round",
                                       "--no-extend", "--help",         "-h"};
  std::int64_t verify_tokens = -1;
  bool no_verify_round = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const auto eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (!switches.count(flag)) {
      if (flag.rfind("--", 0) != 0) throw flag_error("unexpected argument " + echo(flag));
      if (i + 1 >= args.size()) throw flag_error(flag + ": missing value");
      value = args[++i];
    }
    auto num = [&](std::int64_t lo, std::int64_t hi) {
      return static_cast<std::int32_t>(parse_int(flag, value, lo, hi));
    };
    if (flag == "--help" || flag == "-h") {
      p.help = true;
    } else if (flag == "--checked") {
      // A bare switch, or an explicit boolean: "--checked=0" means off, never on.
      if (eq == std::string::npos || value == "1" || value == "true" || value == "on") {
        o.checked = true;
      } else if (value == "0" || value == "false" || value == "off") {
        o.checked = false;
      } else {
        throw flag_error("--checked: " + echo(value) + " is not one of 1, true, on, 0, false, off");
      }
    } else if (flag == "--device-steps") {
      if (eq != std::string::npos) {
        throw flag_error("--device-steps: takes no value (got " + echo(value) + ")");
      }
      o.device_steps = true;
    } else if (flag == "--no-extend") {
      if (eq != std::string::npos) {
        throw flag_error("--no-extend: takes no value (got " + echo(value) + ")");
      }
      o.draft_extend = false;
    } else if (flag == "--no-verify-round") {
      if (eq != std::string::npos) {
        throw flag_error("--no-verify-round: takes no value (got " + echo(value) + ")");
      }
      no_verify_round = true;
    } else if (flag == "--verify-tokens") {
      verify_tokens = parse_int(flag, value, 0, max_draft_tokens);
    } else if (flag == "--executor") {
      if (value != "host" && value != "cuda" && value != "auto") {
        throw flag_error("--executor: " + echo(value) + " is not one of host, cuda, auto");
      }
      o.executor = value;
    } else if (flag == "--max-batch") {
      o.max_batch = num(1, 4096);
    } else if (flag == "--min-batch") {
      o.min_batch = num(1, 4096);
    } else if (flag == "--topk") {
      o.topk = num(1, 64);
    } else if (flag == "--steps") {
      o.num_steps = num(1, 32);
    } else if (flag == "--slot-stride") {
      o.slot_stride = num(1, 64);
    } else if (flag == "--depth") {
      depth_text = value;
    } else if (flag == "--page-size") {
      o.page_size = num(1, 4096);
    } else if (flag == "--heads") {
      o.heads = num(1, 128);
    } else if (flag == "--head-dim") {
      o.head_dim = num(1, 256);
    } else if (flag == "--max-context") {
      o.max_context = num(1, 1 << 20);
    } else if (flag == "--rounds") {
      o.rounds = num(1, 1 << 24);
    } else if (flag == "--seed") {
      o.seed = static_cast<std::uint64_t>(parse_int(flag, value, 0, INT64_MAX));
    } else if (flag == "--verify") {
      if (value == "all") {
        o.verify = sim::sim_options::verify_mode::all;
      } else if (value == "sample") {
        o.verify = sim::sim_options::verify_mode::sample;
      } else if (value == "none") {
        o.verify = sim::sim_options::verify_mode::none;
      } else {
        throw flag_error("--verify: " + echo(value) + " is not one of all, sample, none");
      }
    } else if (is_format_flag(flag)) {
      std::string error;
      if (!parse_format(flag, value, o.format, error)) throw flag_error(error);
    } else if (flag == "--verify-every") {
      o.verify_every = num(1, 1 << 24);
    } else if (flag == "--rounds-per-launch") {
      p.loop.rounds_per_launch = num(1, 1 << 20);
    } else if (flag == "--max-new-tokens") {
      p.loop.max_new_tokens = num(1, 1 << 30);
    } else if (flag == "--short-ring") {
      p.loop.short_ring = num(1, 1 << 20);
    } else if (flag == "--json") {
      p.json_path = value;
    } else if (flag == "--dump-graphs") {
      p.dot_dir = value;
    } else {
      throw flag_error("unknown flag " + echo(flag) + " (see specgraph run --help)");
    }
  }
  if (o.min_batch > o.max_batch) {
    throw flag_error("--min-batch: " + std::to_string(o.min_batch) + " exceeds --max-batch " +
                     std::to_string(o.max_batch));
  }
  if (o.slot_stride != 0 && o.slot_stride < o.num_steps) {
    throw flag_error("--slot-stride: " + std::to_string(o.slot_stride) + " is below --steps " +
                     std::to_string(o.num_steps) + " (a row holds a slot for every draft step)");
  }
  if (depth_text == "random") {
    o.depth = -1;
  } else if (!depth_text.empty()) {
    o.depth = static_cast<std::int32_t>(parse_int("--depth", depth_text, 1, o.num_steps));
  }
  const std::int64_t tree_max = 1 + static_cast<std::int64_t>(o.topk) * o.num_steps;
  if (verify_tokens > tree_max) {
    throw flag_error("--verify-tokens: " + std::to_string(verify_tokens) + " exceeds 1 + topk x " +
                     "steps = " + std::to_string(tree_max) +
                     " (the root and every draft token); lower it or raise --topk or --steps");
  }
  if (no_verify_round && verify_tokens > 0) {
    throw flag_error("--no-verify-round: contradicts --verify-tokens " +
                     std::to_string(verify_tokens));
  }
  o.verify_tokens = no_verify_round ? 0 : static_cast<std::int32_t>(verify_tokens);
  o.verify_tokens = sim::resolved_verify_tokens(o);
  const std::string loop_error =
      loop_flags_error(o, p.loop, !depth_text.empty(), !p.dot_dir.empty());
  if (!loop_error.empty()) throw flag_error(loop_error);
  if (p.loop.rounds_per_launch > 0) return p;
  check_memory(o);
  return p;
}

}  // namespace

int run_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  parsed p;
  try {
    p = parse(args);
  } catch (const flag_error& e) {
    err << "specgraph: error: " << one_line(e.what()) << '\n';
    return 2;
  }
  if (p.help) {
    out << run_usage;
    return 0;
  }
  const sim::sim_options& o = p.options;
  // The output targets are opened (or probed) before the run, so an unwritable path fails in a
  // second with a named flag, not after the whole run with an abort.
  std::ofstream json_out;
  if (!p.json_path.empty()) {
    json_out.open(p.json_path);
    if (!json_out) {
      err << "specgraph: error: --json: cannot write " << echo(p.json_path) << '\n';
      return 2;
    }
  }
  if (!p.dot_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(p.dot_dir, ec);
    const std::filesystem::path probe = std::filesystem::path(p.dot_dir) / ".specgraph-write-test";
    std::ofstream test(probe);
    if (ec || !test) {
      err << "specgraph: error: --dump-graphs: cannot write into " << echo(p.dot_dir) << '\n';
      return 2;
    }
    test.close();
    std::filesystem::remove(probe, ec);
  }
  try {
    auto ex = make_executor(o.executor);
    if (p.loop.rounds_per_launch > 0) {
      run_loop_command(*ex, o, p.loop, out, json_out.is_open() ? &json_out : nullptr);
      if (json_out.is_open() && !json_out.flush()) throw error("--json: writing failed");
      return 0;
    }
    // The configuration first, flushed: on a terminal it stands above the progress bars, piped
    // it arrives before the run, not with the report at the end.
    out << run_header(o, ex->name()) << std::flush;
    sim::sim_engine engine(*ex, o);
    const plan& pl = engine.runtime().plan();
    sim::run_report report;
    report.capture = engine.capture(progress_bar("capturing"));
    write_capture_text(out, pl, report.capture);  // before the rounds, flushed like the header
    out << std::flush;
    if (!p.dot_dir.empty()) engine.runtime().write_dot(p.dot_dir);
    const sim::run_report run = engine.run(progress_bar("rounds"));
    const capture_report cap = report.capture;
    report = run;
    report.capture = cap;

    write_rounds_text(out, o, report);
    if (json_out.is_open()) {
      write_run_json(json_out, o, pl, report);
      json_out.flush();
      if (!json_out) throw error("--json: writing " + echo(p.json_path) + " failed");
    }
    return 0;
  } catch (const sim::verification_error& e) {
    err << "specgraph: " << one_line(e.what()) << '\n';
    return 1;
  } catch (const guard_violation& e) {
    err << "specgraph: guard violation: " << one_line(e.what()) << '\n';
    return 1;
  } catch (const unavailable& e) {
    err << "specgraph: error: --executor: " << one_line(e.what()) << '\n';
    return 2;
  } catch (const invalid_argument& e) {
    err << "specgraph: error: " << one_line(e.what()) << '\n';
    return 2;
  } catch (const std::exception& e) {
    err << "specgraph: error: " << one_line(e.what()) << '\n';
    return 1;
  }
}

}  // namespace specgraph::tools
