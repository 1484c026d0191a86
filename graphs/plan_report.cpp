// The plan's reports: every buffer by name with its shape and offset, and today's engine sizing.
#include <iomanip>
#include <sstream>
#include <string>

#include "specgraph/next_round_metadata.hpp"
#include "specgraph/plan.hpp"

namespace specgraph {
namespace {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string plan::csr_report_line() const {
  if (layout.csr_kv_indices.empty())
    return "csr: not held (formats " + std::string(to_string(config.formats)) + ")\n";
  std::ostringstream s;
  const double ratio =
      static_cast<double>(today.csr_indices_bytes) / static_cast<double>(our_csr_indices_bytes);
  s << "csr kv_indices: C_s = rows x (max_context_len + s + 1) = " << layout.csr_capacity.front()
    << " .. " << layout.csr_capacity.back() << " entries per step, " << our_csr_indices_bytes
    << " bytes; today's engine sizing (num_steps x max_bs * topk * max_context_len): "
    << today.csr_indices_bytes << " bytes (" << std::fixed << std::setprecision(4) << ratio
    << "x; it has no room for the draft entries)\n";
  return s.str();
}

std::string plan::verify_report_line() const {
  const plan_layout::verify_section& v = layout.verify;
  if (!v.enabled()) return {};
  std::ostringstream s;
  std::size_t bytes = 0, count = 0;
  for (const buffer_spec& b : buffers) {
    if (b.name.rfind("verify.", 0) != 0) continue;
    bytes += b.bytes;
    ++count;
  }
  s << "verify section (D = " << v.draft_tokens << ", bucket " << max_bucket() << ", M "
    << config.max_context_len << "): " << bytes << " bytes in " << count << " buffers, "
    << our_verify_bytes << " with their alignment";
  if (v.fa3) {
    s << "; fa3 prefix table " << max_bucket() << " x " << v.prefix_capacity << ", expand table "
      << static_cast<std::int64_t>(max_bucket()) * v.draft_tokens << " x " << v.draft_tokens;
  }
  if (v.flashinfer) {
    s << "; flashinfer kv_indices " << v.kv_indices_capacity << ", packed mask "
      << v.packed_mask_capacity << " bytes";
  }
  s << "; engine mask reservation " << config.max_batch << " x " << v.draft_tokens << " x "
    << config.max_context_len << " = " << engine_verify_mask_bytes << " bytes";
  if (v.flashinfer && v.packed_mask_capacity > 0) {
    s << " (" << std::fixed << std::setprecision(1)
      << static_cast<double>(engine_verify_mask_bytes) / static_cast<double>(v.packed_mask_capacity)
      << "x the packed mask)";
  }
  if (v.flashinfer && v.kv_indices_capacity > 0) {
    s << "; engine kv_indices reservation " << config.max_batch << " x " << v.draft_tokens << " x "
      << config.max_context_len << " x 4 = " << engine_verify_kv_indices_bytes << " bytes ("
      << std::fixed << std::setprecision(1)
      << static_cast<double>(engine_verify_kv_indices_bytes) /
             static_cast<double>(4 * v.kv_indices_capacity)
      << "x kv_indices)";
  }
  s << '\n';
  return s.str();
}

std::string plan::extend_report_line() const {
  const plan_layout::extend_section& e = layout.extend;
  if (!e.enabled()) return {};
  std::ostringstream s;
  std::size_t bytes = 0, count = 0;
  for (const buffer_spec& b : buffers) {
    if (b.name.rfind("extend.", 0) != 0) continue;
    bytes += b.bytes;
    ++count;
  }
  auto times = [&](std::size_t engine, std::int64_t ours) {
    if (ours <= 0) return std::string();
    std::ostringstream x;
    x << " (" << std::fixed << std::setprecision(1)
      << static_cast<double>(engine) / static_cast<double>(ours) << "x)";
    return x.str();
  };
  s << "extend section (W = " << e.extend_tokens << ", bucket " << max_bucket() << ", M "
    << config.max_context_len << "): " << bytes << " bytes in " << count << " buffers, "
    << our_extend_bytes << " with their alignment";
  if (e.fa3) {
    const std::int64_t engine_cols = (config.max_context_len + config.page_size - 1) /
                                     config.page_size;  // SGLang's ceil(M / ps)
    s << "; fa3 page table " << max_bucket() << " x " << e.page_capacity << " (engine "
      << config.max_batch << " x " << engine_cols << ", " << e.page_capacity - engine_cols
      << (e.page_capacity - engine_cols == 1 ? " column" : " columns")
      << " short at the context edge)";
  }
  if (e.full) {
    s << "; prefix kv_indices " << e.prefix_kv_capacity << ", full kv_indices "
      << e.full_kv_capacity << " (" << 4 * (e.prefix_kv_capacity + e.full_kv_capacity)
      << " bytes); engine reservations: triton kv_indices " << engine_extend_triton_bytes
      << " bytes" << times(engine_extend_triton_bytes, 4 * e.full_kv_capacity)
      << ", flashinfer kv_indices and mask " << engine_extend_flashinfer_bytes << " bytes"
      << times(engine_extend_flashinfer_bytes, 4 * e.full_kv_capacity);
  }
  s << '\n';
  return s.str();
}

std::string plan::round_report_line() const {
  const plan_layout::round_section& r = layout.round;
  if (!r.enabled()) return {};
  std::ostringstream s;
  std::size_t bytes = 0, count = 0;
  for (const buffer_spec& b : buffers) {
    if (b.name.rfind("after_verify.", 0) != 0) continue;
    bytes += b.bytes;
    ++count;
  }
  const std::int64_t b = max_bucket(), n = config.num_steps;
  s << "round section (D = " << r.draft_tokens << ", S = " << n + 1 << ", bucket " << b
    << ", reserve " << r.reserve << ", max seq_len " << r.max_seq_len << "): " << bytes
    << " bytes in " << count << " buffers, " << our_round_bytes
    << " with their alignment; kv move pairs " << b << " x " << n << " = " << round_kv_move_pairs
    << " (SGLang " << b << " x " << n + 1 << " = " << engine_kv_move_pairs << "); standing reserve "
    << round_reserve_per_request << " positions per request (SGLang 2 x "
    << engine_reserve_per_request / 2 << " = " << engine_reserve_per_request
    << "); ring pages per round " << b << " x "
    << next_round_pages_per_request(config.num_steps, config.page_size) << '\n';
  return s.str();
}

std::string plan::report_text() const {
  std::ostringstream s;
  s << std::left << std::setw(28) << "buffer" << std::setw(6) << "step" << std::setw(18) << "shape"
    << std::setw(12) << "dtype" << std::right << std::setw(10) << "capacity" << std::setw(12)
    << "offset" << std::setw(12) << "bytes" << '\n';
  for (const buffer_spec& b : buffers) {
    s << std::left << std::setw(28) << b.name << std::setw(6)
      << (b.step == all_steps ? std::string("all") : std::to_string(b.step)) << std::setw(18)
      << shape_string(b.shape) << std::setw(12) << to_string(b.type) << std::right << std::setw(10)
      << b.capacity << std::setw(12) << b.offset << std::setw(12) << b.bytes << '\n';
  }
  const double ratio = static_cast<double>(today.total_bytes) / static_cast<double>(total_bytes);
  s << "arena: " << total_bytes << " bytes in one allocation (" << buffers.size() << " buffers, "
    << config.buckets.size() << " buckets up to " << max_bucket() << ")\n"
    << "draft forwards: num_steps " << config.num_steps
    << " (steps, each with its expand table); out_cache_loc rows: slot_stride "
    << config.slot_stride << " slots (" << config.slot_stride - config.num_steps
    << " per row never read)\n"
    << "prefix page table: " << our_prefix_table_bytes
    << " bytes once; today's engine sizing: " << today.prefix_table_bytes
    << " bytes (max_context_len wide, one per step)\n"
    << "expand page tables: " << our_expand_table_bytes
    << " bytes (d + 1 wide per step); today's engine sizing: " << today.expand_table_bytes
    << " bytes (num_steps wide per step)\n"
    << "expand tables by mode: " << per_step_expand_bytes << " bytes per-step, "
    << device_steps_expand_bytes
    << " bytes device-steps (this plan: " << (config.device_steps ? "device-steps" : "per-step")
    << ")\n"
    << csr_report_line() << verify_report_line() << extend_report_line() << round_report_line()
    << "total: " << total_bytes << " bytes vs " << today.total_bytes << " bytes today ("
    << std::fixed << std::setprecision(2) << ratio << "x)\n";
  return s.str();
}

std::string plan::report_json() const {
  std::ostringstream s;
  s << "{\"buffers\":[";
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const buffer_spec& b = buffers[i];
    s << (i ? "," : "") << "{\"name\":\"" << b.name << "\",\"step\":";
    if (b.step == all_steps) {
      s << "\"all\"";
    } else {
      s << b.step;
    }
    s << ",\"shape\":[";
    for (std::size_t d = 0; d < b.shape.size(); ++d) s << (d ? "," : "") << b.shape[d];
    s << "],\"dtype\":\"" << to_string(b.type) << "\",\"capacity\":" << b.capacity
      << ",\"offset\":" << b.offset << ",\"bytes\":" << b.bytes << ",\"alignment\":" << b.alignment
      << '}';
  }
  s << "],\"buckets\":[";
  for (std::size_t i = 0; i < config.buckets.size(); ++i) s << (i ? "," : "") << config.buckets[i];
  const double ratio = static_cast<double>(today.total_bytes) / static_cast<double>(total_bytes);
  s << "],\"num_steps\":" << config.num_steps << ",\"slot_stride\":" << config.slot_stride
    << ",\"total_bytes\":" << total_bytes << ",\"prefix_table_bytes\":" << our_prefix_table_bytes
    << ",\"expand_table_bytes\":" << our_expand_table_bytes
    << ",\"today\":{\"prefix_table_bytes\":" << today.prefix_table_bytes
    << ",\"expand_table_bytes\":" << today.expand_table_bytes
    << ",\"total_bytes\":" << today.total_bytes << "},\"ratio\":" << ratio
    << ",\"modes\":{\"per_step_expand_bytes\":" << per_step_expand_bytes
    << ",\"device_steps_expand_bytes\":" << device_steps_expand_bytes << ",\"this_plan\":\""
    << (config.device_steps ? "device_steps" : "per_step") << "\"},\"formats\":\""
    << to_string(config.formats) << "\"";
  if (!layout.csr_kv_indices.empty()) {
    s << ",\"csr\":{\"capacity\":[";
    for (std::size_t i = 0; i < layout.csr_capacity.size(); ++i) {
      s << (i ? "," : "") << layout.csr_capacity[i];
    }
    s << "],\"kv_indices_stride\":" << layout.csr_kv_indices_stride
      << ",\"kv_indices_bytes\":" << our_csr_indices_bytes
      << ",\"today_kv_indices_bytes\":" << today.csr_indices_bytes << ",\"ratio\":"
      << static_cast<double>(today.csr_indices_bytes) / static_cast<double>(our_csr_indices_bytes)
      << '}';
  }
  const plan_layout::verify_section& v = layout.verify;
  if (v.enabled()) {
    s << ",\"verify\":{\"draft_tokens\":" << v.draft_tokens
      << ",\"fa3\":" << (v.fa3 ? "true" : "false")
      << ",\"flashinfer\":" << (v.flashinfer ? "true" : "false")
      << ",\"prefix_capacity\":" << v.prefix_capacity
      << ",\"kv_indices_capacity\":" << v.kv_indices_capacity
      << ",\"packed_mask_capacity\":" << v.packed_mask_capacity << ",\"bytes\":" << our_verify_bytes
      << ",\"engine_mask_bytes\":" << engine_verify_mask_bytes
      << ",\"engine_kv_indices_bytes\":" << engine_verify_kv_indices_bytes
      << ",\"guard_base\":" << v.guard_base << '}';
  }
  const plan_layout::extend_section& e = layout.extend;
  if (e.enabled()) {
    auto flag = [](bool x) { return x ? "true" : "false"; };
    s << ",\"extend\":{\"extend_tokens\":" << e.extend_tokens << ",\"tokens\":" << flag(e.tokens)
      << ",\"fa3\":" << flag(e.fa3) << ",\"prefix\":" << flag(e.prefix)
      << ",\"full\":" << flag(e.full) << ",\"page_capacity\":" << e.page_capacity
      << ",\"prefix_kv_capacity\":" << e.prefix_kv_capacity
      << ",\"full_kv_capacity\":" << e.full_kv_capacity << ",\"bytes\":" << our_extend_bytes
      << ",\"engine_fa3_bytes\":" << engine_extend_fa3_bytes
      << ",\"engine_triton_bytes\":" << engine_extend_triton_bytes
      << ",\"engine_flashinfer_bytes\":" << engine_extend_flashinfer_bytes
      << ",\"guard_base\":" << e.guard_base << '}';
  }
  const plan_layout::round_section& r = layout.round;
  if (r.enabled()) {
    s << ",\"round\":{\"draft_tokens\":" << r.draft_tokens << ",\"reserve\":" << r.reserve
      << ",\"max_seq_len\":" << r.max_seq_len << ",\"stop_capacity\":" << r.stop_capacity
      << ",\"bytes\":" << our_round_bytes << ",\"kv_move_pairs\":" << round_kv_move_pairs
      << ",\"engine_kv_move_pairs\":" << engine_kv_move_pairs
      << ",\"reserve_per_request\":" << round_reserve_per_request
      << ",\"engine_reserve_per_request\":" << engine_reserve_per_request
      << ",\"ring_pages_per_round\":"
      << max_bucket() * next_round_pages_per_request(config.num_steps, config.page_size)
      << ",\"guard_base\":" << r.guard_base << '}';
  }
  s << '}';
  return s.str();
}

}  // namespace specgraph
