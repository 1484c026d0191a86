// The engine side of the inputs-read-in-place tests (engine_inputs.hpp): an engine's own static
// input tensors, [max_bucket] index arrays and a [max_bucket][topk][S] slot tensor, each in a
// randomly chosen dtype and layout (int32 / int64, element strides > 1, a slot row wider than
// num_steps, a branch-major or slot-major order), with the engine's own padding rows (pool row
// 0, seq_len 1, slots 0) past the real batch, and optionally its real_batch word.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "specgraph/buffers.hpp"
#include "specgraph/engine_inputs.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/runtime.hpp"
#include "tests/runtime_support.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {

struct input_layout {
  bool pool64 = true, seq64 = true, slots64 = true;
  std::int64_t pool_stride = 1, seq_stride = 1;
  std::int64_t slots = 0;       // slots per branch row (>= num_steps)
  bool slot_major = false;      // [r][j][t] in memory instead of [r][t][j]
  bool bind_real_batch = true;  // the engine's real_batch word bound

  std::string describe() const {
    return std::string("pool ") + (pool64 ? "int64" : "int32") + " stride " +
           std::to_string(pool_stride) + ", seq " + (seq64 ? "int64" : "int32") + " stride " +
           std::to_string(seq_stride) + ", slots " + (slots64 ? "int64" : "int32") + " S " +
           std::to_string(slots) + (slot_major ? " slot-major" : "") +
           (bind_real_batch ? ", real_batch bound" : ", no real_batch");
  }
};

inline input_layout random_layout(std::mt19937_64& rng, std::int32_t num_steps) {
  input_layout l;
  l.pool64 = rng() % 2 == 0;
  l.seq64 = rng() % 2 == 0;
  l.slots64 = rng() % 3 != 0;
  l.pool_stride = 1 + static_cast<std::int64_t>(rng() % 3);
  l.seq_stride = 1 + static_cast<std::int64_t>(rng() % 3);
  l.slots = num_steps + static_cast<std::int64_t>(rng() % 3);
  l.slot_major = rng() % 3 == 0;
  l.bind_real_batch = rng() % 2 == 0;
  return l;
}

// The engine's tensors in executor memory. Element values are int64 on the host side; a value
// that does not fit an int32 tensor must not be asked for (the test picks int64 for those).
class engine_tensors {
 public:
  engine_tensors(executor& ex, const input_layout& l, std::int32_t max_bucket, std::int32_t topk)
      : ex_(&ex),
        l_(l),
        rows_(max_bucket),
        topk_(topk),
        pool_(static_cast<std::size_t>(max_bucket) * l.pool_stride, 0),
        seq_(static_cast<std::size_t>(max_bucket) * l.seq_stride, 0),
        slots_(static_cast<std::size_t>(max_bucket) * topk * l.slots, 0),
        d_pool_(ex, bytes(pool_.size(), l.pool64)),
        d_seq_(ex, bytes(seq_.size(), l.seq64)),
        d_slots_(ex, bytes(slots_.size(), l.slots64)),
        d_real_(ex, sizeof(std::int32_t)) {}

  // The round: rows [0, batch) from `r` (its slot rows config_stride wide), then the engine's
  // padding rows. Cells between strided elements hold poison the kernels must never read.
  void write(const host_round& r, std::int32_t config_stride) {
    std::fill(pool_.begin(), pool_.end(), -777);
    std::fill(seq_.begin(), seq_.end(), -777);
    std::fill(slots_.begin(), slots_.end(), -777);
    for (std::int32_t i = 0; i < rows_; ++i) {
      const bool real = i < r.batch;
      pool_[static_cast<std::size_t>(i * l_.pool_stride)] =
          real ? r.req_pool_index[static_cast<std::size_t>(i)] : 0;
      seq_[static_cast<std::size_t>(i * l_.seq_stride)] =
          real ? r.seq_len[static_cast<std::size_t>(i)] : 1;
      for (std::int32_t t = 0; t < topk_; ++t) {
        for (std::int64_t j = 0; j < l_.slots; ++j) {
          std::int64_t v = 0;
          if (real && j < config_stride) {
            v = r.out_cache_loc[(static_cast<std::size_t>(i) * topk_ + t) * config_stride +
                                static_cast<std::size_t>(j)];
          } else if (j >= config_stride) {
            v = -5;  // past the slots a round reads: never read
          }
          slots_[static_cast<std::size_t>(slot_offset(i, t, j))] = v;
        }
      }
    }
    upload(d_pool_, pool_, l_.pool64);
    upload(d_seq_, seq_, l_.seq64);
    upload(d_slots_, slots_, l_.slots64);
    const std::int32_t batch = r.batch;
    ex_->copy_to_device(d_real_.data(), &batch, sizeof(batch));
    ex_->synchronize();
  }
  // One element set directly (a bad value the test plants), int64 on the host side.
  void set_pool(std::int32_t i, std::int64_t v) {
    pool_[static_cast<std::size_t>(i * l_.pool_stride)] = v;
  }
  void set_seq(std::int32_t i, std::int64_t v) {
    seq_[static_cast<std::size_t>(i * l_.seq_stride)] = v;
  }
  void set_slot(std::int32_t i, std::int32_t t, std::int64_t j, std::int64_t v) {
    slots_[static_cast<std::size_t>(slot_offset(i, t, j))] = v;
  }
  void reupload() {
    upload(d_pool_, pool_, l_.pool64);
    upload(d_seq_, seq_, l_.seq64);
    upload(d_slots_, slots_, l_.slots64);
    ex_->synchronize();
  }

  engine_inputs inputs() const {
    engine_inputs in;
    in.req_pool_index = {d_pool_.data(), l_.pool64 ? index_type::int64 : index_type::int32,
                         l_.pool_stride};
    in.seq_len = {d_seq_.data(), l_.seq64 ? index_type::int64 : index_type::int32, l_.seq_stride};
    in.out_cache_loc.data = d_slots_.data();
    in.out_cache_loc.type = l_.slots64 ? index_type::int64 : index_type::int32;
    in.out_cache_loc.request_stride = topk_ * l_.slots;
    in.out_cache_loc.branch_stride = l_.slot_major ? 1 : l_.slots;
    in.out_cache_loc.slot_stride = l_.slot_major ? topk_ : 1;
    in.out_cache_loc.slots = l_.slots;
    in.real_batch = l_.bind_real_batch ? d_real_.as<std::int32_t>() : nullptr;
    return in;
  }

 private:
  static std::size_t bytes(std::size_t n, bool is64) {
    return std::max<std::size_t>(n, 1) * (is64 ? 8 : 4);
  }
  std::int64_t slot_offset(std::int32_t i, std::int32_t t, std::int64_t j) const {
    const std::int64_t base = static_cast<std::int64_t>(i) * topk_ * l_.slots;
    return l_.slot_major ? base + j * topk_ + t
                         : base + static_cast<std::int64_t>(t) * l_.slots + j;
  }
  void upload(device_buffer& d, const std::vector<std::int64_t>& v, bool is64) {
    if (is64) {
      ex_->copy_to_device(d.data(), v.data(), v.size() * sizeof(std::int64_t));
      return;
    }
    std::vector<std::int32_t> narrow(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) narrow[i] = static_cast<std::int32_t>(v[i]);
    ex_->copy_to_device(d.data(), narrow.data(), narrow.size() * sizeof(std::int32_t));
  }

  executor* ex_;
  input_layout l_;
  std::int32_t rows_, topk_;
  std::vector<std::int64_t> pool_, seq_, slots_;
  device_buffer d_pool_, d_seq_, d_slots_, d_real_;
};

// ---- rounds in every replay mode ------------------------------------------------------------
enum class mode { replay_steps, round_graph, eager, device_steps, device_depth };
inline const char* name_of(mode m) {
  switch (m) {
    case mode::replay_steps: return "per-step graphs";
    case mode::round_graph: return "whole-round graph";
    case mode::eager: return "eager";
    case mode::device_steps: return "device step counter";
    case mode::device_depth: return "device-decided depth";
  }
  return "?";
}
inline constexpr mode all_modes[] = {mode::replay_steps, mode::round_graph, mode::eager,
                                     mode::device_steps, mode::device_depth};

inline draft_config config_for(mode m, std::int32_t page_size, bool csr) {
  draft_config c;
  c.max_batch = 12;
  c.topk = 3;
  c.num_steps = 4;
  c.page_size = page_size;
  c.max_context_len = 64;
  c.pool_rows = 16;
  c.kv_slots = 1 << 20;
  c.round_graphs = m == mode::round_graph;
  c.device_steps = m == mode::device_steps || m == mode::device_depth;
  c.device_depth = m == mode::device_depth;
  c.formats = csr ? metadata_formats::both : metadata_formats::fa3;
  return c;
}

inline void run_full_round(draft_runtime& rt, mode m) {
  const std::int32_t steps = rt.plan().config.num_steps;
  switch (m) {
    case mode::replay_steps:
      for (std::int32_t s = 0; s < steps; ++s) rt.replay(s);
      break;
    case mode::eager:
      for (std::int32_t s = 0; s < steps; ++s) rt.run_eager(s);
      break;
    case mode::round_graph:
    case mode::device_steps: rt.run_round(steps); break;
    case mode::device_depth: rt.run_round_on_device(); break;
  }
}

// The engine (staged or in place) after a round from a poisoned arena: every cell the round
// writes equals the model, the cells of rows past the bucket still hold the poison, and the
// guard words count what the model refuses.
inline void expect_round(sim_engine& eng, const model_round& want) {
  const draft_buffers& b = eng.rt().buffers();
  const plan& p = eng.rt().plan();
  const auto B = static_cast<std::size_t>(want.bucket);
  const auto topk = static_cast<std::size_t>(eng.config().topk);
  const std::size_t rows = B * topk;
  const std::size_t max_rows = static_cast<std::size_t>(p.max_bucket()) * topk;
  const auto columns = static_cast<std::size_t>(want.prefix_columns);
  const std::vector<std::int32_t> table =
      eng.read(b.prefix_page_table(), static_cast<std::size_t>(p.max_bucket()) * columns);
  EXPECT_EQ(std::vector<std::int32_t>(table.begin(), table.begin() + B * columns),
            want.prefix_table)
      << "prefix page table";
  for (std::size_t i = B * columns; i < table.size(); ++i) {
    ASSERT_EQ(table[i], static_cast<std::int32_t>(0xA5A5A5A5)) << "prefix cell " << i;
  }
  EXPECT_EQ(eng.read(b.last_page_len(), B), want.last_page_len) << "last_page_len";
  EXPECT_EQ(eng.read(b.prefix_seqlen(), B), want.prefix_seqlen) << "prefix_seqlen";
  EXPECT_EQ(eng.read(b.cu_seqlens_q(), B + 1), want.cu_seqlens_q) << "cu_seqlens_q";
  const std::vector<guard_word> guards = eng.rt().read_guards();
  EXPECT_EQ(guards[plan_layout::guard_prefix].violations, want.prefix_violations)
      << describe(guards[plan_layout::guard_prefix]);
  const bool per_step_tables = !eng.config().device_steps;
  for (std::int32_t s = 0; s < eng.config().num_steps; ++s) {
    const auto i = static_cast<std::size_t>(s);
    EXPECT_EQ(eng.read(eng.probe_out(s), rows), want.probe[i]) << "forward inputs, step " << s;
    const guard_word& g = guards[static_cast<std::size_t>(plan_layout::guard_expand(s))];
    EXPECT_EQ(g.violations, want.expand_violations[i]) << "step " << s << ": " << describe(g);
    if (!per_step_tables) continue;  // one shared table: it holds the last step
    const std::vector<std::int32_t> expand = eng.read(b.expand_page_table(s), max_rows * (i + 2));
    EXPECT_EQ(std::vector<std::int32_t>(expand.begin(), expand.begin() + rows * (i + 2)),
              want.expand_table[i])
        << "expand page table, step " << s;
    for (std::size_t c = rows * (i + 2); c < expand.size(); ++c) {
      ASSERT_EQ(expand[c], static_cast<std::int32_t>(0xA5A5A5A5)) << "expand cell " << c;
    }
    EXPECT_EQ(eng.read(b.expand_cache_seqlen(s), rows), want.cache_seqlen[i])
        << "cache_seqlen, step " << s;
  }
}

// The CSR indices of the two runtimes (staged, in place) are the same cells.
inline void expect_same_csr(sim_engine& staged, sim_engine& in_place, std::int32_t bucket) {
  const plan& p = staged.rt().plan();
  if (p.layout.csr_kv_indices.empty()) return;
  const auto rows = static_cast<std::size_t>(bucket) * static_cast<std::size_t>(p.config.topk);
  const auto stride = static_cast<std::size_t>(p.max_rows()) + 1;
  const std::int32_t steps = p.config.num_steps;
  for (std::int32_t s = 0; s < steps; ++s) {
    const std::size_t at = static_cast<std::size_t>(s) * stride;
    const std::vector<std::int32_t> a =
        staged.read(staged.rt().buffers().csr_kv_indptr() + at, rows + 1);
    const std::vector<std::int32_t> b =
        in_place.read(in_place.rt().buffers().csr_kv_indptr() + at, rows + 1);
    EXPECT_EQ(a, b) << "kv_indptr, step " << s;
    const auto n = static_cast<std::size_t>(a.back());
    const auto* ia = static_cast<const std::int32_t*>(staged.rt().buffers().csr_kv_indices(s));
    const auto* ib = static_cast<const std::int32_t*>(in_place.rt().buffers().csr_kv_indices(s));
    EXPECT_EQ(staged.read(ia, n), in_place.read(ib, n)) << "kv_indices, step " << s;
  }
}

}  // namespace specgraph::testing
