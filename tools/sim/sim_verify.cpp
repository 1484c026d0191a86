// The simulated engine's output checks after a round: each attention path that ran against the
// dense float64 reference (verified rounds), and with format both the two paths against each
// other (every round unless --verify none).
#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_engine_impl.hpp"

namespace specgraph::sim {
namespace {

// max |got - want| over one head's vector, and max |want| (the scale the error is relative to).
template <class T>
std::pair<double, double> max_diff(const float* got, const T* want, std::int32_t n) {
  double diff = 0, scale = 0;
  for (std::int32_t d = 0; d < n; ++d) {
    diff = std::max(diff, std::abs(static_cast<double>(got[d]) - static_cast<double>(want[d])));
    scale = std::max(scale, std::abs(static_cast<double>(want[d])));
  }
  return {diff, scale};
}

}  // namespace

void sim_engine::impl::check_outputs(std::int32_t round, std::int32_t batch, std::int32_t depth,
                                     std::int32_t bucket, bool verify, run_report& report) {
  const bool compare = run_fa3 && run_csr && opt.verify != sim_options::verify_mode::none;
  if (!verify && !compare) return;
  const std::size_t rows_total = static_cast<std::size_t>(max_rows);
  const std::size_t elems = static_cast<std::size_t>(depth) * rows_total * hd;
  std::vector<float> fa3(run_fa3 ? elems : 0), csr(run_csr ? elems : 0);
  if (run_fa3) ex->copy_to_host(fa3.data(), out.data(), elems * sizeof(float));
  if (run_csr) ex->copy_to_host(csr.data(), out_csr.data(), elems * sizeof(float));
  std::vector<double> ref;
  for (std::int32_t s = 0; s < depth; ++s) {
    for (std::int32_t r = 0; r < batch; ++r) {
      const request& req =
          requests[static_cast<std::size_t>(round_rows[static_cast<std::size_t>(r)] - 1)];
      for (std::int32_t t = 0; t < opt.topk; ++t) {
        const std::size_t row = static_cast<std::size_t>(r) * opt.topk + t;
        for (std::int32_t h = 0; h < opt.heads; ++h) {
          const std::size_t at =
              (static_cast<std::size_t>(s) * rows_total + row) * hd + h * opt.head_dim;
          auto where = [&] {
            std::ostringstream w;
            w << "round " << round << ", step " << s << ", bucket " << bucket << ", row " << row
              << " (request " << r << ", branch " << t << "), head " << h;
            return w.str();
          };
          if (verify) {
            reference(req, row, s, h, ref);
            for (const bool is_csr : {false, true}) {
              if (is_csr ? !run_csr : !run_fa3) continue;
              const float* got = (is_csr ? csr : fa3).data() + at;
              const auto [diff, scale] = max_diff(got, ref.data(), opt.head_dim);
              const double rel = diff / std::max(scale, 1e-30);
              double& path_max =
                  is_csr ? report.max_relative_error_csr : report.max_relative_error_fa3;
              path_max = std::max(path_max, rel);
              report.max_relative_error = std::max(report.max_relative_error, rel);
              if (!(rel <= opt.tolerance)) {
                std::ostringstream msg;
                msg << "verification failed: " << where() << " (" << (is_csr ? "csr" : "fa3")
                    << " path): relative error " << rel << " exceeds " << opt.tolerance;
                throw verification_error(msg.str());
              }
            }
            ++report.verified_outputs;
          }
          if (compare) {
            // Both paths attend the same tokens in the same order in float32; they differ only
            // by rounding (fa3 splits the softmax in two passes merged by log-sum-exp).
            const auto [diff, scale] = max_diff(csr.data() + at, fa3.data() + at, opt.head_dim);
            const double rel = diff / std::max(scale, 1e-30);
            report.max_abs_difference = std::max(report.max_abs_difference, diff);
            report.max_relative_difference = std::max(report.max_relative_difference, rel);
            ++report.agreement_outputs;
            if (!(rel <= opt.tolerance)) {
              std::ostringstream msg;
              msg << "fa3 and csr paths disagree: " << where() << ": max abs difference " << diff
                  << ", relative " << rel << " exceeds " << opt.tolerance;
              throw verification_error(msg.str());
            }
          }
        }
      }
    }
  }
  if (verify) ++report.verified_rounds;
  if (compare) ++report.agreement_rounds;
}

}  // namespace specgraph::sim
