// Random draft-round inputs laid out as a serving engine lays them out (docs/metadata.md
// section 1): each branch starts on a fresh page holding a copy of the request's last partial
// page; draft token j sits at in-page offset (last_page_len + j) % ps; pages come from a shuffled
// free list, so page ids are not consecutive. Page 0 is reserved.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace specgraph::testing {

struct branch_round {
  std::int32_t batch = 0, topk = 0, num_steps = 0, page_size = 0;
  std::vector<std::int32_t> seq_len;        // [batch]
  std::vector<std::int32_t> last_page_len;  // [batch]
  std::vector<std::int64_t> cache_loc;      // [batch*topk][num_steps]
  std::int64_t pages_in_pool = 0;           // slots < pages_in_pool * page_size
};

inline branch_round make_branch_round(std::mt19937_64& rng, std::int32_t batch, std::int32_t topk,
                                      std::int32_t num_steps, std::int32_t page_size,
                                      std::int32_t max_context) {
  branch_round b;
  b.batch = batch;
  b.topk = topk;
  b.num_steps = num_steps;
  b.page_size = page_size;
  const std::int64_t pages_per_branch = (page_size - 1 + num_steps + page_size - 1) / page_size;
  // Twice the pages needed, shuffled: ids are scattered over a fragmented pool.
  b.pages_in_pool = 1 + 2 * static_cast<std::int64_t>(batch) * topk * pages_per_branch;
  std::vector<std::int64_t> free_pages(static_cast<std::size_t>(b.pages_in_pool - 1));
  std::iota(free_pages.begin(), free_pages.end(), 1);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);
  std::size_t next_free = 0;

  std::uniform_int_distribution<std::int32_t> len(1, max_context);
  b.cache_loc.resize(static_cast<std::size_t>(batch) * topk * num_steps);
  for (std::int32_t r = 0; r < batch; ++r) {
    const std::int32_t seq = len(rng);
    b.seq_len.push_back(seq);
    const std::int32_t lpl = seq % page_size;
    b.last_page_len.push_back(lpl);
    for (std::int32_t t = 0; t < topk; ++t) {
      std::int64_t page = free_pages[next_free++];
      for (std::int32_t j = 0; j < num_steps; ++j) {
        const std::int32_t offset = (lpl + j) % page_size;
        if (j > 0 && offset == 0) page = free_pages[next_free++];
        b.cache_loc[(static_cast<std::size_t>(r) * topk + t) * num_steps + j] =
            page * page_size + offset;
      }
    }
  }
  return b;
}

}  // namespace specgraph::testing
