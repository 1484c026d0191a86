// Expand page table validation (docs/metadata.md section 3): every bad parameter or input value
// rejected by name before anything is written, and the launcher validates before enqueueing.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/metadata.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t poison = -7;

// ---- validation: typed errors naming the field, nothing written --------------------------
struct host_expand_fixture {
  std::vector<std::int64_t> cache_loc{23, 24, 31, 32};
  std::vector<std::int32_t> lpl{3};
  std::vector<std::int32_t> table = std::vector<std::int32_t>(4, poison);
  std::vector<std::int32_t> seqlen = std::vector<std::int32_t>(2, poison);
  guard_word guard{};
  expand_params p;
  host_expand_fixture() {
    p.cache_loc = cache_loc.data();
    p.cache_loc_stride = 2;
    p.slots_read = 2;
    p.decode_length = 1;
    p.last_page_len = lpl.data();
    p.batch = 1;
    p.topk = 2;
    p.page_size = 4;
    p.page_table = table.data();
    p.page_table_stride = 2;
    p.capacity = 2;
    p.cache_seqlen = seqlen.data();
    p.guard = &guard;
  }
  bool untouched() const {
    return std::all_of(table.begin(), table.end(), [](std::int32_t v) { return v == poison; }) &&
           std::all_of(seqlen.begin(), seqlen.end(), [](std::int32_t v) { return v == poison; }) &&
           guard.violations == 0;
  }
};

template <class Mutate>
void expect_rejected(Mutate mutate, const std::string& field, const std::string& detail) {
  host_expand_fixture f;
  mutate(f);
  try {
    expand_page_table_host(f.p);
    FAIL() << "expected invalid_argument for " << field;
  } catch (const invalid_argument& e) {
    EXPECT_EQ(e.field(), field);
    EXPECT_NE(std::string(e.what()).find(detail), std::string::npos) << e.what();
  }
  EXPECT_TRUE(f.untouched()) << "rejected input must not write anything (" << field << ")";
}

TEST(ExpandValidation, RejectsEachBadParameterByName) {
  expect_rejected([](host_expand_fixture& f) { f.p.page_size = 0; }, "page_size",
                  "0 is below the minimum 1");
  expect_rejected([](host_expand_fixture& f) { f.p.page_size = -4; }, "page_size", "-4");
  expect_rejected([](host_expand_fixture& f) { f.p.topk = 0; }, "topk", "0 is below the minimum 1");
  expect_rejected([](host_expand_fixture& f) { f.p.decode_length = 0; }, "decode_length", "0");
  expect_rejected([](host_expand_fixture& f) { f.p.slots_read = 3; }, "slots_read",
                  "3 exceeds the cache_loc row stride 2");
  expect_rejected([](host_expand_fixture& f) { f.p.capacity = 0; }, "capacity",
                  "0 is below the minimum 1");
  expect_rejected([](host_expand_fixture& f) { f.p.page_table_stride = 1; }, "page_table_stride",
                  "1 is below the minimum 2");
  expect_rejected([](host_expand_fixture& f) { f.lpl[0] = 4; }, "last_page_len[0]",
                  "4 is outside [0, page_size 4)");
  expect_rejected([](host_expand_fixture& f) { f.lpl[0] = -1; }, "last_page_len[0]", "-1");
  expect_rejected([](host_expand_fixture& f) { f.cache_loc[3] = -2; }, "cache_loc[1][1]",
                  "-2 is outside [0,");
  expect_rejected([](host_expand_fixture& f) { f.p.slot_limit = 32; }, "cache_loc[1][1]",
                  "32 is outside [0, slot_limit 32)");
  expect_rejected([](host_expand_fixture& f) { f.p.guard = nullptr; }, "guard", "null");
  // Regressions (issue 11): cache_seqlen = last_page_len + decode_length overflowed int32.
  expect_rejected([](host_expand_fixture& f) { f.p.decode_length = 2147483647; }, "decode_length",
                  "2147483647 exceeds the limit 1024");
  expect_rejected([](host_expand_fixture& f) { f.p.page_size = 2147483647; }, "page_size",
                  "exceeds the limit 1048576");
  expect_rejected(
      [](host_expand_fixture& f) {
        f.p.page_size = 1;
        f.lpl[0] = 0;
        f.cache_loc[2] = (std::int64_t{1} << 33) + 1;
      },
      "cache_loc[1][0]", "above the int32 page-table limit");
}

TEST(ExpandValidation, LauncherValidatesBeforeEnqueueing) {
  auto ex = make_host_executor();
  host_expand_fixture f;
  f.p.topk = 0;
  expect_invalid([&] { launch_expand_page_table(*ex, f.p); }, "topk", "0 is below the minimum 1");
  EXPECT_EQ(ex->counters().kernel_launches, 0);
  EXPECT_TRUE(f.untouched());
}

}  // namespace
}  // namespace specgraph::testing
