// The verify step's output checks: each attention path's output for every (request, tree token,
// head) against a float64 dense reference that attends by position, the prefix from the
// request's ground truth and the tree tokens the engine's tree mask allows (never through the
// verify tables), and with format both the two paths against each other.
#include <sstream>

#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_engine_impl.hpp"

namespace specgraph::sim {

void sim_engine::impl::check_verify_outputs(
    std::int32_t round, std::int32_t batch, std::int32_t D, std::int32_t bucket, bool verify,
    const std::vector<std::uint8_t>& mask, const std::vector<float>& fa3,
    const std::vector<float>& csr, std::vector<double>& reference, run_report& report) const {
  verify_stats& st = report.verify;
  const bool compare = run_fa3 && run_csr && opt.verify != sim_options::verify_mode::none;
  reference.clear();
  if (!verify && !compare) return;
  const std::int32_t dh = opt.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  if (verify) reference.assign(static_cast<std::size_t>(batch) * D * hd, 0.0);
  auto max_diff = [dh](const float* got, const auto* want) {
    double diff = 0, size = 0;
    for (std::int32_t d = 0; d < dh; ++d) {
      diff = std::max(diff, std::abs(static_cast<double>(got[d]) - static_cast<double>(want[d])));
      size = std::max(size, std::abs(static_cast<double>(want[d])));
    }
    return std::make_pair(diff, diff / std::max(size, 1e-30));
  };
  std::vector<double> scores;
  std::vector<const float*> values;
  std::size_t block = 0;  // request r's block in the engine's mask layout
  for (std::int32_t r = 0; r < batch; ++r) {
    const std::int32_t pool_row = round_rows[static_cast<std::size_t>(r)];
    const request& req = requests[static_cast<std::size_t>(pool_row - 1)];
    const std::int64_t seq = req.seq_len, n = seq + D;
    for (std::int32_t i = 0; i < D; ++i) {
      const std::uint8_t* cells = mask.data() + block + static_cast<std::size_t>(i * n);
      const std::size_t e = static_cast<std::size_t>(r) * D + static_cast<std::size_t>(i);
      for (std::int32_t h = 0; h < opt.heads; ++h) {
        const std::size_t at = e * hd + static_cast<std::size_t>(h * dh);
        auto where = [&] {
          std::ostringstream w;
          w << "round " << round << ", verify step (D " << D << "), bucket " << bucket
            << ", request " << r << " (pool row " << pool_row << "), tree token " << i << ", head "
            << h;
          return w.str();
        };
        if (verify) {
          const float* q = vs.h_q.data() + at;
          scores.clear();
          values.clear();
          for (std::int64_t pos = 0; pos < n; ++pos) {
            if (cells[pos] == 0) continue;
            const float* k = pos < seq ? req.k.data() + pos * hd + h * dh
                                       : vs.h_k.data() + (e - i + (pos - seq)) * hd + h * dh;
            const float* v = pos < seq ? req.v.data() + pos * hd + h * dh
                                       : vs.h_v.data() + (e - i + (pos - seq)) * hd + h * dh;
            double s = 0;
            for (std::int32_t d = 0; d < dh; ++d) s += static_cast<double>(q[d]) * k[d];
            scores.push_back(s * scale);
            values.push_back(v);
          }
          const double m = *std::max_element(scores.begin(), scores.end());
          double l = 0;
          double* o = reference.data() + at;
          for (std::size_t j = 0; j < scores.size(); ++j) {
            const double w = std::exp(scores[j] - m);
            l += w;
            for (std::int32_t d = 0; d < dh; ++d) o[d] += w * values[j][d];
          }
          for (std::int32_t d = 0; d < dh; ++d) o[d] /= l;
          for (const bool is_csr : {false, true}) {
            if (is_csr ? !run_csr : !run_fa3) continue;
            const double rel = max_diff((is_csr ? csr : fa3).data() + at, o).second;
            double& worst = is_csr ? st.max_relative_error_csr : st.max_relative_error_fa3;
            worst = std::max(worst, rel);
            if (!(rel <= opt.tolerance)) {
              std::ostringstream msg;
              msg << "verification failed: " << where() << " (" << (is_csr ? "csr" : "fa3")
                  << " path): relative error " << rel << " exceeds " << opt.tolerance;
              throw verification_error(msg.str());
            }
          }
          ++st.verified_outputs;
        }
        if (compare) {
          const auto [diff, rel] = max_diff(csr.data() + at, fa3.data() + at);
          st.max_abs_difference = std::max(st.max_abs_difference, diff);
          st.max_relative_difference = std::max(st.max_relative_difference, rel);
          ++st.agreement_outputs;
          if (!(rel <= opt.tolerance)) {
            std::ostringstream msg;
            msg << "fa3 and csr paths disagree: " << where() << ": max abs difference " << diff
                << ", relative " << rel << " exceeds " << opt.tolerance;
            throw verification_error(msg.str());
          }
        }
      }
    }
    block += static_cast<std::size_t>(D * n);
  }
  if (verify) ++st.verified_rounds;
  if (compare) ++st.agreement_rounds;
}

}  // namespace specgraph::sim
