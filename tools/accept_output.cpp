// `specgraph metadata accept`'s output (docs/round-cli.md): every field of the three families'
// outputs in the contract's shapes, and every violation. A guard word keeps only the first
// violation and a count, while the contract lists each one (one row_width per row, the ring, one
// unbacked per row with its smallest position), so the list is derived here from the kernels'
// outputs and the checked inputs, and cross-checked against the guard words: a word that
// disagrees (or any other word that is not clean) is printed as it is, so nothing is lost.
#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "specgraph/guard.hpp"
#include "tools/accept_command.hpp"
#include "tools/json.hpp"
#include "tools/metadata_io.hpp"

namespace specgraph::tools {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// Rows of `width` cells, or of `lens[r]` cells when lens is set.
template <class T>
void write_rows(std::ostream& out, const std::vector<T>& cells, std::int64_t rows,
                std::int64_t width, const std::vector<std::int64_t>* lens = nullptr) {
  out << '[';
  for (std::int64_t r = 0; r < rows; ++r) {
    out << (r ? "," : "");
    const std::int64_t n = lens ? (*lens)[static_cast<std::size_t>(r)] : width;
    write_list(out, cells.data() + r * width, static_cast<std::size_t>(n));
  }
  out << ']';
}

// The (a, b) pairs of a flat pair buffer that are not (-1, -1), as [[a, b]...].
void write_pairs(std::ostream& out, const std::vector<std::int32_t>& pairs, std::int64_t count) {
  out << '[';
  bool first = true;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int32_t a = pairs[static_cast<std::size_t>(2 * i)];
    const std::int32_t b = pairs[static_cast<std::size_t>(2 * i + 1)];
    if (a == -1 && b == -1) continue;
    out << (first ? "" : ",") << '[' << a << ',' << b << ']';
    first = false;
  }
  out << ']';
}

// One derived violation: its guard-word view (kind, row, column) and its contract line.
struct violation {
  violation_kind kind;
  std::int64_t row, column;
  std::string line;
};

// Whether a guard word records exactly `list` (its count and its first, the lowest (row,
// column), in the words' order: row -1 first).
bool agrees(const guard_word& g, const std::vector<violation>& list) {
  if (static_cast<std::size_t>(g.violations) != list.size()) return false;
  if (list.empty()) return true;
  const violation* first = &list[0];
  for (const violation& v : list) {
    if (v.row < first->row || (v.row == first->row && v.column < first->column)) first = &v;
  }
  return g.kind == static_cast<std::int32_t>(first->kind) && g.row == first->row &&
         g.column == first->column;
}

// The allocation's violations (rows in order, then the ring) from the inputs and the commit.
std::vector<violation> alloc_violations(const accept_case& c, const accept_round& o) {
  std::vector<violation> list;
  const std::int64_t ps = c.page_size;
  std::int64_t need = 0;
  for (std::int64_t r = 0; r < c.real_batch; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (o.finished[i] != 0) continue;               // a finished row takes no pages
    const std::int64_t alloc = c.allocated_len[i];  // <= W < 2^31; + 2^28 + ps fits int64
    const std::int64_t nxt =
        std::max(alloc, ceil_div(std::int64_t{o.new_seq_len[i]} + c.reserve, ps) * ps);
    if (nxt > c.width) {
      list.push_back(
          {violation_kind::row_width, r, -1,
           "{\"kind\":\"row_width\",\"kernel\":\"accept_alloc\",\"row\":" + std::to_string(r) +
               ",\"need\":" + std::to_string(nxt) + ",\"width\":" + std::to_string(c.width) + "}"});
      continue;
    }
    need += ceil_div(nxt, ps) - ceil_div(alloc, ps);
  }
  const auto available = static_cast<std::int64_t>(c.free_pages.size());
  if (need > available) {
    list.push_back(
        {violation_kind::ring, -1, -1,
         "{\"kind\":\"ring\",\"kernel\":\"accept_alloc\",\"need\":" + std::to_string(need) +
             ",\"available\":" + std::to_string(available) + "}"});
  }
  return list;
}

// The smallest next-round position of an active row (draft, prefix-tail copy or verify) at or
// past its allocated length, or -1 when every one is backed.
std::int64_t first_unbacked(const accept_case& c, std::int64_t s, std::int64_t alloc) {
  const std::int64_t ps = c.page_size, k = c.topk, steps = c.num_steps;
  std::int64_t lowest = -1;
  auto see = [&](std::int64_t p) {
    if (p >= alloc && (lowest < 0 || p < lowest)) lowest = p;
  };
  const bool paged_tree = ps > 1 && k > 1;
  const std::int64_t nnp = paged_tree ? ceil_div(s % ps + steps, ps) : 0;
  for (std::int64_t t = 0; t < k; ++t) {
    for (std::int64_t j = 0; j < steps; ++j) {
      see(paged_tree ? s + t * ps * nnp + j : s + t * steps + j);
    }
  }
  if (paged_tree) {
    const std::int64_t base = s - s % ps;
    for (std::int64_t t = 1; t < k; ++t) {
      for (std::int64_t o = 0; o < s % ps; ++o) {
        see(base + o);
        see(base + t * nnp * ps + o);
      }
    }
  }
  for (std::int64_t j = 0; j < c.draft_tokens; ++j) see(s + j);
  return lowest;
}

std::vector<violation> slot_violations(const accept_case& c, const accept_round& o) {
  std::vector<violation> list;
  for (std::int64_t r = 0; r < c.batch; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (o.active[i] == 0) continue;
    const std::int64_t alloc = o.allocated_len[i];
    const std::int64_t p = first_unbacked(c, o.seq_len[i], alloc);
    if (p < 0) continue;
    list.push_back({violation_kind::unbacked, r, p,
                    "{\"kind\":\"unbacked\",\"kernel\":\"next_round_slots\",\"row\":" +
                        std::to_string(r) + ",\"position\":" + std::to_string(p) +
                        ",\"allocated\":" + std::to_string(alloc) + "}"});
  }
  return list;
}

}  // namespace

void write_accept_round(std::ostream& out, const accept_case& c, const accept_round& o) {
  const std::int64_t bs = c.batch, d = c.draft_tokens, s = c.num_steps + 1, w = c.width;
  // The committed run a = c + 1 of a real row; a padded row commits nothing (its lists are
  // empty, docs/round-cli.md).
  std::vector<std::int64_t> run(static_cast<std::size_t>(std::max<std::int64_t>(bs, 1)), 0);
  std::vector<std::int32_t> nodes(o.accept_index.size());
  for (std::int64_t r = 0; r < bs; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (r < c.real_batch) run[i] = std::int64_t{o.accept_length[i]} + 1;
    for (std::int64_t k = 0; k < s; ++k) {
      const auto cell = static_cast<std::size_t>(r * s + k);
      nodes[cell] = k < run[i] ? static_cast<std::int32_t>(o.accept_index[cell] - r * d) : -1;
    }
  }
  out << "{\"accepted_nodes\":";
  write_rows(out, nodes, bs, s, &run);
  out << ",\"accept_length\":";
  write_list(out, o.accept_length.data(), static_cast<std::size_t>(bs));
  out << ",\"accept_index\":";
  write_rows(out, o.accept_index, bs, s);
  out << ",\"predict\":";
  write_rows(out, o.predict, bs, d);
  out << ",\"bonus_token\":";
  write_list(out, o.bonus.data(), static_cast<std::size_t>(bs));
  out << ",\"output_token\":";
  write_rows(out, o.accept_tokens, bs, d, &run);
  out << ",\"new_seq_len\":";
  write_list(out, o.new_seq_len.data(), static_cast<std::size_t>(bs));
  out << ",\"kv_moves\":";
  write_pairs(out, o.kv_move, bs * c.num_steps);
  out << ",\"extend\":{\"input_id\":";
  write_rows(out, o.accept_tokens, bs, d, &run);
  out << ",\"hidden_source\":";
  write_rows(out, o.accept_index, bs, s, &run);
  out << ",\"select_index\":";
  write_list(out, o.select_index.data(), static_cast<std::size_t>(bs));
  out << "},\"finished\":";
  write_list(out, o.finished.data(), static_cast<std::size_t>(bs));
  out << ",\"emit_len\":";
  write_list(out, o.emit_len.data(), static_cast<std::size_t>(bs));
  out << ",\"slots_to_free\":[";  // read from the input: before the next round's writes
  for (std::int64_t r = 0; r < bs; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const std::int64_t row = c.req_pool_index[i];
    out << (r ? "," : "");
    write_list(out, c.req_to_token.data() + row * w + o.free_begin[i],
               static_cast<std::size_t>(o.free_end[i] - o.free_begin[i]));
  }
  out << "],\"allocated_len\":";
  write_list(out, o.allocated_len.data(), static_cast<std::size_t>(bs));
  out << ",\"pages_taken\":" << o.ring_head << ",\"req_to_token_writes\":[";
  bool first = true;
  for (std::int64_t r = 0; r < bs; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const std::int64_t row = c.req_pool_index[i];
    for (std::int64_t p = c.allocated_len[i]; p < o.allocated_len[i]; ++p) {
      out << (first ? "" : ",") << '[' << row << ',' << p << ','
          << o.req_to_token[static_cast<std::size_t>(row * w + p)] << ']';
      first = false;
    }
  }
  out << "],\"next_round\":{\"active\":";
  write_list(out, o.active.data(), static_cast<std::size_t>(bs));
  out << ",\"seq_len\":";
  write_list(out, o.seq_len.data(), static_cast<std::size_t>(bs));
  out << ",\"root_token\":";
  write_list(out, o.root_token.data(), static_cast<std::size_t>(bs));
  out << ",\"draft_position\":";
  write_rows(out, o.draft_position, bs, c.topk);
  out << ",\"draft_out_cache_loc\":[";
  for (std::int64_t r = 0; r < bs; ++r) {
    out << (r ? "," : "");
    out << '[';
    for (std::int64_t t = 0; t < c.topk; ++t) {
      out << (t ? "," : "");
      write_list(out, o.draft_out_cache_loc.data() + (r * c.topk + t) * c.num_steps,
                 static_cast<std::size_t>(c.num_steps));
    }
    out << ']';
  }
  out << "],\"tail_copies\":";
  write_pairs(out, o.tail_copy,
              c.topk > 1 && c.page_size > 1 ? bs * (c.topk - 1) * (c.page_size - 1) : 0);
  out << ",\"verify_out_cache_loc\":";
  write_rows(out, o.verify_out_cache_loc, bs, d);
  out << "},\"violations\":[";

  first = true;
  auto next = [&] {
    out << (first ? "" : ",");
    first = false;
  };
  const std::vector<violation> alloc = alloc_violations(c, o), slots = slot_violations(c, o);
  for (const std::vector<violation>* list : {&alloc, &slots}) {
    for (const violation& v : *list) {
      next();
      out << v.line;
    }
  }
  // The words the list above stands for must agree with it; every other word is clean on
  // checked input. Anything else is shown as the guard word says.
  const std::vector<const guard_word*> words = {
      &o.accept_guard[0], &o.accept_guard[1], &o.commit_guard[0], &o.commit_guard[1],
      &o.next_guard[0],   &o.next_guard[1],   &o.next_guard[2]};
  for (const guard_word* g : words) {
    const bool ok = g == &o.next_guard[0]   ? agrees(*g, alloc)
                    : g == &o.next_guard[1] ? agrees(*g, slots)
                                            : g->violations == 0;
    if (ok) continue;
    next();
    write_violation(out, *g);
  }
  out << "]}\n";
}

}  // namespace specgraph::tools
