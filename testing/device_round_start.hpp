// The device-round rig's starting state and record, shared by the tests
// (tests/device_round_test.cpp) and the benchmark (bench/bench_device_round.cpp): one staged
// starting state (the engine's req_to_token, the ring, every row backed to
// ceil_page(seq_len + R)), the first round's draft slots, and what K rounds produced. No
// GoogleTest here; test code, not the library's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specgraph/plan.hpp"

namespace specgraph::testing {

// The stop token the toy verify forward emits now and then (testing/round_forward.hpp).
inline constexpr std::int32_t stop_id = 7;

// The starting state: `real` rows (in the plan's smallest bucket that holds them) on pool rows
// 1.. with random committed lengths 1..20, backed with
// pages 1, 2, ... (junk -9 after); padded rows at seq_len 1 on pool row 0 (slots 0); the ring
// holding `ring_rounds` rounds' worst case B * ceil(S / ps) pages.
struct dr_start {
  std::int32_t bucket = 4, real = 3;
  std::vector<std::int32_t> seq_len, pool, allocated_len;  // [bucket]
  std::vector<std::int32_t> req_to_token;                  // [pool_rows][W]
  std::vector<std::int32_t> ring;
  std::int64_t tail = 0;
  std::int64_t width = 0;
  // Each row's length budget (max_new_tokens_left), [bucket]; empty: the rounds run without one.
  std::vector<std::int32_t> budget;
};

inline dr_start make_start(const plan& p, std::int32_t real, std::int64_t ring_rounds,
                           std::mt19937_64& rng) {
  const draft_config& c = p.config;
  dr_start s;
  s.real = real;
  s.bucket = p.bucket_for(real);
  const std::int64_t ps = c.page_size, W = c.max_context_len, R = p.layout.round.reserve;
  s.width = W;
  s.req_to_token.assign(static_cast<std::size_t>(c.pool_rows * W), -9);
  // Pool row 0 is the padding rows' (SGLang's): slot 0 everywhere.
  std::fill(s.req_to_token.begin(), s.req_to_token.begin() + W, 0);
  std::int32_t next_page = 1;
  for (std::int32_t r = 0; r < s.bucket; ++r) {
    const bool is_real = r < real;
    const std::int32_t seq = is_real ? 1 + static_cast<std::int32_t>(rng() % 20) : 1;
    const std::int32_t row = is_real ? r + 1 : 0;
    const std::int64_t alloc = is_real ? (seq + R + ps - 1) / ps * ps : 0;
    for (std::int64_t q = 0; q < alloc; q += ps, ++next_page) {
      for (std::int64_t o = 0; o < ps; ++o) {
        s.req_to_token[static_cast<std::size_t>(row * W + q + o)] =
            static_cast<std::int32_t>(next_page * ps + o);
      }
    }
    s.seq_len.push_back(seq);
    s.pool.push_back(row);
    s.allocated_len.push_back(static_cast<std::int32_t>(alloc));
  }
  const std::int64_t per_round = s.bucket * ((c.num_steps + 1 + ps - 1) / ps);
  s.ring.assign(static_cast<std::size_t>(per_round * ring_rounds + 1), -1);
  for (; s.tail < per_round * ring_rounds; ++s.tail) {
    s.ring[static_cast<std::size_t>(s.tail)] = next_page++;
  }
  return s;
}

// The first round's draft slots [real][topk][slot_stride]: as the next round would write them
// when branches are not paged (page size 1 or topk 1: step j of branch t at position
// seq_len + t * num_steps + j), so checked mode's layout checks hold; 0 otherwise.
inline std::vector<std::int64_t> first_slots(const plan& p, const dr_start& s) {
  const draft_config& c = p.config;
  const std::int64_t k = c.topk, n = c.num_steps, stride = c.slot_stride;
  std::vector<std::int64_t> out(static_cast<std::size_t>(s.real * k * stride), 0);
  if (c.page_size > 1 && k > 1) return out;
  for (std::int64_t r = 0; r < s.real; ++r) {
    const std::int64_t row = s.pool[static_cast<std::size_t>(r)];
    for (std::int64_t t = 0; t < k; ++t) {
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t pos = s.seq_len[static_cast<std::size_t>(r)] + t * n + j;
        out[static_cast<std::size_t>((r * k + t) * stride + j)] =
            s.req_to_token[static_cast<std::size_t>(row * s.width + pos)];
      }
    }
  }
  return out;
}

// What K rounds produced.
struct dr_record {
  // Per round: accept_index [B][S], accept_length, bonus, finished [B]; draft extend's
  // accept_len and seq_len [B] (the verify round's, without the window).
  std::vector<std::vector<std::int32_t>> accept_index, accept_length, bonus, finished;
  std::vector<std::vector<std::int32_t>> extend_accept_len, extend_seq_len;
  // Per round: the extend metadata's first window slot of each row [B] (0: written as padding).
  std::vector<std::vector<std::int32_t>> extend_slot;
  std::vector<std::int32_t> seq_len, allocated_len;  // [B] after the last round
  std::vector<std::int64_t> out_cache_loc;           // [B][topk][slot_stride] the real rows'
  std::vector<std::int32_t> req_to_token;
  std::int64_t ring_head = 0;
  std::int32_t stall = 0;
  std::vector<std::int32_t> tokens_left;  // [B] after the last round, with a budget
  // (c) only: the round section's violations summed over the rounds, per word.
  std::vector<std::int32_t> guard_total;
  // (b) only: every guard word the runtime's graphs and the host twins left, summed over the
  // rounds (0 when clean), and the first one described ("round k: buffer: ...").
  std::int64_t guard_violations = 0;
  std::string first_guard;
};

template <class T>
std::vector<T> slice(const T* p, std::int64_t n) {
  return std::vector<T>(p, p + n);
}

}  // namespace specgraph::testing
