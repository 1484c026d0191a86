// A minimal engine, twice: (1) with draft_runtime owning capture and replay, a forward captured
// into every graph that copies the step's expand page table into engine-owned memory; (2) with
// the engine owning the memory, the stream and the capture, composing specgraph's ops into its
// own graph. Both are checked against known values.
#include <specgraph/buffers.hpp>
#include <specgraph/executor.hpp>
#include <specgraph/ops.hpp>
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

  // (2) The engine's own capture over the engine's own memory and stream.
  const plan p = make_plan(config);
  device_buffer engine_pool(*ex, p.total_bytes);  // e.g. a tensor in the engine's graph pool
  const draft_buffers bufs(p, engine_pool.data());
  initialize_buffers(*ex, bufs);
  device_buffer inputs(*ex, 64);  // the engine's device-side round inputs
  ex->copy_to_device(inputs.as<std::int32_t>(), pool_index, 4);
  ex->copy_to_device(inputs.as<std::int32_t>() + 1, seq_len, 4);
  ex->copy_to_device(inputs.as<std::int64_t>() + 1, cache_loc, sizeof cache_loc);
  device_buffer own_copy(*ex, 2 * 3 * sizeof(std::int32_t));
  ex->begin_capture();  // stands in for torch.cuda.graph / cudaStreamBeginCapture
  setup_round(*ex, bufs, 1, engine_tables{rtt.as<std::int32_t>()});
  step_metadata(*ex, bufs, 1, 0);
  step_metadata(*ex, bufs, 1, 1);
  ex->copy_on_device(own_copy.data(), bufs.expand_page_table(1), own_copy.size());  // "forward"
  const auto engine_graph = ex->instantiate(*ex->end_capture());
  stage_round(
      *ex, bufs,
      {1, inputs.as<std::int32_t>(), inputs.as<std::int32_t>() + 1, inputs.as<std::int64_t>() + 1});
  ex->launch_graph(*engine_graph);
  std::vector<std::int32_t> composed(6);
  ex->copy_to_host(composed.data(), own_copy.data(), own_copy.size());
  if (composed != want || read_guards(*ex, bufs)[1].violations != 0) {
    std::fprintf(stderr, "engine_consumer: unexpected tables from the engine's own capture\n");
    return 1;
  }
  std::printf("engine_consumer OK: %s executor, %d graphs captured, arena %zu bytes\n", ex->name(),
              report.graphs, rt.plan().total_bytes);
  return 0;
}
