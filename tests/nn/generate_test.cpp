#include <gtest/gtest.h>
#include <tinyllm/nn/gpt.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "support/expect_throw.h"

namespace tinyllm::nn {
namespace {

const GPTConfig kSmall{.vocab_size = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};

// The last position's logits for out[0, end), cropped to block_size, from
// the model's own forward.
std::vector<double> last_logits(const GPT& model, const std::vector<int>& out, std::size_t end) {
  const std::size_t seq = std::min(end, model.config().block_size);
  const std::span<const int> context(out.data() + end - seq, seq);
  const std::vector<double> logits = model.forward(context, 1, seq).to_vector();
  const std::size_t V = model.config().vocab_size;
  return {logits.end() - static_cast<std::ptrdiff_t>(V), logits.end()};
}

std::vector<int> generate(const GPT& model, const std::vector<int>& prompt, const GenerateOptions& options,
                          std::uint64_t seed = 7) {
  Generator gen(seed);
  return model.generate(prompt, options, gen);
}

TEST(GenerateTest, ReturnsThePromptThenTheNewTokens) {
  const GPT model(kSmall);
  const std::vector<int> out = generate(model, {3, 1, 4}, {.max_new_tokens = 5});
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(std::vector<int>(out.begin(), out.begin() + 3), (std::vector<int>{3, 1, 4}));
  for (int t : out) EXPECT_TRUE(t >= 0 && t < 16) << t;
  EXPECT_EQ(generate(model, {3, 1, 4}, {.max_new_tokens = 0}), (std::vector<int>{3, 1, 4}));
}

// Past block_size too, so every step's context is cropped.
TEST(GenerateTest, GreedyIsTheArgmaxOfForwardTokenByToken) {
  const GPT model(kSmall, 42);
  const std::vector<int> out = generate(model, {3, 1, 4}, {.max_new_tokens = 12, .top_k = 1});
  for (std::size_t end = 3; end < out.size(); ++end) {
    const std::vector<double> logits = last_logits(model, out, end);
    const auto argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(out[end], argmax) << "position " << end;
  }
}

// The documented draw, by hand: softmax(logits / temperature), then the
// first token whose running sum passes one uniform double of the generator.
TEST(GenerateTest, DrawsByTheInverseCdfOfOneUniform) {
  const GPT model(kSmall, 5);
  const std::vector<int> prompt{2, 7};
  for (double temperature : {1.0, 0.05}) {
    for (std::uint64_t seed : {1, 2, 3, 4, 5}) {
      std::vector<double> p = last_logits(model, prompt, prompt.size());
      const double largest = *std::max_element(p.begin(), p.end());
      double total = 0;
      for (double& x : p) total += (x = std::exp((x - largest) / temperature));
      const double u = Generator(seed).uniform() * total;
      int expected = 0;
      for (double sum = p[0]; sum <= u;) sum += p[++expected];
      const std::vector<int> out = generate(model, prompt, {.max_new_tokens = 1, .temperature = temperature}, seed);
      EXPECT_EQ(out.back(), expected) << "temperature " << temperature << ", seed " << seed;
    }
  }
}

TEST(GenerateTest, TheSameSeedGivesTheSameTokens) {
  const GPT model(kSmall);
  const GenerateOptions options{.max_new_tokens = 40};
  const std::vector<int> a = generate(model, {5}, options, 11);
  EXPECT_EQ(generate(model, {5}, options, 11), a);
  EXPECT_NE(generate(model, {5}, options, 12), a);
}

TEST(GenerateTest, APromptLongerThanTheContextContinuesLikeItsLastBlockSizeTokens) {
  const GPT model(kSmall);
  std::vector<int> prompt(20);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>(i * 5 % 16);
  const std::vector<int> tail(prompt.end() - 8, prompt.end());
  const GenerateOptions options{.max_new_tokens = 10, .top_k = 4};
  const std::vector<int> long_out = generate(model, prompt, options);
  const std::vector<int> short_out = generate(model, tail, options);
  EXPECT_EQ(std::vector<int>(long_out.begin() + 20, long_out.end()),
            std::vector<int>(short_out.begin() + 8, short_out.end()));
}

// At a high temperature the two are near equally likely, so both appear.
TEST(GenerateTest, TopKTwoOnlyEmitsOneOfTheTwoMostLikelyTokens) {
  const GPT model(kSmall, 3);
  const std::vector<int> out = generate(model, {1}, {.max_new_tokens = 60, .temperature = 100, .top_k = 2});
  int seconds = 0;
  for (std::size_t end = 1; end < out.size(); ++end) {
    std::vector<double> logits = last_logits(model, out, end);
    const double chosen = logits[static_cast<std::size_t>(out[end])];
    std::sort(logits.begin(), logits.end(), std::greater<>());
    EXPECT_GE(chosen, logits[1]) << "position " << end;
    seconds += chosen < logits[0];
  }
  EXPECT_GT(seconds, 0);
  EXPECT_LT(seconds, 59);
}

TEST(GenerateTest, TopKFromTheVocabularySizeUpKeepsEveryToken) {
  const GPT model(kSmall);
  const std::vector<int> all = generate(model, {9}, {.max_new_tokens = 30});
  EXPECT_EQ(generate(model, {9}, {.max_new_tokens = 30, .top_k = 16}), all);
  EXPECT_EQ(generate(model, {9}, {.max_new_tokens = 30, .top_k = 1000}), all);
  EXPECT_NE(generate(model, {9}, {.max_new_tokens = 30, .top_k = 15}), all);
}

TEST(GenerateTest, RejectsABadTemperatureTopKOrPrompt) {
  const GPT model(kSmall);
  const std::string rule = "GPT::generate: temperature must be positive and finite (got ";
  EXPECT_THROW_WITH(generate(model, {1}, {.temperature = 0}), std::invalid_argument, rule + "0)");
  EXPECT_THROW_WITH(generate(model, {1}, {.temperature = -1}), std::invalid_argument, rule + "-1)");
  EXPECT_THROW_WITH(generate(model, {1}, {.temperature = std::nan("")}), std::invalid_argument, rule + "nan)");
  EXPECT_THROW_WITH(generate(model, {1}, {.temperature = std::numeric_limits<double>::infinity()}),
                    std::invalid_argument, rule + "inf)");
  EXPECT_THROW_WITH(generate(model, {1}, {.top_k = 0}), std::invalid_argument,
                    "GPT::generate: top_k must be at least 1 (got 0)");
  EXPECT_THROW_WITH(generate(model, {}, {}), std::invalid_argument,
                    "GPT::generate: the prompt must hold at least one token (got 0)");
}

}  // namespace
}  // namespace tinyllm::nn
