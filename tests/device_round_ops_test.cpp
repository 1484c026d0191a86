// The device-round graph's two small kernels (specgraph/device_round.hpp): the extend handoff
// (accept_len = accept_length + 1 for real rows, 1 for padded ones, 0 for an out-of-range
// length) and the guard fold (counts summed with saturation, the earlier violation's details
// kept), on fresh random inputs against references written here, outputs poisoned with slack
// past every capacity, the exact capacity filled; short capacities and bad arguments refused by
// name with nothing enqueued.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "specgraph/device_round.hpp"
#include "specgraph/error.hpp"
#include "specgraph/executor.hpp"
#include "specgraph/guard.hpp"
#include "tests/test_support.hpp"

namespace specgraph::testing {
namespace {

constexpr std::int32_t poison = -77;

class DeviceRoundOps : public ExecutorTest {};

TEST_P(DeviceRoundOps, TheHandoffAddsTheBonusForRealRowsOnly) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < property_cases(200); ++i) {
    const std::int32_t batch = static_cast<std::int32_t>(rng() % 7);
    const std::int32_t steps = 1 + static_cast<std::int32_t>(rng() % 5);
    // Every other case fills the output to its exact capacity; slack of 3 past it either way.
    const std::int64_t capacity = batch + (i % 2 == 0 ? 0 : static_cast<std::int64_t>(rng() % 3));
    const std::int32_t real = static_cast<std::int32_t>(rng() % (batch + 3)) - 1;  // [-1, B+1]
    std::vector<std::int32_t> length(static_cast<std::size_t>(batch));
    for (auto& c : length) c = static_cast<std::int32_t>(rng() % (steps + 4)) - 2;
    const dvec<std::int32_t> d_length(*ex, length);
    dvec<std::int32_t> out(*ex, static_cast<std::size_t>(capacity + 3), poison);
    const dvec<std::int32_t> word(*ex, std::vector<std::int32_t>{real});
    extend_handoff_params p;
    p.accept_length = d_length.data();
    p.accept_length_capacity = batch;
    p.accept_len = out.data();
    p.accept_len_capacity = capacity;
    p.real_batch_at = word.data();
    p.batch = batch;
    p.num_steps = steps;
    launch_extend_handoff(*ex, p);
    std::vector<std::int32_t> want(static_cast<std::size_t>(capacity + 3), poison);
    const std::int32_t clamped = real < 0 ? 0 : (real > batch ? batch : real);
    for (std::int32_t r = 0; r < batch; ++r) {
      const std::int32_t c = length[static_cast<std::size_t>(r)];
      want[static_cast<std::size_t>(r)] = r >= clamped ? 1 : (c >= 0 && c <= steps ? c + 1 : 0);
    }
    EXPECT_EQ(out.download(), want) << "case " << i << ", batch " << batch << ", real " << real;
  }
}

TEST_P(DeviceRoundOps, TheHandoffRefusesShortCapacitiesAndBadArgumentsByName) {
  const dvec<std::int32_t> length(*ex, std::vector<std::int32_t>{0, 1, 2, 3});
  dvec<std::int32_t> out(*ex, 4, poison);
  const dvec<std::int32_t> word(*ex, std::vector<std::int32_t>{4});
  extend_handoff_params p;
  p.accept_length = length.data();
  p.accept_length_capacity = 4;
  p.accept_len = out.data();
  p.accept_len_capacity = 4;
  p.real_batch_at = word.data();
  p.batch = 4;
  p.num_steps = 3;
  const std::int64_t launches = ex->counters().kernel_launches;
  auto with = [&](auto change, const std::string& field, const std::string& detail = {}) {
    extend_handoff_params q = p;
    change(q);
    expect_invalid([&] { launch_extend_handoff(*ex, q); }, field, detail);
  };
  with([](extend_handoff_params& q) { q.accept_len_capacity = 3; }, "accept_len_capacity", "3");
  with([](extend_handoff_params& q) { q.accept_length_capacity = 3; }, "accept_length_capacity");
  with([](extend_handoff_params& q) { q.batch = -1; }, "batch");
  with([](extend_handoff_params& q) { q.num_steps = 0; }, "num_steps");
  with([](extend_handoff_params& q) { q.accept_len = nullptr; }, "accept_len");
  with([](extend_handoff_params& q) { q.accept_length = nullptr; }, "accept_length");
  with([](extend_handoff_params& q) { q.real_batch_at = nullptr; }, "real_batch_at");
  EXPECT_EQ(ex->counters().kernel_launches, launches);
  EXPECT_EQ(out.download(), std::vector<std::int32_t>(4, poison)) << "nothing written";
  launch_extend_handoff(*ex, p);  // the exact capacity
  EXPECT_EQ(out.download(), (std::vector<std::int32_t>{1, 2, 3, 4}));
}

guard_word random_word(std::mt19937_64& rng) {
  guard_word w{};
  if (rng() % 3 == 0) return w;  // clean
  w.violations = 1 + static_cast<std::int32_t>(rng() % 9);
  w.kind = 1 + static_cast<std::int32_t>(rng() % 4);
  w.kernel = static_cast<std::int32_t>(rng() % 25);
  w.row = static_cast<std::int32_t>(rng() % 6);
  w.column = static_cast<std::int32_t>(rng() % 6);
  w.capacity = static_cast<std::int32_t>(rng() % 100);
  w.value = static_cast<std::int64_t>(rng() % 1000);
  w.first = 1 + rng() % 50;  // larger is earlier
  return w;
}

bool same(const guard_word& a, const guard_word& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

TEST_P(DeviceRoundOps, TheFoldSumsCountsAndKeepsTheEarlierViolation) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < property_cases(200); ++i) {
    const std::int32_t count = 1 + static_cast<std::int32_t>(rng() % 8);
    // Both buffers 2 words longer: the words past count must not be folded, nor written.
    std::vector<guard_word> words(static_cast<std::size_t>(count + 2)), summary(words.size());
    for (auto& w : words) w = random_word(rng);
    for (auto& s : summary) s = random_word(rng);
    if (i % 10 == 0) {
      words[0] = random_word(rng);
      summary[0] = random_word(rng);
      words[0].violations = 5;
      summary[0].violations = 0x7fffffff - 2;  // saturates
      summary[0].first = words[0].first = 7;
    }
    std::vector<guard_word> want = summary;
    for (std::int32_t k = 0; k < count; ++k) {
      const guard_word& w = words[static_cast<std::size_t>(k)];
      guard_word& s = want[static_cast<std::size_t>(k)];
      if (w.violations == 0) continue;
      const std::int64_t total = std::int64_t{s.violations} + w.violations;
      const bool take = s.violations == 0 || w.first > s.first;
      if (take) s = w;
      s.violations = total > 0x7fffffff ? 0x7fffffff : static_cast<std::int32_t>(total);
    }
    const dvec<guard_word> d_words(*ex, words);
    dvec<guard_word> d_summary(*ex, summary);
    launch_guard_fold(*ex, {d_words.data(), d_summary.data(), count});
    const std::vector<guard_word> got = d_summary.download();
    for (std::size_t k = 0; k < got.size(); ++k) {
      EXPECT_TRUE(same(got[k], want[k]))
          << "case " << i << ", word " << k << ": got " << got[k].violations << " / "
          << got[k].first << ", want " << want[k].violations << " / " << want[k].first;
    }
    EXPECT_TRUE(same(d_words.download()[0], words[0])) << "the live words are only read";
  }
}

TEST_P(DeviceRoundOps, TheFoldRefusesBadArgumentsByName) {
  dvec<guard_word> words(*ex, 4, guard_word{});
  const std::int64_t launches = ex->counters().kernel_launches;
  expect_invalid([&] { launch_guard_fold(*ex, {words.data(), words.data() + 2, 0}); }, "count");
  expect_invalid([&] { launch_guard_fold(*ex, {nullptr, words.data() + 2, 2}); }, "words");
  expect_invalid([&] { launch_guard_fold(*ex, {words.data(), nullptr, 2}); }, "summary");
  expect_invalid(
      [&] {
        launch_guard_fold(*ex, {words.data(), words.data() + 1, 2});
      },
      "summary", "overlaps");
  EXPECT_EQ(ex->counters().kernel_launches, launches);
  launch_guard_fold(*ex, {words.data(), words.data() + 2, 2});  // apart: accepted
}

SPECGRAPH_INSTANTIATE_EXECUTORS(DeviceRoundOps);

}  // namespace
}  // namespace specgraph::testing
