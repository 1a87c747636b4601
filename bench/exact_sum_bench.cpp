// What an exact, order-independent sum costs (docs/BITWISE.md): ExactSum::add
// of one term against a plain y += x over the same n, the default model's
// parameter count, and the clip norm's exact Σx² against a plain one.
// The time of one pass over n elements, and elements per second.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "tinyllm/distributed/exact_sum.h"

namespace {

constexpr std::int64_t kDefaultModelParameters = 834304;

std::vector<double> gradient_like(std::size_t n) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 1e-3);
  std::vector<double> x(n);
  for (double& xi : x) xi = normal(rng);
  return x;
}

// items_per_second counts elements: 1e9 / items_per_second is ns per element.
void report(benchmark::State& state, std::size_t n) {
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(n));
}

void BM_ExactSumAdd(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<double> x = gradient_like(n);
  tinyllm::dist::ExactSum sum(n);
  for (auto _ : state) {
    if (state.iterations() % 1024 == 0) sum.clear();  // stays within the term limit
    sum.add(x);
    benchmark::ClobberMemory();
  }
  report(state, n);
}

void BM_PlainAdd(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<double> x = gradient_like(n);
  std::vector<double> y(n, 0.0);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
    benchmark::ClobberMemory();
  }
  report(state, n);
}

void BM_ExactSumOfSquares(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<double> x = gradient_like(n);
  for (auto _ : state) benchmark::DoNotOptimize(tinyllm::dist::exact_sum_of_squares(x));
  report(state, n);
}

void BM_PlainSumOfSquares(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<double> x = gradient_like(n);
  for (auto _ : state) {
    double s = 0;
    for (const double xi : x) s += xi * xi;
    benchmark::DoNotOptimize(s);
  }
  report(state, n);
}

BENCHMARK(BM_ExactSumAdd)->Arg(kDefaultModelParameters)->Arg(1 << 14);
BENCHMARK(BM_PlainAdd)->Arg(kDefaultModelParameters)->Arg(1 << 14);
BENCHMARK(BM_ExactSumOfSquares)->Arg(kDefaultModelParameters);
BENCHMARK(BM_PlainSumOfSquares)->Arg(kDefaultModelParameters);

}  // namespace

BENCHMARK_MAIN();
