// Does linear() get what OpenBLAS can give? The GPT's matrix products at the
// default size (B·T = 1024 rows, C = 128), through tinyllm's linear op and
// through cblas_dgemm called directly on the same shapes, in the same run.
// Counter vs_dgemm = dgemm's time / linear's time (1.0 = no overhead);
// of_peak = linear's rate over the rate of all the BLAS threads at
// tinyllm::dgemm_peak_gflops() (the peak `tinyllm train` reports MFU against).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <tinyllm/tensor/ops.h>
#include <tinyllm/tensor/parallel.h>
#include <tinyllm/tensor/random.h>

#include <chrono>

namespace {

using tinyllm::Tensor;

struct Shapes {
  std::size_t rows, in, out;
};

Shapes shapes_of(const benchmark::State& state) {
  return {static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)),
          static_cast<std::size_t>(state.range(2))};
}

template <class F>
double seconds_per_call(F&& once) {
  once();
  const int reps = 50;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) once();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

// Seconds per call of the products linear() performs: y = x·Wᵀ forward, and
// with backward also dx = dy·W and dW = dyᵀ·x.
double dgemm_seconds(const Shapes& s, bool backward) {
  std::vector<double> x(s.rows * s.in, 0.5), w(s.out * s.in, 0.25), y(s.rows * s.out), dx(s.rows * s.in),
      dw(s.out * s.in);
  const int m = static_cast<int>(s.rows), k = static_cast<int>(s.in), n = static_cast<int>(s.out);
  auto once = [&] {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0, x.data(), k, w.data(), k, 0.0, y.data(), n);
    if (!backward) return;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1.0, y.data(), n, w.data(), k, 1.0, dx.data(), k);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1.0, y.data(), n, x.data(), k, 1.0, dw.data(), k);
  };
  return seconds_per_call(once);
}

// Both sides timed the same way, one after the other, so the ratio is fair.
template <class F>
void report(benchmark::State& state, const Shapes& s, bool backward, F&& ours_once) {
  const double flops = 2.0 * static_cast<double>(s.rows * s.in * s.out) * (backward ? 3 : 1);
  const double ours = seconds_per_call(ours_once), theirs = dgemm_seconds(s, backward);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["dgemm_GFLOP/s"] = flops * 1e-9 / theirs;
  state.counters["vs_dgemm"] = theirs / ours;
  static const double peak = tinyllm::dgemm_peak_gflops() * tinyllm::get_num_threads();
  state.counters["of_peak"] = flops * 1e-9 / ours / peak;
}

void BM_LinearForward(benchmark::State& state) {
  const Shapes s = shapes_of(state);
  tinyllm::Generator gen(1);
  Tensor x = tinyllm::randn({s.rows, s.in}, gen);
  Tensor w = tinyllm::randn({s.out, s.in}, gen);
  auto once = [&] { benchmark::DoNotOptimize(tinyllm::linear(x, w).data().data()); };
  for (auto _ : state) once();
  report(state, s, false, once);
}

void BM_LinearForwardBackward(benchmark::State& state) {
  const Shapes s = shapes_of(state);
  tinyllm::Generator gen(1);
  Tensor x = tinyllm::randn({s.rows, s.in}, gen, true);
  Tensor w = tinyllm::randn({s.out, s.in}, gen, true);
  Tensor dy = tinyllm::randn({s.rows, s.out}, gen);
  auto once = [&] {
    tinyllm::linear(x, w).backward(dy);
    benchmark::DoNotOptimize(w.grad().data());
  };
  for (auto _ : state) once();
  report(state, s, true, once);
}

// The GPT's products at the default size: c_attn, attn.c_proj, c_fc, mlp.c_proj, the tied head.
void model_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "in", "out"});
  for (auto [in, out] : {std::pair{128, 384}, {128, 128}, {128, 512}, {512, 128}, {128, 256}}) {
    b->Args({1024, in, out});
  }
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_LinearForward)->Apply(model_shapes);
BENCHMARK(BM_LinearForwardBackward)->Apply(model_shapes);

}  // namespace

BENCHMARK_MAIN();
