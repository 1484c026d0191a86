#include "tools/plan_command.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include "specgraph/error.hpp"
#include "specgraph/extend_metadata.hpp"
#include "specgraph/plan.hpp"
#include "specgraph/verify_metadata.hpp"
#include "tools/cli_text.hpp"
#include "tools/format_flag.hpp"

namespace specgraph::tools {
namespace {

constexpr const char* plan_usage =
    "usage: specgraph plan [flags]\n"
    "  --max-batch N --topk N --steps N --page-size N --max-context N\n"
    "  --slot-stride S       slots per out_cache_loc branch row, >= --steps (default: --steps;\n"
    "                        SGLang: --steps S-1 --slot-stride S)\n"
    "  --pool-rows N (default max-batch + 1)  --kv-slots N (default 2^24)\n"
    "  --buckets 1,2,4,...   (default: the common list up to --max-batch)\n"
    "  --format fa3|csr|both   the draft-decode metadata held (default fa3; docs/csr.md;\n"
    "                        --formats is the same flag)\n"
    "  --csr-int64           CSR kv_indices as int64 (Triton) instead of int32 (FlashInfer)\n"
    "  --verify-tokens D     the plan's verify section for D-token trees, and the verify line\n"
    "                        against the engines' mask (docs/verify.md)\n"
    "  --extend              the plan's draft-extend section over the verify window W = D\n"
    "                        (needs --verify-tokens), and its line against the engines'\n"
    "                        reservations (docs/extend-graphs.md)\n"
    "  --round               the plan's round section: acceptance, commit and the next round's\n"
    "                        inputs after verify (needs --verify-tokens), and its line against\n"
    "                        SGLang's sizes (docs/round-graphs.md)\n"
    "  --round-reserve R     positions kept allocated past the committed length (default: R1,\n"
    "                        next_round_reserve)\n"
    "  --round-max-seq-len M the largest committed seq_len a request reaches (default: the\n"
    "                        largest M with ceil_page(M + R) <= --max-context); refused when\n"
    "                        ceil_page(M + R) > --max-context\n"
    "  --stop-tokens N       stop token ids the round section holds (default 0)\n"
    "  --json [FILE]         the plan as JSON instead of a table: to stdout, or written to FILE\n"
    "                        (as run --json FILE; --json - or a following flag: stdout)\n"
    "defaults: --max-batch 256 --topk 8 --steps 5 --page-size 16 --max-context 4096\n";

std::int64_t number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw invalid_argument(flag, flag + ": " + echo(text) + " is not an integer");
  }
  return v;
}

}  // namespace

int plan_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  draft_config c;
  c.max_batch = 256;
  c.topk = 8;
  c.num_steps = 5;
  c.page_size = 16;
  c.max_context_len = 4096;
  c.kv_slots = std::int64_t{1} << 24;
  bool json = false;
  std::string json_path;                      // empty: stdout
  std::optional<std::int32_t> pool_rows;      // absent: the default, max_batch + 1
  std::optional<std::int32_t> verify_tokens;  // --verify-tokens: the verify section and line
  // draft_config field names, for errors raised by validate(): reported as the flag.
  const std::pair<const char*, const char*> flag_of[] = {
      {"max_batch", "--max-batch"},
      {"topk", "--topk"},
      {"num_steps", "--steps"},
      {"slot_stride", "--slot-stride"},
      {"page_size", "--page-size"},
      {"max_context_len", "--max-context"},
      {"pool_rows", "--pool-rows"},
      {"kv_slots", "--kv-slots"},
      {"buckets", "--buckets"},
      {"verify_tokens", "--verify-tokens"},
      {"draft_extend", "--extend"},
      {"round_on_device", "--round"},
      {"round_reserve", "--round-reserve"},
      {"round_max_seq_len", "--round-max-seq-len"},
      {"max_stop_tokens", "--stop-tokens"}};
  try {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& flag = args[i];
      if (flag == "--help" || flag == "-h") {
        out << plan_usage;
        return 0;
      }
      if (flag == "--json" || flag.rfind("--json=", 0) == 0) {
        json = true;
        if (flag != "--json") {
          json_path = flag.substr(7);
        } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
          json_path = args[++i];
        }
        if (json_path == "-") json_path.clear();
        continue;
      }
      if (flag == "--csr-int64") {
        c.csr_int64 = true;
        continue;
      }
      if (flag == "--extend") {
        c.draft_extend = true;
        continue;
      }
      if (flag == "--round") {
        c.round_on_device = true;
        continue;
      }
      if (i + 1 >= args.size()) throw invalid_argument(flag, flag + ": missing value");
      const std::string& value = args[++i];
      auto fit_int32 = [&](std::int64_t v) {
        if (v < -(1LL << 31) || v >= (1LL << 31)) {
          throw invalid_argument(flag, flag + ": " + std::to_string(v) + " does not fit in int32");
        }
        return static_cast<std::int32_t>(v);
      };
      auto int32 = [&] { return fit_int32(number(flag, value)); };
      if (flag == "--max-batch") {
        c.max_batch = int32();
      } else if (flag == "--topk") {
        c.topk = int32();
      } else if (flag == "--steps") {
        c.num_steps = int32();
      } else if (flag == "--slot-stride") {
        c.slot_stride = int32();
      } else if (flag == "--page-size") {
        c.page_size = int32();
      } else if (flag == "--max-context") {
        c.max_context_len = int32();
      } else if (flag == "--pool-rows") {
        pool_rows = int32();
      } else if (flag == "--round-reserve") {
        c.round_reserve = int32();
      } else if (flag == "--round-max-seq-len") {
        c.round_max_seq_len = int32();
      } else if (flag == "--stop-tokens") {
        c.max_stop_tokens = int32();
      } else if (flag == "--kv-slots") {
        c.kv_slots = number(flag, value);
      } else if (flag == "--verify-tokens") {
        verify_tokens = int32();
        if (*verify_tokens < 1 || *verify_tokens > max_draft_tokens) {
          throw invalid_argument(flag, flag + ": " + std::to_string(*verify_tokens) +
                                           " is outside [1, " + std::to_string(max_draft_tokens) +
                                           "]");
        }
      } else if (is_format_flag(flag)) {
        std::string error;
        if (!parse_format(flag, value, c.formats, error)) throw invalid_argument(flag, error);
      } else if (flag == "--buckets") {
        std::stringstream list(value);
        std::string item;
        while (std::getline(list, item, ',')) c.buckets.push_back(fit_int32(number(flag, item)));
      } else {
        throw invalid_argument(flag, "unknown flag " + echo(flag) + " (see specgraph plan --help)");
      }
    }
    // The default pool (max_batch + 1 rows, row 0 reserved) computed in int64: a max_batch out of
    // range is then reported as --max-batch by validate(), not as a wrapped --pool-rows.
    // Only an absent --pool-rows takes the default (a negative one is refused by validate()).
    c.pool_rows = pool_rows ? *pool_rows
                            : static_cast<std::int32_t>(std::min<std::int64_t>(
                                  static_cast<std::int64_t>(c.max_batch) + 1, 1LL << 30));
    if (verify_tokens) c.verify_tokens = *verify_tokens;
    const plan p = make_plan(c);
    if (!json_path.empty()) {
      std::ofstream file(json_path);
      file << p.report_json() << '\n';
      file.flush();
      if (!file) {
        err << "specgraph: error: --json: cannot write " << echo(json_path) << '\n';
        return 2;
      }
      return 0;
    }
    out << (json ? p.report_json() + "\n" : p.report_text());
    if (verify_tokens && !json) {
      out << verify_capacity_report(c.max_batch, c.max_context_len, c.page_size, *verify_tokens);
    }
    if (c.draft_extend && !json) {
      out << extend_capacity_report(c.max_batch, c.max_context_len, c.page_size, c.verify_tokens);
    }
    return 0;
  } catch (const invalid_argument& e) {
    std::string message = e.what();
    for (const auto& [field, flag] : flag_of) {
      const std::string prefix = std::string(field);
      if (message.rfind(prefix, 0) == 0) {  // "topk: 0 is below..." -> "--topk: 0 is below..."
        message = flag + message.substr(prefix.size());
        break;
      }
    }
    err << "specgraph: error: " << one_line(message) << '\n';
    return 2;
  }
}

}  // namespace specgraph::tools
