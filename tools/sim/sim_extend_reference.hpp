// The float64 dense reference of the draft-extend forward (issue 30 item 5, docs/main-job.md):
// one request's whole verify window of W tokens attends causally over its committed prefix and
// the window itself, query j seeing keys [0, seq_len + j] (spec draft-extend.md section 1). K/V
// are read by position from the request's own data (its prefix's and the window's vectors),
// never through page tables or CSR indices, so the reference is independent of every layout the
// library writes (C1, C2p, C2f). Host only, header only; no stream, no synchronisation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace specgraph::sim {

// One request's extend inputs, float vectors of `heads * head_dim` per token (head-major inside):
//   prefix_k / prefix_v: [seq_len][hd], the committed positions 0 .. seq_len - 1;
//   q / k / v:           [W][hd], window token j at position seq_len + j.
// Ranges: heads and head_dim >= 1, seq_len >= 0, W >= 1; the vectors exactly that long.
struct extend_reference_input {
  std::int32_t heads = 0, head_dim = 0, seq_len = 0, window = 0;
  double scale = 0;  // softmax scale (1 / sqrt(head_dim) in the simulator)
  const float* prefix_k = nullptr;
  const float* prefix_v = nullptr;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
};

// out: [W][heads * head_dim] in float64. Throws invalid_argument on a range error (the field, its
// value and the limit). Arithmetic in double; sizes in std::size_t (seq_len + W < 2^31 by range).
inline void extend_reference(const extend_reference_input& in, std::vector<double>& out) {
  auto need = [](bool ok, const char* field, std::int64_t value, const char* limit) {
    if (!ok) {
      throw std::invalid_argument(std::string("extend_reference: ") + field + " " +
                                  std::to_string(value) + " " + limit);
    }
  };
  need(in.heads >= 1, "heads", in.heads, "must be >= 1");
  need(in.head_dim >= 1, "head_dim", in.head_dim, "must be >= 1");
  need(in.seq_len >= 0, "seq_len", in.seq_len, "must be >= 0");
  need(in.window >= 1, "window", in.window, "must be >= 1");
  need(in.seq_len == 0 || (in.prefix_k != nullptr && in.prefix_v != nullptr), "seq_len", in.seq_len,
       "needs prefix_k and prefix_v");
  need(in.q != nullptr && in.k != nullptr && in.v != nullptr, "window", in.window,
       "needs q, k and v");
  const std::size_t hd = static_cast<std::size_t>(in.heads) * in.head_dim;
  const std::size_t W = static_cast<std::size_t>(in.window);
  const std::size_t S = static_cast<std::size_t>(in.seq_len);
  out.assign(W * hd, 0.0);
  std::vector<double> score(S + W);
  // Key i (by position): the prefix's for i < seq_len, else the window's token i - seq_len.
  auto key = [&](std::size_t i) { return i < S ? in.prefix_k + i * hd : in.k + (i - S) * hd; };
  auto value = [&](std::size_t i) { return i < S ? in.prefix_v + i * hd : in.v + (i - S) * hd; };
  for (std::size_t j = 0; j < W; ++j) {
    const std::size_t keys = S + j + 1;  // causal over prefix + window: [0, seq_len + j]
    for (std::int32_t h = 0; h < in.heads; ++h) {
      const std::size_t off = static_cast<std::size_t>(h) * in.head_dim;
      const float* qv = in.q + j * hd + off;
      double top = -INFINITY;
      for (std::size_t i = 0; i < keys; ++i) {
        const float* kv = key(i) + off;
        double dot = 0;
        for (std::int32_t d = 0; d < in.head_dim; ++d) {
          dot += static_cast<double>(qv[d]) * static_cast<double>(kv[d]);
        }
        score[i] = dot * in.scale;
        top = std::max(top, score[i]);
      }
      double sum = 0;
      for (std::size_t i = 0; i < keys; ++i) {
        score[i] = std::exp(score[i] - top);
        sum += score[i];
      }
      double* o = out.data() + j * hd + off;
      for (std::size_t i = 0; i < keys; ++i) {
        const float* vv = value(i) + off;
        const double w = score[i] / sum;
        for (std::int32_t d = 0; d < in.head_dim; ++d) o[d] += w * static_cast<double>(vv[d]);
      }
    }
  }
}

}  // namespace specgraph::sim
