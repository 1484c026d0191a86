// Shared pieces of the libFuzzer harnesses (tests/fuzz/*_fuzz.cpp): a byte reader that turns the
// fuzzer's bytes into field values, promise checks that abort with a clear message (so libFuzzer
// reports the input), buffers with poisoned canary margins, and independent reference models of
// the metadata kernels written from docs/metadata.md (sections 2, 3 and 6), not from the kernels.
//
// Byte encoding (tests/fuzz/make_corpus.py writes seeds in it): every read past the end yields 0.
//   byte()            one byte
//   u16() / u32()     little-endian
//   value(lo, hi, limit) a mode byte, then:
//       mode < 0x80   lo + (u16 % (hi - lo + 1))      "small": the usual in-range values
//       mode < 0xc0   an edge: lo - 1, lo, hi, hi + 1, limit, limit + 1, 0, -1, INT32_MAX,
//                     INT32_MIN, INT64_MAX, INT64_MIN, limit / 2 (mode % 13)
//       otherwise     a raw little-endian int64 (8 bytes)
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/guard.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define SPECGRAPH_FUZZ_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SPECGRAPH_FUZZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#endif
#endif
#ifndef SPECGRAPH_FUZZ_POISON
#define SPECGRAPH_FUZZ_POISON(p, n) ((void)(p), (void)(n))
#define SPECGRAPH_FUZZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace specgraph::fuzz {

// ---- promises ------------------------------------------------------------------------------

[[noreturn]] inline void broken(const char* file, int line, const char* cond, const char* fmt,
                                ...) {
  std::fprintf(stderr, "\n==== specgraph fuzz: PROMISE BROKEN at %s:%d: %s\n     ", file, line,
               cond);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) ::specgraph::fuzz::broken(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

// Known, reported bugs are skipped (precisely, by their condition) so fuzzing explores past
// them; SPECGRAPH_FUZZ_STRICT=1 checks them too. ctest runs each input of
// tests/fuzz/known_bugs/<harness>/ strictly and expects the promise to break: once a bug is fixed
// that test fails, and its input moves to corpus/<harness>/ and its skip is deleted.
inline bool strict() {
  static const bool on = std::getenv("SPECGRAPH_FUZZ_STRICT") != nullptr;
  return on;
}

inline bool printable_line(const std::string& s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return false;
  }
  return true;
}

// The documented shape of every invalid_argument (error.hpp): a non-empty field, and a message
// "<field>: ..." on one printable line.
inline void check_invalid_argument(const invalid_argument& e, const char* context) {
  const std::string what = e.what();
  FUZZ_CHECK(!e.field().empty(), "%s: invalid_argument without a field: '%s'", context,
             what.c_str());
  FUZZ_CHECK(printable_line(e.field()), "%s: field is not printable", context);
  FUZZ_CHECK(!what.empty() && printable_line(what), "%s: message not one printable line: '%s'",
             context, what.c_str());
  FUZZ_CHECK(what.rfind(e.field() + ": ", 0) == 0, "%s: message '%s' does not start with '%s: '",
             context, what.c_str(), e.field().c_str());
}

// A guard word is clean (all zero) or names a valid kind and kernel; at rest its order key is
// not busy.
inline void check_guard_word(const guard_word& g, const char* context) {
  FUZZ_CHECK(g.violations >= 0, "%s: negative violation count %d", context, g.violations);
  // At rest no thread is writing the details: the order key's busy bit (its top bit) is clear.
  FUZZ_CHECK((g.first >> 63) == 0, "%s: order key %llx busy at rest", context,
             static_cast<unsigned long long>(g.first));
  if (g.violations == 0) {
    FUZZ_CHECK(g.kind == 0 && g.kernel == 0 && g.row == 0 && g.column == 0 && g.capacity == 0 &&
                   g.value == 0 && g.first == 0,
               "%s: clean word with details: kind %d kernel %d row %d column %d capacity %d "
               "value %lld",
               context, g.kind, g.kernel, g.row, g.column, g.capacity,
               static_cast<long long>(g.value));
  } else {
    FUZZ_CHECK(g.kind >= 1 && g.kind <= static_cast<std::int32_t>(violation_kind::unbacked),
               "%s: %d violations, invalid kind %d", context, g.violations, g.kind);
    FUZZ_CHECK(
        g.kernel >= 1 && g.kernel <= static_cast<std::int32_t>(kernel_id::next_round_outputs),
        "%s: %d violations, invalid kernel %d", context, g.violations, g.kernel);
  }
}

// ---- bytes -> values -----------------------------------------------------------------------

class reader {
 public:
  reader(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  bool empty() const { return i_ >= n_; }
  std::size_t left() const { return n_ - std::min(i_, n_); }

  std::uint8_t byte() { return i_ < n_ ? p_[i_++] : 0; }
  std::uint16_t u16() {
    const std::uint16_t lo = byte();
    return static_cast<std::uint16_t>(lo | (byte() << 8));
  }
  std::uint32_t u32() {
    const std::uint32_t lo = u16();
    return lo | (static_cast<std::uint32_t>(u16()) << 16);
  }
  std::uint64_t u64() {
    const std::uint64_t lo = u32();
    return lo | (static_cast<std::uint64_t>(u32()) << 32);
  }
  bool flag() { return (byte() & 1) != 0; }
  // An index in [0, n) from one byte (n <= 256) or two.
  std::int64_t below(std::int64_t n) {
    if (n <= 1) return 0;
    return n <= 256 ? byte() % n : u16() % n;
  }
  // lo + (u16 % span): in [lo, hi] for hi - lo < 65536.
  std::int64_t small(std::int64_t lo, std::int64_t hi) {
    if (hi <= lo) return lo;
    // Unsigned: hi - lo + 1 may not fit int64; the result lo + x (x <= hi - lo) always does.
    const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) + 1;
    const std::uint64_t x = span == 0 ? u16() : u16() % span;
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + x);
  }
  // A field value: mostly in [lo, hi], sometimes an edge around it or the limit, sometimes raw.
  std::int64_t value(std::int64_t lo, std::int64_t hi, std::int64_t limit) {
    const std::uint8_t mode = byte();
    if (mode < 0x80) return small(lo, hi);
    if (mode < 0xc0) {
      // Wrapping +-1: an INT64_MAX limit gives INT64_MIN, another out-of-range value.
      const auto step = [](std::int64_t x, std::uint64_t d) {
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(x) + d);
      };
      const std::int64_t edges[] = {step(lo, ~std::uint64_t{0}),
                                    lo,
                                    hi,
                                    step(hi, 1),
                                    limit,
                                    step(limit, 1),
                                    0,
                                    -1,
                                    std::numeric_limits<std::int32_t>::max(),
                                    std::numeric_limits<std::int32_t>::min(),
                                    std::numeric_limits<std::int64_t>::max(),
                                    std::numeric_limits<std::int64_t>::min(),
                                    limit / 2};
      return edges[mode % 13];
    }
    return static_cast<std::int64_t>(u64());
  }
  // The same narrowed to int32 the way a caller would (wrapping): invalid values stay invalid.
  std::int32_t value32(std::int64_t lo, std::int64_t hi, std::int64_t limit) {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(value(lo, hi, limit)));
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t i_ = 0;
};

// A req_to_token table of `entries` slots in [0, 8192) from a 16-bit seed, then (when the next
// byte is >= 0xc0) one entry replaced by a bad value: what the CSR and verify harnesses read.
inline void fill_req_to_token(reader& in, std::vector<std::int32_t>& table, std::size_t entries) {
  table.resize(entries);
  std::uint32_t h = in.u16() * 2654435761u;
  for (auto& e : table) {
    h = h * 1664525u + 1013904223u;
    e = static_cast<std::int32_t>((h >> 8) % 8192);
  }
  for (std::uint8_t bad = in.byte(); bad >= 0xc0 && !table.empty(); bad = 0) {
    table[in.below(static_cast<std::int64_t>(table.size()))] =
        static_cast<std::int32_t>(in.value(-4, -1, 0x7fffffff));
  }
}

// ---- buffers with canaries -----------------------------------------------------------------

inline constexpr std::size_t canary_bytes = 256;  // keeps the data 256-byte aligned
inline constexpr unsigned char canary_value = 0xa5;

// `n` elements of T at a 256-byte aligned address with `canary_bytes` of canary before and after,
// poisoned for AddressSanitizer (any access reports at once) and checked by value as well.
template <class T>
class guarded {
 public:
  explicit guarded(std::size_t n, T fill = T{}) : n_(n) {
    bytes_ = (n * sizeof(T) + 255) / 256 * 256;
    raw_ = static_cast<unsigned char*>(std::aligned_alloc(256, bytes_ + 2 * canary_bytes));
    FUZZ_CHECK(raw_ != nullptr, "allocation of %zu bytes failed", bytes_);
    std::memset(raw_, canary_value, bytes_ + 2 * canary_bytes);
    for (std::size_t i = 0; i < n; ++i) data()[i] = fill;
    poison();
  }
  ~guarded() {
    SPECGRAPH_FUZZ_UNPOISON(raw_, bytes_ + 2 * canary_bytes);
    std::free(raw_);
  }
  guarded(const guarded&) = delete;
  guarded& operator=(const guarded&) = delete;

  T* data() const { return reinterpret_cast<T*>(raw_ + canary_bytes); }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) const { return data()[i]; }
  std::vector<T> copy() const { return std::vector<T>(data(), data() + n_); }
  bool same(const std::vector<T>& v) const {
    return v.size() == n_ && (n_ == 0 || std::memcmp(v.data(), data(), n_ * sizeof(T)) == 0);
  }
  // Canary bytes before the data and after its n elements, intact?
  bool canaries_intact() const {
    const std::size_t total = bytes_ + 2 * canary_bytes;
    SPECGRAPH_FUZZ_UNPOISON(raw_, total);
    bool ok = true;
    const unsigned char* tail = raw_ + canary_bytes + n_ * sizeof(T);
    const unsigned char* end = raw_ + total;
    for (const unsigned char* c = raw_; c < raw_ + canary_bytes; ++c) ok = ok && *c == canary_value;
    for (const unsigned char* c = tail; c < end; ++c) ok = ok && *c == canary_value;
    poison();
    return ok;
  }

 private:
  void poison() const {
    SPECGRAPH_FUZZ_POISON(raw_, canary_bytes);
    unsigned char* tail = raw_ + canary_bytes + n_ * sizeof(T);
    SPECGRAPH_FUZZ_POISON(tail, static_cast<std::size_t>(raw_ + bytes_ + 2 * canary_bytes - tail));
  }
  std::size_t n_;
  std::size_t bytes_ = 0;
  unsigned char* raw_ = nullptr;
};

// ---- reference models (docs/metadata.md) ---------------------------------------------------

// Section 3, one query row. `bad` when an input is out of range (the row is then not written);
// otherwise cache_seqlen and the unique-consecutive pages of the first slots_read slots, and
// whether the section-3 layout check fails (when it applies to the row).
struct expand_row_result {
  bool bad = false;
  std::int32_t cache_seqlen = 0;
  std::vector<std::int64_t> pages;
  bool layout_violation = false;
};

inline expand_row_result expand_reference(const std::int64_t* slots, std::int32_t slots_read,
                                          std::int32_t last_page_len, std::int32_t page_size,
                                          std::int32_t decode_length, std::int64_t slot_limit,
                                          bool layout_checked) {
  expand_row_result r;
  if (last_page_len < 0 || last_page_len >= page_size) {
    r.bad = true;
    return r;
  }
  for (std::int32_t j = 0; j < slots_read; ++j) {
    if (slots[j] < 0 || slots[j] >= slot_limit || slots[j] / page_size > 0x7fffffff) {
      r.bad = true;
      return r;
    }
  }
  r.cache_seqlen = last_page_len + decode_length;
  for (std::int32_t j = 0; j < slots_read; ++j) {
    const std::int64_t page = slots[j] / page_size;
    if (r.pages.empty() || r.pages.back() != page) r.pages.push_back(page);
  }
  if (layout_checked) {
    for (std::int32_t j = 0; j < slots_read && !r.layout_violation; ++j) {
      if (slots[j] % page_size != (static_cast<std::int64_t>(last_page_len) + j) % page_size) {
        r.layout_violation = true;
      }
    }
    const std::int64_t expected_runs =
        (static_cast<std::int64_t>(last_page_len) + decode_length + page_size - 1) / page_size;
    if (!r.layout_violation && static_cast<std::int64_t>(r.pages.size()) != expected_runs) {
      r.layout_violation = true;
    }
  }
  return r;
}

// The row as it must be after the kernel: `old` (stride cells) with the pages stored in the
// first min(k, capacity) cells and zeros up to capacity; cells from capacity on unchanged.
inline std::vector<std::int32_t> expected_table_row(const std::vector<std::int32_t>& old,
                                                    const std::vector<std::int64_t>& pages,
                                                    std::int32_t capacity) {
  std::vector<std::int32_t> row = old;
  for (std::int32_t c = 0; c < capacity; ++c) {
    row[static_cast<std::size_t>(c)] =
        static_cast<std::size_t>(c) < pages.size()
            ? static_cast<std::int32_t>(pages[static_cast<std::size_t>(c)])
            : 0;
  }
  return row;
}

// Section 2, one request. `bad` when its pool row, its length or the slot of one of its pages
// is out of range (nothing is written for it then).
struct prefix_request_result {
  bool bad = false;
  std::int32_t last_page_len = 0;
  std::int32_t prefix_seqlen = 0;
  std::vector<std::int64_t> pages;
};

inline prefix_request_result prefix_reference(const std::int32_t* req_to_token, std::int64_t stride,
                                              std::int32_t pool_rows, std::int32_t pool_row,
                                              std::int32_t seq_len, std::int32_t page_size,
                                              std::int64_t slot_limit) {
  prefix_request_result r;
  if (pool_row < 0 || pool_row >= pool_rows || seq_len < 0 || seq_len > stride) {
    r.bad = true;
    return r;
  }
  r.last_page_len = seq_len % page_size;
  r.prefix_seqlen = seq_len - r.last_page_len;
  const std::int32_t n_pages = r.prefix_seqlen / page_size;
  const std::int32_t* tokens = req_to_token + static_cast<std::int64_t>(pool_row) * stride;
  for (std::int32_t j = 0; j < n_pages; ++j) {
    const std::int32_t slot = tokens[static_cast<std::int64_t>(j) * page_size];
    if (slot < 0 || slot >= slot_limit) {
      r.bad = true;
      return r;
    }
    r.pages.push_back(slot / page_size);
  }
  return r;
}

// What a refused request is written as (sections 2, 4): the padded request, pool row 0 and one
// token, whose one page (page size 1) is the dummy page 0 should req_to_token[0][0] be out of
// range.
inline prefix_request_result padded_prefix_reference(const std::int32_t* req_to_token,
                                                     std::int32_t page_size,
                                                     std::int64_t slot_limit) {
  prefix_request_result r;
  r.last_page_len = 1 % page_size;
  r.prefix_seqlen = 1 - r.last_page_len;
  if (page_size == 1) {
    const std::int32_t slot = req_to_token[0];
    r.pages.push_back(slot < 0 || slot >= slot_limit ? 0 : slot);
  }
  return r;
}

// Section 6: the evenly spaced fallback indices for (seq_len, max_count), before any capacity;
// at most `most` of them (pass capacity + 1 to learn whether the capacity overflows).
inline std::vector<std::int64_t> fallback_reference(
    std::int64_t seq_len, std::int64_t max_count,
    std::int64_t most = std::numeric_limits<std::int64_t>::max()) {
  std::vector<std::int64_t> out;
  const std::int64_t count = std::min(max_count, seq_len);
  if (count <= 0) return out;
  const std::int64_t step = std::max<std::int64_t>(1, (seq_len + count - 1) / count);
  for (std::int64_t i = 0; i < count && i < most && i * step < seq_len; ++i)
    out.push_back(i * step);
  return out;
}

}  // namespace specgraph::fuzz
