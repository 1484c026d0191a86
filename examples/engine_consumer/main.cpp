// A minimal engine: one request pool, a forward captured into every graph that copies the step's
// expand page table into engine-owned memory, and a few rounds checked against known values.
#include <specgraph/executor.hpp>
#include <specgraph/runtime.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  using namespace specgraph;
  auto ex = make_executor("auto");
  draft_config config;
  config.max_batch = 4;
  config.topk = 2;
  config.num_steps = 2;
  config.page_size = 4;
  config.max_context_len = 16;
  config.pool_rows = 4;
  config.kv_slots = 1024;

  // Pool row 1 holds a request whose tokens 0..15 sit on pages 9, 3, 12, 5.
  std::vector<std::int32_t> req_to_token(4 * 16, 0);
  const std::int32_t pages[] = {9, 3, 12, 5};
  for (int pos = 0; pos < 16; ++pos) req_to_token[16 + pos] = pages[pos / 4] * 4 + pos % 4;
  device_buffer rtt(*ex, req_to_token.size() * sizeof(std::int32_t));
  ex->copy_to_device(rtt.data(), req_to_token.data(), req_to_token.size() * sizeof(std::int32_t));

  draft_runtime rt(*ex, config, engine_tables{rtt.as<std::int32_t>()});
  // Engine-owned output: each step's expand table, copied inside the graph.
  device_buffer copied(*ex, 2 * 8 * 3 * sizeof(std::int32_t));
  rt.set_forward([&](const step_view& v) {
    const std::size_t bytes =
        static_cast<std::size_t>(v.rows) * v.expand_capacity * sizeof(std::int32_t);
    v.ex->copy_on_device(copied.as<std::int32_t>() + v.step * 8 * 3, v.expand_page_table, bytes);
  });
  const capture_report report = rt.capture();

  // Request with 7 tokens (last_page_len 3); branch 0 on pages 20, 21; branch 1 on 30, 31.
  const std::int32_t pool_index[] = {1};
  const std::int32_t seq_len[] = {7};
  const std::int64_t cache_loc[] = {83, 84, 123, 124};
  round_inputs in;
  in.batch = 1;
  in.req_pool_index = pool_index;
  in.seq_len = seq_len;
  in.out_cache_loc = cache_loc;
  rt.stage(in);
  rt.run_round(2);

  std::vector<std::int32_t> step1(2 * 3);
  ex->copy_to_host(step1.data(), copied.as<std::int32_t>() + 8 * 3,
                   step1.size() * sizeof(std::int32_t));
  const std::vector<std::int32_t> want{20, 21, 0, 30, 31, 0};
  std::vector<std::int32_t> prefix(4);
  ex->copy_to_host(prefix.data(), rt.buffers().prefix_page_table(), 4 * sizeof(std::int32_t));
  if (step1 != want || prefix[0] != 9 || prefix[1] != 0) {
    std::fprintf(stderr, "engine_consumer: unexpected tables\n");
    return 1;
  }
  std::printf("engine_consumer OK: %s executor, %d graphs captured, arena %zu bytes\n", ex->name(),
              report.graphs, rt.plan().total_bytes);
  return 0;
}
