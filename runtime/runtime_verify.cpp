// draft_runtime's target-verify graphs (docs/verify.md "Plan and graphs"): staging of a verify
// round, one graph per bucket (verify_metadata + the engine's verify forward), replay.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "device/checks.hpp"
#include "runtime/runtime_parts.hpp"
#include "specgraph/error.hpp"
#include "specgraph/runtime.hpp"
#include "specgraph/verify_ops.hpp"

namespace specgraph {

using detail::clock_type;
using detail::indexed;
using detail::seconds_since;

namespace {

std::int64_t load(const index_array& a, std::int32_t i) {
  return a.type == index_type::int64 ? static_cast<const std::int64_t*>(a.data)[i]
                                     : static_cast<const std::int32_t*>(a.data)[i];
}

void require_verify(const plan& p) {
  SPECGRAPH_EXPECTS(p.layout.verify.enabled(), "verify_tokens",
                    "0: this plan has no verify section (set draft_config::verify_tokens to the "
                    "tree size D)");
}

}  // namespace

void draft_runtime::set_verify_forward(verify_forward_fn f) {
  require_verify(*plan_);
  verify_forward_ = std::move(f);
}

const std::uint8_t* draft_runtime::verify_mask() const noexcept {
  return static_cast<const std::uint8_t*>(verify_mask_.data());
}

std::int64_t draft_runtime::verify_mask_capacity() const noexcept {
  return static_cast<std::int64_t>(verify_mask_.size());
}

verify_view draft_runtime::verify_view_of(std::int32_t bucket) const {
  verify_view v = buffers_.verify(bucket);
  v.ex = ex_;
  v.stream = ex_->stream();
  return v;
}

// The staged requests and the runtime's mask buffer, read as a bound (a graph serves every
// round; stage_verify checked the exact length on the host).
verify_inputs draft_runtime::verify_inputs_of() const {
  verify_inputs in;
  in.tables = tables_;
  in.custom_mask = verify_mask();
  in.mask_cells = verify_mask_capacity();
  in.mask_length_exact = false;
  return in;
}

void draft_runtime::record_verify_body(std::int32_t bucket) {
  verify_metadata(*ex_, buffers_, bucket, verify_inputs_of());
  if (verify_forward_) verify_forward_(verify_view_of(bucket));
}

std::unique_ptr<graph> draft_runtime::capture_verify_graph(std::int32_t bucket) {
  ensure_usable();
  require_verify(*plan_);
  (void)buffers_.verify(bucket);  // validates the bucket first
  const std::string what =
      "capture of the verify graph (bucket " + std::to_string(bucket) + ") failed: ";
  return detail::capture_body(*ex_, bucket, verify_graph_step, what, failure_,
                              [&] { record_verify_body(bucket); });
}

void draft_runtime::capture_verify_graphs(capture_report& report,
                                          const std::function<void(int, int)>& progress,
                                          int total) {
  const std::vector<std::int32_t>& buckets = plan_->config.buckets;
  for (std::size_t bi = buckets.size(); bi-- > 0;) {
    detail::capture_timed(
        buckets[bi], verify_graph_step, report, progress, total,
        [&] { return capture_verify_graph(buckets[bi]); },
        [&](std::unique_ptr<graph> g, graph_timing& t) {
          install_graph(*verify_graphs_[bi], std::move(g), t, report);
          ++report.verify_graphs;
        });
  }
  verify_captured_ = true;
}

void draft_runtime::stage_verify(const verify_round_inputs& in) {
  ensure_usable();
  require_verify(*plan_);
  const draft_config& c = plan_->config;
  const std::int64_t d = c.verify_tokens;
  detail::between("batch", in.batch, 0, c.max_batch, "max_batch");
  if (in.batch > 0) {
    detail::not_null("req_pool_index", in.req_pool_index.data);
    detail::not_null("seq_len", in.seq_len.data);
    detail::not_null("custom_mask", in.custom_mask);
  }
  const std::int32_t bucket = plan_->round_bucket(in.batch, in.bucket);
  // Everything checked (int64, nothing narrowed first) before anything is written.
  std::vector<std::int32_t> small(2 * static_cast<std::size_t>(bucket), 0);
  std::int32_t* pool = small.data();
  std::int32_t* seq = small.data() + bucket;
  std::int64_t needed = 0;
  for (std::int32_t i = 0; i < in.batch; ++i) {
    const std::int64_t pool_row = load(in.req_pool_index, i);
    if (pool_row < 0 || pool_row >= c.pool_rows) {
      detail::in_range(indexed("req_pool_index", i), pool_row, 0, c.pool_rows, "pool_rows");
    }
    const std::int64_t len = load(in.seq_len, i);
    SPECGRAPH_EXPECTS(len >= 1 && len <= c.max_context_len, indexed("seq_len", i),
                      std::to_string(len) + " is outside [1, max_context_len " +
                          std::to_string(c.max_context_len) +
                          "] (the committed prefix, without the D verify tokens)");
    pool[i] = static_cast<std::int32_t>(pool_row);
    seq[i] = static_cast<std::int32_t>(len);
    needed += d * (len + d);
  }
  if (in.mask_cells != needed) {
    const std::int64_t doubled = d * d * in.batch;
    std::string why = std::to_string(in.mask_cells) +
                      " cells, the formula sum(D * (seq_len + D)) over the real requests gives " +
                      std::to_string(needed);
    if (in.batch > 0 && in.mask_cells == needed - doubled) {
      why +=
          ": seq_len seems to include the D verify tokens already (the mask is D * D * batch "
          "= " +
          std::to_string(doubled) + " cells shorter); pass seq_len without the verify tokens";
    } else {
      why += " (the mask's length must equal it)";
    }
    detail::throw_invalid(__FILE__, __LINE__, "custom_mask", why);
  }
  // Padded requests: pool row 0, seq_len 1 (no mask cells; the kernels attend every cell).
  for (std::int32_t i = in.batch; i < bucket; ++i) seq[i] = 1;
  guarding_cuda([&] {
    const std::int32_t real = in.batch;
    ex_->copy_to_device(buffers_.real_batch(), &real, sizeof real);
    ex_->copy_to_device(buffers_.req_pool_index(), pool, static_cast<std::size_t>(bucket) * 4);
    ex_->copy_to_device(buffers_.seq_len(), seq, static_cast<std::size_t>(bucket) * 4);
    if (needed > 0) {
      ex_->copy_to_device(verify_mask_.data(), in.custom_mask, static_cast<std::size_t>(needed));
    }
  });
  // The draft round's staged requests were overwritten: its steps need stage() again.
  bucket_ = 0;
  bucket_index_ = -1;
  const std::vector<std::int32_t>& buckets = c.buckets;
  verify_bucket_ = bucket;
  verify_batch_ = in.batch;
  extend_bucket_ = 0;  // a new verify round: its accepted lengths are not staged yet
  verify_bucket_index_ = static_cast<std::int32_t>(
      std::lower_bound(buckets.begin(), buckets.end(), bucket) - buckets.begin());
}

void draft_runtime::run_verify_eager() {
  ensure_usable();
  if (verify_bucket_ == 0) throw error("verify before stage_verify(): no verify round is staged");
  guarding_cuda([&] { record_verify_body(verify_bucket_); });
}

void draft_runtime::replay_verify() {
  ensure_usable();
  require_verify(*plan_);
  if (!verify_captured_) {
    throw error("replay_verify before capture() with a verify forward: no verify graphs exist");
  }
  if (verify_bucket_ == 0) throw error("verify before stage_verify(): no verify round is staged");
  graph_slot& target = *verify_graphs_[static_cast<std::size_t>(verify_bucket_index_)];
  guarding_cuda([&] { ex_->launch_graph(*target.exec); });
  if (plan_->config.checked) {
    raise_guard_violations(*plan_, read_guards(), verify_bucket_, "verify");
  }
}

}  // namespace specgraph
