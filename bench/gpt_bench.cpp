// How fast does one training step's compute run? One GPT forward + backward
// at the trainer's default size (L 4, H 4, C 128, T 64, batch 16) on one
// process, in tokens/s, with the model FLOPs it implies (6 per parameter per
// token for the products, plus 12·L·T·C per token for attention's two).
#include <benchmark/benchmark.h>
#include <tinyllm/nn/gpt.h>

namespace {

void BM_GPTForwardBackward(benchmark::State& state) {
  const tinyllm::nn::GPTConfig config{};
  const std::size_t B = static_cast<std::size_t>(state.range(0)), T = config.block_size;
  tinyllm::nn::GPT model(config);
  std::vector<int> idx(B * T), targets(B * T);
  for (std::size_t i = 0; i < B * T; ++i) {
    idx[i] = static_cast<int>((i * 31 + 7) % config.vocab_size);
    targets[i] = static_cast<int>((i * 17 + 3) % config.vocab_size);
  }
  auto step = [&] {
    model.zero_grad();
    model.loss(idx, targets, B, T).backward();
  };
  step();  // the first step touches fresh pages; the storage cache serves every later one
  for (auto _ : state) {
    step();
    benchmark::DoNotOptimize(model.parameters()[0].grad().data());
  }
  const double tokens = static_cast<double>(B * T);
  const double flops_per_token = 6.0 * static_cast<double>(model.num_parameters()) +
                                 12.0 * static_cast<double>(config.n_layer * T * config.n_embd);
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(tokens * flops_per_token * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_GPTForwardBackward)->ArgName("batch")->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

}  // namespace

BENCHMARK_MAIN();
