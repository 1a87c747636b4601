#include <tinyllm/nn/gpt.h>

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include <tinyllm/optim/adamw.h>
#include <tinyllm/tensor/autograd.h>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm::nn {
namespace {

std::vector<int> tokens(std::size_t n, int vocab, int salt = 0) {
  std::vector<int> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<int>((i * 7 + static_cast<std::size_t>(salt) * 3 + 1) % static_cast<std::size_t>(vocab));
  return ids;
}

TEST(GPTTest, ParameterNamesShapesAndOrder) {
  const std::size_t V = 256, T = 16, C = 8;
  GPT model({.vocab_size = V, .block_size = T, .n_layer = 2, .n_head = 2, .n_embd = C});
  std::vector<std::pair<std::string, Shape>> expected = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    std::vector<std::pair<std::string, Shape>> block = {
        {p + "ln_1.weight", {C}},           {p + "ln_1.bias", {C}},
        {p + "attn.c_attn.weight", {3 * C, C}}, {p + "attn.c_attn.bias", {3 * C}},
        {p + "attn.c_proj.weight", {C, C}}, {p + "attn.c_proj.bias", {C}},
        {p + "ln_2.weight", {C}},           {p + "ln_2.bias", {C}},
        {p + "mlp.c_fc.weight", {4 * C, C}}, {p + "mlp.c_fc.bias", {4 * C}},
        {p + "mlp.c_proj.weight", {C, 4 * C}}, {p + "mlp.c_proj.bias", {C}}};
    expected.insert(expected.end(), block.begin(), block.end());
  }
  expected.push_back({"ln_f.weight", {C}});
  expected.push_back({"ln_f.bias", {C}});

  const auto named = model.named_parameters();
  ASSERT_EQ(named.size(), expected.size());
  for (std::size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, expected[i].first) << "parameter " << i;
    EXPECT_EQ(named[i].second.shape(), expected[i].second) << named[i].first;
  }
}

TEST(GPTTest, InitialisesLikeGPT2) {
  const std::size_t L = 3;
  GPT model({.vocab_size = 256, .block_size = 64, .n_layer = L, .n_head = 4, .n_embd = 64});
  auto std_of = [](const Tensor& t) {
    double sq = 0;
    for (double x : t.data()) sq += x * x;
    return std::sqrt(sq / static_cast<double>(t.numel()));
  };
  for (const auto& [name, p] : model.named_parameters()) {
    const bool is_ln = name.find("ln_") != std::string::npos;
    if (name.ends_with(".bias")) {
      for (double x : p.data()) ASSERT_EQ(x, 0.0) << name;
    } else if (is_ln) {
      for (double x : p.data()) ASSERT_EQ(x, 1.0) << name;
    } else {
      const double target = name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(2.0 * L) : 0.02;
      EXPECT_NEAR(std_of(p), target, 0.1 * target) << name;
    }
  }
}

TEST(GPTTest, SeedFixesTheWeights) {
  const GPTConfig config{.vocab_size = 16, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4};
  GPT a(config, 7), b(config, 7), c(config, 8);
  EXPECT_EQ(a.parameters()[0].to_vector(), b.parameters()[0].to_vector());
  EXPECT_NE(a.parameters()[0].to_vector(), c.parameters()[0].to_vector());
}

TEST(GPTTest, LossAtInitIsNearLogVocab) {
  GPT model({});
  const std::size_t B = 4, T = 64;
  const auto idx = tokens(B * T, 256);
  const auto targets = tokens(B * T, 256, 1);
  EXPECT_NEAR(model.loss(idx, targets, B, T).item(), std::log(256.0), 0.1);
}

TEST(GPTTest, LogitsAreCausal) {
  GPT model({.vocab_size = 11, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8});
  autograd::NoGradGuard no_grad;
  auto idx = tokens(6, 11);
  const auto before = model.forward(idx, 1, 6).to_vector();
  idx[4] = (idx[4] + 5) % 11;
  const auto after = model.forward(idx, 1, 6).to_vector();
  const std::size_t changed_from = 4 * 11;
  for (std::size_t i = 0; i < changed_from; ++i) EXPECT_EQ(before[i], after[i]) << "logit " << i;
  bool any = false;
  for (std::size_t i = changed_from; i < before.size(); ++i) any = any || before[i] != after[i];
  EXPECT_TRUE(any);
}

// eps 1e-6 and the default tolerances: the loss is smooth and O(1).
TEST(GPTTest, WholeModelGradientMatchesFiniteDifferences) {
  GPT model({.vocab_size = 7, .block_size = 4, .n_layer = 2, .n_head = 2, .n_embd = 4}, 3);
  // A larger init than GPT-2's so every path carries a visible gradient.
  Generator gen(5);
  for (const Tensor& p : model.parameters()) normal_(p, gen, 0.0, 0.5);
  const std::size_t B = 2, T = 3;
  const auto idx = tokens(B * T, 7);
  const auto targets = tokens(B * T, 7, 2);
  testing::expect_gradients_match([&](const std::vector<Tensor>&) { return model.loss(idx, targets, B, T); },
                                  model.parameters());
}

// It can learn: one fixed batch is memorised, the loss falling below 0.05.
TEST(GPTTest, MemorisesAFixedBatch) {
  GPT model({.vocab_size = 16, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16});
  optim::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  const std::size_t B = 2, T = 8;
  const auto idx = tokens(B * T, 16);
  const auto targets = tokens(B * T, 16, 5);
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss = model.loss(idx, targets, B, T);
    (step == 0 ? first : last) = loss.item();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(first, 2.0);
  EXPECT_LT(last, 0.05);
}

TEST(GPTTest, RejectsBadConfigurationAndInput) {
  EXPECT_THROW_WITH(GPT({.n_head = 3, .n_embd = 128}), std::invalid_argument, "width 128 is not divisible by 3 heads");
  EXPECT_THROW_WITH(GPT({.n_layer = 0}), std::invalid_argument, "n_layer 0");
  GPT model({.vocab_size = 10, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4});
  const std::vector<int> five(5, 1), four(4, 1);
  EXPECT_THROW_WITH(model.forward(five, 1, 5), std::invalid_argument, "sequence length must be in [1, 4] (got 5)");
  EXPECT_THROW_WITH(model.forward(five, 1, 4), std::invalid_argument, "5 token ids do not fill a batch of [1, 4]");
  const std::vector<int> bad = {1, 2, 10, 3};
  EXPECT_THROW_WITH(model.forward(bad, 1, 4), std::invalid_argument, "token id 10");
}

}  // namespace
}  // namespace tinyllm::nn
