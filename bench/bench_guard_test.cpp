// Test of bench_support.hpp's guarded(): a benchmark body that throws ends that benchmark with
// SkipWithError (named in the JSON) and the program goes on, instead of std::terminate. Run by
// ctest as bench.guarded: exit 0 when the JSON says so, 1 otherwise (a crash fails it too).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "specgraph/error.hpp"

int main(int argc, char** argv) {
  using specgraph::bench::guarded;
  if (argc != 2) {
    std::fprintf(stderr, "usage: bench_guard_test OUT.json\n");
    return 2;
  }
  const std::string out = argv[1];
  benchmark::RegisterBenchmark("guard/throws_in_the_loop", guarded([](benchmark::State& s) {
                                 for (auto _ : s) throw specgraph::error("device went away");
                               }));
  benchmark::RegisterBenchmark("guard/throws_before_the_loop", guarded([](benchmark::State&) {
                                 throw specgraph::error("no fixture");
                               }));
  benchmark::RegisterBenchmark("guard/runs", guarded([](benchmark::State& s) {
                                 for (auto _ : s) benchmark::DoNotOptimize(s.iterations());
                               }));
  std::vector<std::string> args{argv[0], "--benchmark_out=" + out, "--benchmark_out_format=json",
                                "--benchmark_min_time=0.001"};
  std::vector<char*> c;
  for (std::string& a : args) c.push_back(a.data());
  int n = static_cast<int>(c.size());
  benchmark::Initialize(&n, c.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  std::ifstream f(out);
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Each benchmark's entry, from its name to the next entry.
  const auto entry = [&](const std::string& name) {
    const auto at = json.find("\"name\": \"" + name + "\"");
    if (at == std::string::npos) return std::string();
    return json.substr(at, json.find('}', at) - at);
  };
  const auto has = [](const std::string& s, const std::string& what) {
    return s.find(what) != std::string::npos;
  };
  bool ok = true;
  for (const auto& [name, message] : std::vector<std::pair<std::string, std::string>>{
           {"guard/throws_in_the_loop", "device went away"},
           {"guard/throws_before_the_loop", "no fixture"}}) {
    const std::string e = entry(name);
    if (!has(e, "\"error_occurred\": true") || !has(e, message)) {
      std::fprintf(stderr, "FAIL: %s is not reported as an error naming '%s': %s\n", name.c_str(),
                   message.c_str(), e.c_str());
      ok = false;
    }
  }
  const std::string runs = entry("guard/runs");
  if (runs.empty() || has(runs, "error_occurred") || !has(runs, "\"iterations\": ")) {
    std::fprintf(stderr, "FAIL: guard/runs did not run after the errors: %s\n", runs.c_str());
    ok = false;
  }
  std::printf("%s\n", ok ? "bench_guard_test OK" : "bench_guard_test FAILED");
  return ok ? 0 : 1;
}
