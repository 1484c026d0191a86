// The round loop's admissions and staging (tools/sim/round_loop.hpp): a new request's row, K/V
// and first round's inputs (by the library's next_round host twin, as after a prefill), the
// batch restaged, and the engine's allocator publishing ring pages.
#include <algorithm>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/next_round_metadata.hpp"
#include "tools/sim/round_loop_impl.hpp"

namespace specgraph::sim::loop {

// A new request on row r (pool row r + 1): a random prefix, its row backed to
// ceil_page(seq_len + R) from the admission pages (the previous request's pages released
// first), its K/V written by position, and its first round's draft slots and prefix-tail copies
// from the library's next_round host twin (a row that goes on after a prefill).
void engine::admit(std::int32_t r) {
  const std::int32_t pr = r + 1;
  const std::int64_t ps = opt.page_size;
  std::int32_t* row = h_r2t.data() + static_cast<std::int64_t>(pr) * width;
  for (std::int64_t q = 0; q < allocated[static_cast<std::size_t>(r)]; q += ps) {
    admit_pages.push_back(static_cast<std::int32_t>(row[q] / ps));  // back to the allocator
  }
  const std::uint64_t salt = rng() | 1;
  const auto s = std::uniform_int_distribution<std::int32_t>(opt.min_context, opt.max_context)(rng);
  const std::int64_t alloc = (s + reserve + ps - 1) / ps * ps;
  std::fill(row, row + width, 0);
  for (std::int64_t q = 0; q < alloc; q += ps) {
    if (admit_next >= static_cast<std::int64_t>(admit_pages.size())) {
      throw error(
          "round loop: the admission pages ran out (the pool is sized for twice the batch)");
    }
    const std::int64_t page = admit_pages[static_cast<std::size_t>(admit_next++)];
    for (std::int64_t i = 0; i < ps; ++i) row[q + i] = static_cast<std::int32_t>(page * ps + i);
  }
  h_salt[static_cast<std::size_t>(pr)] = salt;
  seq[static_cast<std::size_t>(r)] = s;
  next_seq[static_cast<std::size_t>(r)] = s;  // its first round's seq_len
  pool[static_cast<std::size_t>(r)] = pr;
  allocated[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(alloc);
  if (!left.empty()) left[static_cast<std::size_t>(r)] = opt.max_new_tokens;

  next_round_sizes z = next_round_exact_capacities(1, D, opt.num_steps, opt.topk, opt.page_size);
  next_round_params p = z.capacities;
  const std::int32_t bonus = 0;
  std::int32_t alloc32 = static_cast<std::int32_t>(alloc), pr32 = pr;
  const std::int32_t ring_dummy = 0;
  std::int64_t head = 0;
  const std::int64_t tail_word = 0;
  std::int32_t stall = 0, active = 0, seq_out = 0, root = 0;
  std::vector<std::int32_t> position(static_cast<std::size_t>(opt.topk));
  std::vector<std::int64_t> draft(static_cast<std::size_t>(p.draft_out_cache_loc_capacity));
  std::vector<std::int32_t> copies(
      static_cast<std::size_t>(std::max<std::int64_t>(1, p.tail_copy_capacity)));
  std::vector<std::int64_t> verify(static_cast<std::size_t>(p.verify_out_cache_loc_capacity));
  std::vector<std::int64_t> scratch(static_cast<std::size_t>(z.scratch_capacity));
  guard_word guard[next_round_guard_count] = {};
  p.new_seq_len = &seq[static_cast<std::size_t>(r)];
  p.bonus = &bonus;
  p.req_pool_index = &pr32;
  p.req_to_token = h_r2t.data();
  p.req_to_token_stride = width;
  p.pool_rows = pool_rows;
  p.allocated_len = &alloc32;
  p.ring = &ring_dummy;
  p.ring_capacity = 1;
  p.ring_head = &head;
  p.ring_tail = &tail_word;
  p.stall = &stall;
  p.reserve = static_cast<std::int32_t>(reserve);
  p.active = &active;
  p.seq_len = &seq_out;
  p.root_token = &root;
  p.draft_position = position.data();
  p.draft_out_cache_loc = draft.data();
  p.tail_copy = p.tail_copy_capacity > 0 ? copies.data() : nullptr;
  p.verify_out_cache_loc = verify.data();
  p.scratch = scratch.data();
  p.guard = guard;
  next_round_host(p);
  for (const guard_word& g : guard) {
    if (g.violations != 0)
      throw error("round loop: admitting row " + std::to_string(r) + ": " + describe(g));
  }
  if (active != 1 || seq_out != s || alloc32 != alloc) {
    throw error("round loop: the first round of row " + std::to_string(r) + " is not active");
  }
  std::copy(draft.begin(), draft.end(),
            slots.begin() + static_cast<std::int64_t>(r) * opt.topk * stride);
  if (tail_pairs > 0) {
    std::copy(copies.begin(), copies.begin() + tail_pairs * 2, tail.begin() + r * tail_pairs * 2);
  }
  upload_row(r);
}

// The new request's row, salt and prefix K/V into executor memory (eager, outside any graph).
void engine::upload_row(std::int32_t r) {
  const std::int32_t pr = pool[static_cast<std::size_t>(r)];
  ex.copy_to_device(d_r2t.as<std::int32_t>() + static_cast<std::int64_t>(pr) * width,
                    h_r2t.data() + static_cast<std::int64_t>(pr) * width,
                    static_cast<std::size_t>(width) * 4);
  ex.copy_to_device(d_salt.as<std::uint64_t>() + pr, &h_salt[static_cast<std::size_t>(pr)], 8);
  const std::int32_t zero = 0;
  ex.copy_to_device(admit_pool.data(), &pr, 4);
  ex.copy_to_device(admit_begin.data(), &zero, 4);
  ex.copy_to_device(admit_count.data(), &seq[static_cast<std::size_t>(r)], 4);
  loop_commit_kv_kernel::params c{admit_real.as<std::int32_t>(),
                                  admit_pool.as<std::int32_t>(),
                                  admit_begin.as<std::int32_t>(),
                                  admit_count.as<std::int32_t>(),
                                  d_r2t.as<std::int32_t>(),
                                  width,
                                  d_salt.as<std::uint64_t>(),
                                  hd,
                                  k_pool.as<float>(),
                                  v_pool.as<float>()};
  // The engine's prefill: device work (on the host executor it runs on this thread).
  device_work(false, [&] { launch_rows<loop_commit_kv_kernel>(ex, c, 1, lcuda.commit_kv); });
}

// The batch's state into the runtime's staged inputs and the round section (allocated_len, the
// prefix-tail copies and, in the device loop, the budgets; padded rows: nothing allocated, no
// copies). The host-driven rounds' budgets live in the host arena (run_host).
void engine::stage_all() {
  round_inputs in;
  in.batch = opt.batch;
  in.req_pool_index = pool.data();
  in.seq_len = seq.data();
  in.out_cache_loc = slots.data();
  rt_->stage(in);
  const round_view v = rt_->buffers().round(bucket_);
  ex.copy_to_device(v.allocated_len, allocated.data(), allocated.size() * 4);
  if (tail_pairs > 0) ex.copy_to_device(v.next.tail_copy, tail.data(), tail.size() * 4);
  if (device_mode && !left.empty())
    ex.copy_to_device(v.max_new_tokens_left, left.data(), left.size() * 4);
}

// The engine's allocator: ring entries up to ring_head_seen + ahead published (entry e holds
// ring_pages[e], whenever it is published), then the tail word.
void engine::publish_ring(std::int64_t ahead) {
  const std::int64_t capacity = pages_per_round * opt.rounds_per_launch;
  const std::int64_t target =
      std::min<std::int64_t>(ring_head_seen + ahead, static_cast<std::int64_t>(ring_pages.size()));
  if (target <= tail_published) return;
  if (target - ring_head_seen > capacity)
    throw error("round loop: the ring would overwrite live entries");
  for (std::int64_t e = tail_published; e < target;) {
    const std::int64_t at = e % capacity;
    const std::int64_t n = std::min(target - e, capacity - at);
    if (device_mode) {
      ex.copy_to_device(ring.as<std::int32_t>() + at, ring_pages.data() + e,
                        static_cast<std::size_t>(n) * 4);
    } else {
      std::copy(ring_pages.begin() + e, ring_pages.begin() + e + n, host_ring.begin() + at);
    }
    e += n;
  }
  tail_published = target;
  if (device_mode) ex.copy_to_device(ring_tail.data(), &tail_published, 8);
}

}  // namespace specgraph::sim::loop
