// The simulated engine's draft-extend checks (sim_extend_round.cpp): the tokens layout (each
// window token's position and slot, each request's select index) against the engine's own
// state, each attention path against the float64 dense reference by position
// (sim_extend_reference.hpp: the request's draft K/V and the window's, never the tables), and
// with format both the FA3 path against both CSR layouts'.
#include <sstream>

#include "tools/sim/sim_engine.hpp"
#include "tools/sim/sim_engine_impl.hpp"
#include "tools/sim/sim_extend_reference.hpp"

namespace specgraph::sim {

void sim_engine::impl::check_extend_outputs(std::int32_t round, std::int32_t batch,
                                            std::int32_t bucket, bool verify,
                                            const std::vector<std::int32_t>& pool,
                                            const std::vector<std::int32_t>& seq,
                                            const std::vector<std::int32_t>& accept_len,
                                            run_report& report) {
  extend_state& E = es;
  extend_stats& st = report.extend;
  const std::int32_t W = E.window;
  const std::size_t B = static_cast<std::size_t>(batch), rows = B * static_cast<std::size_t>(W);
  auto fail = [&](const std::string& what) {
    throw verification_error("verification failed: round " + std::to_string(round) +
                             ", extend step, bucket " + std::to_string(bucket) + ": " + what);
  };
  std::vector<std::int32_t> position(rows), slot(rows), select(B);
  ex->copy_to_host(position.data(), E.position.data(), rows * 4);
  ex->copy_to_host(slot.data(), E.out_cache_loc.data(), rows * 4);
  ex->copy_to_host(select.data(), E.select_index.data(), B * 4);
  for (std::size_t r = 0; r < B; ++r) {
    const std::int32_t* tokens = req_to_token.data() + static_cast<std::size_t>(pool[r]) * width;
    for (std::int32_t j = 0; j < W; ++j) {
      const std::size_t t = r * static_cast<std::size_t>(W) + static_cast<std::size_t>(j);
      if (position[t] != seq[r] + j || slot[t] != tokens[seq[r] + j]) {
        fail("request " + std::to_string(r) + ", window token " + std::to_string(j) +
             ": position " + std::to_string(position[t]) + ", slot " + std::to_string(slot[t]) +
             ", want " + std::to_string(seq[r] + j) + ", " + std::to_string(tokens[seq[r] + j]));
      }
    }
    const std::int64_t want = static_cast<std::int64_t>(r) * W + accept_len[r] - 1;
    if (select[r] != want) {
      fail("request " + std::to_string(r) + ": select index " + std::to_string(select[r]) +
           ", want " + std::to_string(want) + " (accept length " + std::to_string(accept_len[r]) +
           ")");
    }
  }
  const bool compare = run_fa3 && run_csr && opt.verify != sim_options::verify_mode::none;
  if (!verify && !compare) return;
  const std::size_t elems = rows * hd;
  std::vector<float> fa3(run_fa3 ? elems : 0), full(run_csr ? elems : 0),
      prefix(run_csr ? elems : 0);
  if (run_fa3) ex->copy_to_host(fa3.data(), E.o_fa3.data(), elems * sizeof(float));
  if (run_csr) {
    ex->copy_to_host(full.data(), E.o_full.data(), elems * sizeof(float));
    ex->copy_to_host(prefix.data(), E.out_prefix.data(), elems * sizeof(float));
  }
  std::vector<double> ref;
  for (std::size_t r = 0; r < B; ++r) {
    const request& req = requests[static_cast<std::size_t>(pool[r] - 1)];
    const std::size_t base = r * static_cast<std::size_t>(W) * hd;
    if (verify) {
      extend_reference_input in;
      in.heads = opt.heads;
      in.head_dim = opt.head_dim;
      in.seq_len = seq[r];
      in.window = W;
      in.scale = 1.0 / std::sqrt(static_cast<double>(opt.head_dim));
      in.prefix_k = req.dk.data();
      in.prefix_v = req.dv.data();
      in.q = E.h_q.data() + base;
      in.k = E.h_k.data() + base;
      in.v = E.h_v.data() + base;
      extend_reference(in, ref);
    }
    for (std::int32_t j = 0; j < W; ++j) {
      for (std::int32_t h = 0; h < opt.heads; ++h) {
        const std::size_t at = base + (static_cast<std::size_t>(j) * opt.heads + h) * opt.head_dim;
        auto where = [&](const char* path) {
          std::ostringstream w;
          w << "request " << r << ", window token " << j << ", head " << h << " (" << path
            << " path)";
          return w.str();
        };
        // max |got - want| over the head's vector, relative to max |want|.
        auto relative = [&](const float* got, auto want) {
          double diff = 0, scale = 0;
          for (std::int32_t d = 0; d < opt.head_dim; ++d) {
            const double x = static_cast<double>(want[d]);
            diff = std::max(diff, std::abs(static_cast<double>(got[d]) - x));
            scale = std::max(scale, std::abs(x));
          }
          return diff / std::max(scale, 1e-30);
        };
        if (verify) {
          const double* want = ref.data() + (at - base);
          struct path {
            bool ran;
            const std::vector<float>* out;
            double* max;
            const char* name;
          } paths[] = {{run_fa3, &fa3, &st.max_relative_error_fa3, "fa3"},
                       {run_csr, &full, &st.max_relative_error_full, "csr full"},
                       {run_csr, &prefix, &st.max_relative_error_prefix, "csr prefix"}};
          for (const path& x : paths) {
            if (!x.ran) continue;
            const double rel = relative(x.out->data() + at, want);
            *x.max = std::max(*x.max, rel);
            if (!(rel <= opt.tolerance)) {
              std::ostringstream m;
              m << where(x.name) << ": relative error " << rel << " exceeds " << opt.tolerance;
              fail(m.str());
            }
          }
          ++st.verified_outputs;
        }
        if (compare) {  // both CSR layouts: the full one reads the same slots as FA3's table,
                        // the prefix one merges two passes (the window from the forward's k / v)
          const double rel = std::max(relative(full.data() + at, fa3.data() + at),
                                      relative(prefix.data() + at, fa3.data() + at));
          st.max_relative_difference = std::max(st.max_relative_difference, rel);
          ++st.agreement_outputs;
          if (!(rel <= opt.tolerance)) {
            std::ostringstream m;
            m << where("fa3 vs csr") << ": the paths disagree, relative " << rel << " exceeds "
              << opt.tolerance;
            fail(m.str());
          }
        }
      }
    }
  }
  if (verify) ++st.verified_rounds;
  if (compare) ++st.agreement_rounds;
}

}  // namespace specgraph::sim
