// libFuzzer harness: one speculative round after verify, chained as an engine runs it: greedy
// acceptance (launch_accept / the twin accept_host), the commit (launch_commit / commit_host),
// the next round's inputs (launch_next_round / next_round_host), on one path for the round
// (eager, deferred, captured graph replay on the host executor, or the host twins), optionally
// with the device real-batch word shared by the three launches. The bytes pick the bucket's
// shape (B, real batch, D, num_steps, topk, page size), every request's tree and tokens, its
// committed length, pool row and allocation, the row width, the stop ids and budgets, the ring of
// free pages (its head, tail, stall word), the reserve, one output per stage cut short (or
// spare), and at most one bad value (a length, a tree, a pool row, an allocation, a budget, a
// ring page); sometimes a scalar out of range. Each stage's inputs are the previous stage's
// outputs.
//
// Promises checked (round_fuzz_stages.cpp), per stage:
//   * bad scalars: invalid_argument naming the field, nothing written (outputs, guard words,
//     in/out state);
//   * the twin refuses bad content by name before writing anything, and accepts everything else;
//   * the launcher records bad content in guard word 0/1 exactly as the stage's own check predicts
//     (count and lowest record) and writes the request as a padding (inactive) row;
//   * no store past a capacity, ever (ASan-poisoned canaries around every buffer), each refused
//     store counted in the outputs' guard word with the lowest one's details;
//   * every written cell equals the independent references tests/accept_reference.hpp,
//     tests/commit_reference.hpp, tests/next_round_reference.hpp; spare cells stay poisoned;
//   * inputs unchanged; the next round's req_to_token, allocated_len, ring head and stall word as
//     the reference says.
//
// Byte encoding (read in this order): select (path = select % 4, word = bit 2, budget = bit 3,
// finished pointer = bit 4 clear, stall = bits 5-7 all set: the round is stalled, so acceptance
// and the commit pad every row and the next round builds them inactive), a scalar byte (>= 0xe0:
// one scalar read raw, scalar % 6), the scalars, per request its tree seed and length, the layout,
// the ring, the stops and budgets, three cut bytes pairs, the bad byte.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "specgraph/accept_metadata.hpp"
#include "specgraph/commit_metadata.hpp"
#include "specgraph/error.hpp"
#include "specgraph/limits.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tests/fuzz/round_fuzz.hpp"
#include "tests/next_round_reference.hpp"

namespace specgraph::fuzz::round_harness {

std::int32_t round::real() const {
  return word_mode ? std::clamp(word, 0, batch) : real_batch;
}

void cut_capacities(std::uint8_t cut, std::uint8_t how, const std::int64_t* exact, int n,
                    std::int64_t* caps) {
  std::copy(exact, exact + n, caps);
  if (cut < 0x80) return;
  const int i = cut % n;
  switch (how % 4) {
    case 0: caps[i] = std::max<std::int64_t>(0, exact[i] - 1); break;
    case 1: caps[i] = 0; break;
    case 2: caps[i] = exact[i] + 1 + how % 3; break;
    default: caps[i] = std::min<std::int64_t>(exact[i], how / 4); break;
  }
}

}  // namespace specgraph::fuzz::round_harness

namespace {

using namespace specgraph;                       // NOLINT: a harness
using namespace specgraph::fuzz;                 // NOLINT
using namespace specgraph::fuzz::round_harness;  // NOLINT

// A scalar: in [lo, hi] from two bytes, or (when `raw`) any value the reader's edges give.
std::int32_t scalar(reader& in, bool raw, std::int64_t lo, std::int64_t hi, std::int64_t limit) {
  return raw ? in.value32(lo, hi, limit) : static_cast<std::int32_t>(in.small(lo, hi));
}

// Scalars out of the harness's sizes: each stage's validate() on dummy buffers must refuse by
// name or accept; nothing runs.
void probe(const round& c) {
  static std::int32_t cell[1];
  static std::int64_t cell64[2];
  static guard_word guards[3];
  accept_params a;
  a.parent = a.draft_token = a.target_predict = a.seq_len = cell;
  a.batch = c.batch;
  a.real_batch = c.real_batch;
  a.draft_tokens = c.draft_tokens;
  a.num_steps = c.num_steps;
  a.accept_length = cell;
  a.accept_length_capacity = c.batch;
  a.guard = guards;
  commit_params m;
  m.accept_index = m.accept_length = m.accept_tokens = m.seq_len = m.allocated_len = cell;
  m.req_pool_index = m.req_to_token = cell;
  m.req_to_token_stride = c.width;
  m.pool_rows = c.pool_rows;
  m.batch = c.batch;
  m.real_batch = c.real_batch;
  m.draft_tokens = c.draft_tokens;
  m.num_steps = c.num_steps;
  m.topk = c.topk;
  m.page_size = c.page_size;
  m.finished = cell;
  m.finished_capacity = c.batch;
  m.guard = guards;
  next_round_params n;
  n.new_seq_len = n.bonus = n.req_pool_index = cell;
  n.req_to_token = n.allocated_len = n.stall = cell;
  n.ring = cell;
  n.ring_capacity = 1;
  n.ring_head = cell64;
  n.ring_tail = cell64 + 1;
  n.req_to_token_stride = c.width;
  n.pool_rows = c.pool_rows;
  n.batch = c.batch;
  n.real_batch = c.real_batch;
  n.draft_tokens = c.draft_tokens;
  n.num_steps = c.num_steps;
  n.topk = c.topk;
  n.page_size = c.page_size;
  n.reserve = c.reserve;
  n.active = cell;
  n.active_capacity = c.batch;
  n.scratch = cell64;
  n.guard = guards;
  try {
    validate(a);
  } catch (const invalid_argument& e) {
    check_invalid_argument(e, "accept probe");
  }
  try {
    validate(m);
  } catch (const invalid_argument& e) {
    check_invalid_argument(e, "commit probe");
  }
  try {
    validate(n);
  } catch (const invalid_argument& e) {
    check_invalid_argument(e, "next round probe");
  }
}

void run(reader& in) {
  round c;
  const std::uint8_t select = in.byte();
  c.how = static_cast<path>(select % 4);
  c.word_mode = ((select >> 2) & 1) != 0 && c.how != path::host;
  c.has_budget = ((select >> 3) & 1) != 0;
  c.has_finished = ((select >> 4) & 1) == 0;
  const std::uint8_t raw_byte = in.byte();
  const int raw = raw_byte >= 0xe0 ? raw_byte % 6 : -1;
  const std::int32_t sizes[] = {1, 2, 4, 8, 16};
  c.page_size = raw == 0 ? in.value32(1, 16, limits::max_page_size) : sizes[in.byte() % 5];
  c.topk = scalar(in, raw == 1, 1, max_topk, limits::max_topk);
  c.num_steps = scalar(in, raw == 2, 1, max_steps, max_accept_steps);
  const std::int64_t most = std::int64_t{c.topk} * c.num_steps + 1;
  // Wrapping into int32 (a raw num_steps may be INT32_MAX): invalid values stay invalid.
  c.draft_tokens = raw == 3 ? in.value32(1, 21, max_accept_tokens)
                            : static_cast<std::int32_t>(static_cast<std::uint32_t>(
                                  c.topk == 1 ? std::int64_t{c.num_steps} + 1 : in.small(1, most)));
  c.batch = scalar(in, raw == 4, 0, max_bucket, limits::max_batch);
  const std::uint8_t real_mode = in.byte();
  c.real_batch =
      raw == 5 ? in.value32(0, c.batch, limits::max_batch)
               : (real_mode < 0xc0 ? c.batch : static_cast<std::int32_t>(in.small(0, c.batch)));
  const std::int64_t B = c.batch, D = c.draft_tokens, ps = c.page_size;
  const bool sized = B >= 0 && B <= max_bucket && c.real_batch >= 0 && c.real_batch <= B &&
                     c.num_steps >= 1 && c.num_steps <= max_steps && c.topk >= 1 &&
                     c.topk <= max_topk && D >= 1 && D <= 4 * max_steps + 1 && ps >= 1 &&
                     ps <= max_page;
  const std::int64_t r1 =
      sized ? testing::nr_reserve_formula(c.topk, c.num_steps, D, ps) : std::int64_t{1};
  c.reserve = static_cast<std::int32_t>(in.byte() < 0xe0 ? r1 : in.small(0, 2 * r1));
  if (c.word_mode) {
    const std::uint8_t w = in.byte();
    c.word = w < 0xe0 ? c.real_batch : static_cast<std::int32_t>(in.small(-2, B + 2));
    c.real_batch = c.batch;  // the word decides
  }
  if (!sized) {
    c.width = 64;
    c.pool_rows = 4;
    probe(c);
    return;
  }
  const std::int32_t real = c.real();
  const auto b = static_cast<std::size_t>(B), d = static_cast<std::size_t>(D);
  c.parent.assign(b * d, -1);
  c.draft.assign(b * d, 0);
  c.target.assign(b * d, 0);
  const std::int32_t alphabet = 1 + in.byte() % 3;
  c.pool_rows = static_cast<std::int32_t>(B + 1 + in.small(0, 2));
  const std::int64_t rot = in.small(0, c.pool_rows - 1);
  std::int64_t widest = D + 1;
  for (std::int64_t r = 0; r < B; ++r) {
    // The tree: node i's parent among [0, i), moved up to depth < num_steps; sometimes an
    // orphan (-1), whose subtree may be deeper (never reached).
    std::uint32_t h = in.u16() * 2654435761u + 1;
    auto next = [&h](std::uint32_t n) {
      h = h * 1664525u + 1013904223u;
      return static_cast<std::int32_t>((h >> 8) % n);
    };
    std::vector<std::int32_t> depth(d, 0);
    const std::uint32_t orphan_odds = 4 + in.byte() % 28;
    for (std::int64_t i = 0; i < D; ++i) {
      const auto at = static_cast<std::size_t>(r * D + i);
      c.draft[at] = next(static_cast<std::uint32_t>(alphabet));
      c.target[at] = next(static_cast<std::uint32_t>(alphabet));
      if (i == 0) continue;
      if (next(orphan_odds) == 0) {
        depth[static_cast<std::size_t>(i)] = -1;
        continue;
      }
      std::int32_t p = next(static_cast<std::uint32_t>(i));
      while (depth[static_cast<std::size_t>(p)] >= c.num_steps) p = c.parent[r * D + p];
      c.parent[at] = p;
      depth[static_cast<std::size_t>(i)] =
          depth[static_cast<std::size_t>(p)] < 0 ? -1 : depth[static_cast<std::size_t>(p)] + 1;
    }
    if (r >= real) {  // padding: junk the kernels never read (accept copies seq_len)
      c.seq_len.push_back(static_cast<std::int32_t>(in.small(-5, 5)));
      c.pool_index.push_back(static_cast<std::int32_t>(in.small(-1, 3)));
      c.allocated.push_back(static_cast<std::int32_t>(in.small(-9, 9)));
      continue;
    }
    const std::int64_t s = in.small(1, 40);
    std::int64_t a = s + D + in.small(0, r1 + 2 * ps);
    if (in.flag()) a = testing::nr_round_up(a, ps);
    c.seq_len.push_back(static_cast<std::int32_t>(s));
    c.pool_index.push_back(static_cast<std::int32_t>(1 + (r + rot) % (c.pool_rows - 1)));
    c.allocated.push_back(static_cast<std::int32_t>(a));
    widest = std::max(widest, a);
  }
  const std::uint8_t width_mode = in.byte();
  c.width = widest + (width_mode < 0x40 ? 0 : in.small(0, r1 + 2 * ps + 2));
  if (in.byte() >= 0xc0) c.slot_stride = c.num_steps + in.small(1, 3);
  // Rows backed with fresh pages (gaps of 1..3 ids), positions [0, allocated) of real rows.
  c.req_to_token.assign(static_cast<std::size_t>(c.pool_rows * c.width), -7);
  std::int64_t next_page = in.small(0, 50);
  for (std::int64_t r = 0; r < real; ++r) {
    const std::int64_t row = c.pool_index[static_cast<std::size_t>(r)];
    const std::int64_t alloc = c.allocated[static_cast<std::size_t>(r)];
    for (std::int64_t q = 0; q * ps < alloc; ++q) {
      next_page += 1 + in.byte() % 3;
      for (std::int64_t o = 0; o < ps && q * ps + o < alloc; ++o) {
        c.req_to_token[static_cast<std::size_t>(row * c.width + q * ps + o)] =
            static_cast<std::int32_t>(next_page * ps + o);
      }
    }
  }
  c.ring.resize(static_cast<std::size_t>(in.small(1, 40)));
  for (std::int32_t& e : c.ring) {
    next_page += 1 + in.byte() % 3;
    e = static_cast<std::int32_t>(next_page);
  }
  const auto cap = static_cast<std::int64_t>(c.ring.size());
  const std::uint8_t ring_mode = in.byte();
  c.head = ring_mode >= 0xe0 ? (std::int64_t{1} << 40) + in.small(0, 99) : in.small(0, 50);
  c.tail = c.head + (ring_mode % 3 == 0 ? in.small(0, cap) : cap);
  if (ring_mode % 16 == 15) c.tail = c.head - 1 - in.small(0, 2);
  c.stall = (select >> 5) == 7 ? 1 : 0;
  const std::int32_t stop_count = static_cast<std::int32_t>(in.small(0, 3));
  for (std::int32_t i = 0; i < stop_count; ++i) c.stops.push_back(in.byte() % (alphabet + 1));
  if (c.has_budget) {
    for (std::int64_t r = 0; r < B; ++r) {
      c.budget.push_back(static_cast<std::int32_t>(r < real ? in.small(1, 8) : in.small(-2, 2)));
    }
  }
  for (int k = 0; k < 3; ++k) {
    c.cut[k] = in.byte();
    c.cut_how[k] = in.byte();
  }
  // At most one bad value, in a real request (or the ring).
  const std::uint8_t bad = in.byte();
  if (bad >= 0xd0 && real > 0) {
    const auto r = static_cast<std::size_t>(in.below(real));
    const auto row = static_cast<std::size_t>(r * d);
    const std::int64_t i = 1 + in.below(std::max<std::int64_t>(D - 1, 1));
    switch (bad % 9) {
      case 0: c.seq_len[r] = in.flag() ? -1 : limits::max_context_len + 1; break;
      case 1: c.parent[row] = static_cast<std::int32_t>(in.small(0, 3)); break;
      case 2:
        if (D > 1) c.parent[row + static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
        break;
      case 3:
        if (D > 1) c.parent[row + static_cast<std::size_t>(i)] = in.flag() ? -2 : -1000;
        break;
      case 4:  // a chain 0 <- 1 <- 2 ...: reachable depth num_steps + 1 when D is big enough
        for (std::int64_t k = 1; k < D; ++k) {
          c.parent[row + static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k - 1);
        }
        break;
      case 5: c.allocated[r] = c.seq_len[r] + c.draft_tokens - 1; break;
      case 6: c.pool_index[r] = in.flag() ? -1 : c.pool_rows; break;
      case 7:
        if (c.has_budget) c.budget[r] = static_cast<std::int32_t>(in.small(-1, 0));
        break;
      default:
        c.ring[static_cast<std::size_t>(in.below(cap))] =
            in.flag() || ps == 1 ? -1 : static_cast<std::int32_t>(0x7fffffff / ps + 1);
        break;
    }
  }

  accepted a;
  if (!run_accept_stage(c, a)) return;
  std::vector<std::int32_t> finished;
  if (!run_commit_stage(c, a, finished)) return;
  run_next_round_stage(c, a, finished);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in(data, size);
  run(in);
  return 0;
}
