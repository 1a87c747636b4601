// GPT::generate, nanoGPT's sampling loop for one sequence: crop the context
// to block_size, forward (one token at a time through a KVCache while the
// context fits), scale the last logits by 1/temperature, keep the top_k,
// softmax, draw. The draw is an inverse-CDF walk over one uniform
// double from the project's Generator (53 bits of mt19937_64, the same on
// every standard library, unlike std::discrete_distribution), so a seed
// fixes the tokens wherever the forward computes the same logits.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>

#include "tinyllm/nn/gpt.h"
#include "tinyllm/nn/kv_cache.h"
#include "tinyllm/tensor/autograd.h"

namespace tinyllm::nn {
namespace {

// One token from softmax(logits / temperature) restricted to the logits at
// least as large as the top_k-th largest (ties with it stay, as in nanoGPT).
int sample_token(std::span<const double> logits, const GenerateOptions& options, Generator& gen) {
  std::vector<double> sorted(logits.begin(), logits.end());
  const std::size_t k = std::min(options.top_k, sorted.size());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1), sorted.end(), std::greater<>());
  const double kth = sorted[k - 1];
  const double largest = *std::max_element(logits.begin(), logits.end());
  // Unnormalised softmax weights, shifted by the largest logit so exp cannot overflow.
  std::vector<double> weights(logits.size(), 0.0);
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= kth) weights[i] = std::exp((logits[i] - largest) / options.temperature);
    total += weights[i];
  }
  if (!(total > 0) || !std::isfinite(total)) {
    throw std::runtime_error(fmt::format("GPT::generate: the logits are not finite (largest {})", largest));
  }
  // The first token whose running sum passes u·total; should rounding
  // leave u·total past the last sum, the last token that can be drawn.
  const double target = gen.uniform() * total;
  double sum = 0;
  int last = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] == 0) continue;
    sum += weights[i];
    last = static_cast<int>(i);
    if (target < sum) break;
  }
  return last;
}

// The logits after the last token of out: from the cache, fed the tokens it
// lacks, while out fits in block_size; else a forward over its last
// block_size tokens.
std::vector<double> next_logits(const GPT& model, const std::vector<int>& out, std::optional<KVCache>& cache) {
  const std::size_t T = model.config().block_size, V = model.config().vocab_size;
  if (cache && out.size() <= T) {
    std::vector<double> logits;
    while (cache->size() < out.size()) logits = cache->forward(out[cache->size()]);
    return logits;
  }
  const std::size_t seq = std::min(out.size(), T);
  const std::span<const int> context(out.data() + out.size() - seq, seq);
  const std::vector<double> logits = model.forward(context, 1, seq).to_vector();  // [1, seq, V]
  return {logits.end() - static_cast<std::ptrdiff_t>(V), logits.end()};
}

}  // namespace

void GenerateOptions::check() const {
  if (!(temperature > 0) || !std::isfinite(temperature)) {
    throw std::invalid_argument(
        fmt::format("GPT::generate: temperature must be positive and finite (got {})", temperature));
  }
  if (top_k == 0) throw std::invalid_argument("GPT::generate: top_k must be at least 1 (got 0)");
}

std::vector<int> GPT::generate(std::span<const int> idx, const GenerateOptions& options, Generator& gen,
                               const std::function<void(int)>& on_token) const {
  options.check();
  if (idx.empty()) throw std::invalid_argument("GPT::generate: the prompt must hold at least one token (got 0)");
  const autograd::NoGradGuard no_grad;
  std::vector<int> out(idx.begin(), idx.end());
  std::optional<KVCache> cache;
  if (options.use_cache) cache.emplace(*this);
  for (std::size_t n = 0; n < options.max_new_tokens; ++n) {
    out.push_back(sample_token(next_logits(*this, out, cache), options, gen));
    if (on_token) on_token(out.back());
  }
  return out;
}

}  // namespace tinyllm::nn
