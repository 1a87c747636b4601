// How close AdamW's fused step comes to the memory bound: BM_AdamWStep moves
// 7 doubles per element (reads p, g, m, v; writes p, m, v), BM_Memcpy copies
// the same number of bytes (3.5n doubles read, 3.5n written). The AdamW
// benchmark also measures memcpy over those bytes in its own setup and
// reports its bandwidth as a fraction of it ("vs_memcpy"), so the ratio comes
// from one run on one machine state. It is not a benchmark of the step's
// arithmetic alone: at n = 2^16 the arrays fit in cache.
#include <benchmark/benchmark.h>
#include <tinyllm/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using tinyllm::Tensor;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kDoublesMovedPerElement = 7;

std::int64_t bytes_moved(std::size_t n) {
  return static_cast<std::int64_t>(kDoublesMovedPerElement * sizeof(double) * n);
}

// Bytes per second of memcpy over 3.5n doubles each way, averaged over
// copies for at least a fifth of a second after one warm-up copy.
double memcpy_bandwidth(std::size_t n) {
  const std::size_t count = kDoublesMovedPerElement * n / 2;
  std::vector<double> src(count, 1.0), dst(count, 0.0);
  std::memcpy(dst.data(), src.data(), count * sizeof(double));
  std::int64_t copies = 0;
  const Clock::time_point start = Clock::now();
  Clock::duration elapsed{};
  do {
    std::memcpy(dst.data(), src.data(), count * sizeof(double));
    benchmark::ClobberMemory();
    ++copies;
    elapsed = Clock::now() - start;
  } while (elapsed < std::chrono::milliseconds(200));
  benchmark::DoNotOptimize(dst.data());
  return static_cast<double>(copies * bytes_moved(n)) / std::chrono::duration<double>(elapsed).count();
}

void BM_AdamWStep(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const double reference = memcpy_bandwidth(n);

  Tensor w = Tensor::full({n}, 0.5, true);
  std::span<double> g = w.mutable_grad();
  for (std::size_t j = 0; j < n; ++j) g[j] = static_cast<double>(j % 17) / 16 - 0.5;
  tinyllm::optim::AdamW opt({w});
  opt.step();  // allocates and touches the moments, outside the timing

  const Clock::time_point start = Clock::now();
  for (auto _ : state) {
    opt.step();
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  state.SetBytesProcessed(state.iterations() * bytes_moved(n));
  const double adamw = static_cast<double>(state.iterations() * bytes_moved(n)) / seconds;
  state.counters["vs_memcpy"] = adamw / reference;
}

void BM_Memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t count = kDoublesMovedPerElement * n / 2;
  std::vector<double> src(count, 1.0), dst(count, 0.0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), count * sizeof(double));
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(dst.data());
  state.SetBytesProcessed(state.iterations() * bytes_moved(n));
}

BENCHMARK(BM_AdamWStep)->ArgNames({"n"})->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Memcpy)->ArgNames({"n"})->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
