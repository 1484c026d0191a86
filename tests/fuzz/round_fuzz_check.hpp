// round_fuzz's checks shared by its stages: poisoned outputs with canaries, the guard words'
// expected records (count and lowest (row, column)), inputs unchanged.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "specgraph/guard.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/kernels_fuzz.hpp"

namespace specgraph::fuzz::round_harness {

inline constexpr std::int32_t poison = -3;  // output cells before the call

struct record {  // one expected record of a guard word
  std::int32_t row, column;
  std::int64_t capacity, value;
};

template <class T, class U>
void copy_in(guarded<T>& g, const std::vector<U>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) g[i] = static_cast<T>(v[i]);
}

template <class T>
void check_unchanged(const guarded<T>& b, const std::vector<T>& before, const char* what,
                     const char* name) {
  kernels_harness::check_unchanged(b, before, what, name);
}

// A previous round's words: the run_* entries reset them, a refusal leaves them.
inline guard_word stale_guard() {
  guard_word g{};
  g.violations = 77;
  return g;
}

inline void check_stale(const guarded<guard_word>& g, const char* what) {
  FUZZ_CHECK(g.canaries_intact(), "%s: guard canaries overwritten", what);
  for (std::size_t k = 0; k < g.size(); ++k) {
    FUZZ_CHECK(g[k].violations == 77 && g[k].first == 0, "%s: guard %zu written", what, k);
  }
}

// Guard word g holds `want`'s count and its lowest (row, column) record, of kind bad_input
// unless `kind` says otherwise.
inline void check_record(const guard_word& g, const std::vector<record>& want, kernel_id kernel,
                         const char* what, violation_kind kind = violation_kind::bad_input) {
  check_guard_word(g, what);
  FUZZ_CHECK(g.violations == static_cast<std::int32_t>(want.size()),
             "%s: %d violations, expected %zu", what, g.violations, want.size());
  if (want.empty()) return;
  const record f =
      *std::min_element(want.begin(), want.end(), [](const record& x, const record& y) {
        return x.row < y.row || (x.row == y.row && x.column < y.column);
      });
  FUZZ_CHECK(
      g.kernel == static_cast<std::int32_t>(kernel) && g.kind == static_cast<std::int32_t>(kind),
      "%s: kernel %d kind %d, expected %d %d", what, g.kernel, g.kind, static_cast<int>(kernel),
      static_cast<int>(kind));
  FUZZ_CHECK(
      g.row == f.row && g.column == f.column && g.capacity == f.capacity && g.value == f.value,
      "%s: (%d, %d) capacity %d value %lld, expected (%d, %d) %lld %lld", what, g.row, g.column,
      g.capacity, static_cast<long long>(g.value), f.row, f.column,
      static_cast<long long>(f.capacity), static_cast<long long>(f.value));
}

// The refused stores of a stage (one output cut short at most): their count and the first.
struct store_check {
  std::int64_t refused = 0;
  record first{};
};

inline void check_stores(const guard_word& g, const store_check& s, kernel_id kernel,
                         const char* what) {
  std::vector<record> want(static_cast<std::size_t>(s.refused), s.first);
  check_record(g, want, kernel, what, violation_kind::capacity);
}

// A stage's outputs: output i has caps[i] cells, poisoned, with canaries past them.
template <class T>
class stage_outputs {
 public:
  stage_outputs(const std::int64_t* caps, int n) {
    for (int i = 0; i < n; ++i) {
      caps_.push_back(caps[i]);
      out_.push_back(std::make_unique<guarded<T>>(static_cast<std::size_t>(caps[i]), T{poison}));
    }
  }
  T* data(int i) const { return out_[static_cast<std::size_t>(i)]->data(); }
  const guarded<T>& buffer(int i) const { return *out_[static_cast<std::size_t>(i)]; }
  void check_untouched(const char* what) const {
    for (const auto& g : out_) {
      FUZZ_CHECK(g->canaries_intact(), "%s: output canaries overwritten", what);
      for (std::size_t k = 0; k < g->size(); ++k) {
        FUZZ_CHECK((*g)[k] == T{poison}, "%s: output cell %zu written", what, k);
      }
    }
  }
  // Every cell below each capacity as `want` says (poison past the exact size), canaries intact;
  // returns the refused stores (width[i]: cells per request of output i).
  store_check check(const std::vector<std::int64_t>* const* want, const std::int64_t* width,
                    const char* what) const {
    store_check s;
    for (std::size_t i = 0; i < out_.size(); ++i) {
      const guarded<T>& g = *out_[i];
      const std::vector<std::int64_t>& w = *want[i];
      FUZZ_CHECK(g.canaries_intact(), "%s: canaries past output %zu overwritten", what, i);
      for (std::size_t k = 0; k < g.size(); ++k) {
        const T expect = k < w.size() ? static_cast<T>(w[k]) : T{poison};
        FUZZ_CHECK(g[k] == expect, "%s: output %zu cell %zu: %lld, expected %lld", what, i, k,
                   static_cast<long long>(g[k]), static_cast<long long>(expect));
      }
      const auto cap = static_cast<std::int64_t>(g.size());
      const auto n = static_cast<std::int64_t>(w.size());
      if (cap < n) {
        s.refused += n - cap;
        s.first = {static_cast<std::int32_t>(cap / width[i]), static_cast<std::int32_t>(cap), cap,
                   w[static_cast<std::size_t>(cap)]};
      }
    }
    return s;
  }

 private:
  std::vector<std::int64_t> caps_;
  std::vector<std::unique_ptr<guarded<T>>> out_;
};

}  // namespace specgraph::fuzz::round_harness
