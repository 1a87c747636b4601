// How much does the KV cache speed up sampling? GPT::generate at the
// trainer's default size (L 4, H 4, C 128, T 64) from a one-token prompt,
// with and without the cache, in new tokens/s. 63 new tokens fill the
// context, where each step without the cache runs the whole prefix again;
// 200 (tinyllm sample's default) go on past it, where both run the whole
// sliding context each step.
#include <benchmark/benchmark.h>
#include <tinyllm/nn/gpt.h>

namespace {

void BM_Generate(benchmark::State& state) {
  const tinyllm::nn::GPT model(tinyllm::nn::GPTConfig{});
  const std::vector<int> prompt{'\n'};
  const tinyllm::nn::GenerateOptions options{
      .max_new_tokens = static_cast<std::size_t>(state.range(0)), .top_k = 200, .use_cache = state.range(1) != 0};
  for (auto _ : state) {
    tinyllm::Generator gen(1337);
    benchmark::DoNotOptimize(model.generate(prompt, options, gen).data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(options.max_new_tokens), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Generate)
    ->ArgNames({"tokens", "cache"})
    ->ArgsProduct({{63, 200}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
