#include <gtest/gtest.h>
#include <tinyllm/nn/gpt.h>
#include <tinyllm/optim/adamw.h>
#include <tinyllm/tensor/autograd.h>
#include <tinyllm/tensor/deferred_init.h>

#include <cmath>
#include <memory>
#include <numeric>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm::nn {
namespace {

std::vector<int> tokens(std::size_t n, int vocab, int salt = 0) {
  std::vector<int> ids(n);
  for (std::size_t i = 0; i < n; ++i)
    ids[i] = static_cast<int>((i * 7 + static_cast<std::size_t>(salt) * 3 + 1) % static_cast<std::size_t>(vocab));
  return ids;
}

TEST(GPTTest, ParameterNamesShapesAndOrder) {
  const std::size_t V = 256, T = 16, C = 8;
  GPT model({.vocab_size = V, .block_size = T, .n_layer = 2, .n_head = 2, .n_embd = C});
  std::vector<std::pair<std::string, Shape>> expected = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    std::vector<std::pair<std::string, Shape>> block = {{p + "ln_1.weight", {C}},
                                                        {p + "ln_1.bias", {C}},
                                                        {p + "attn.c_attn.weight", {3 * C, C}},
                                                        {p + "attn.c_attn.bias", {3 * C}},
                                                        {p + "attn.c_proj.weight", {C, C}},
                                                        {p + "attn.c_proj.bias", {C}},
                                                        {p + "ln_2.weight", {C}},
                                                        {p + "ln_2.bias", {C}},
                                                        {p + "mlp.c_fc.weight", {4 * C, C}},
                                                        {p + "mlp.c_fc.bias", {4 * C}},
                                                        {p + "mlp.c_proj.weight", {C, 4 * C}},
                                                        {p + "mlp.c_proj.bias", {C}}};
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

// The count `tinyllm memory` uses without building a model.
TEST(GPTTest, ConfigCountsTheModelsParameters) {
  for (const GPTConfig& c :
       {GPTConfig{}, GPTConfig{.vocab_size = 32, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 6},
        GPTConfig{.vocab_size = 256, .block_size = 1, .n_layer = 1, .n_head = 1, .n_embd = 1}}) {
    EXPECT_EQ(c.num_parameters(), GPT(c).num_parameters());
    const std::vector<Tensor> params = GPT(c).parameters();
    const std::vector<Shape> shapes = c.parameter_shapes();
    ASSERT_EQ(shapes.size(), params.size());
    ASSERT_EQ(shapes.size(), 4 + GPTConfig::kTensorsPerBlock * c.n_layer);
    for (std::size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(shapes[i], params[i].shape()) << "parameter " << i;
  }
}

// nanoGPT's estimate_mfu() for the default model: N = 834304 of which wpe
// holds T·C = 8192, so 6·826112 + 12·4·128·64.
TEST(GPTTest, CountsTrainingFlopsPerTokenAsNanoGPT) {
  EXPECT_EQ(GPTConfig{}.num_parameters(), 834304u);
  EXPECT_EQ(GPTConfig{}.flops_per_token(), 4956672.0 + 393216.0);
  const GPTConfig one{.vocab_size = 2, .block_size = 3, .n_layer = 1, .n_head = 1, .n_embd = 1};
  EXPECT_EQ(one.flops_per_token(), 6.0 * (one.num_parameters() - 3) + 12.0 * 3);
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

// An independent implementation agrees: the same tiny GPT in PyTorch
// (tools/torch_gpt.py), every weight and token given by a formula exact in
// both languages, gives this loss and these weighted gradient sums
// Σ_j grad_j·((j mod 7) − 3), printed by tools/gpt_reference.py (torch 1.13).
TEST(GPTTest, ProducesPyTorchValues) {
  const double loss = 2.4111057680636412;
  const std::vector<std::pair<std::string, double>> grad_sums = {
      {"wte.weight", -0.032339167325725469},
      {"wpe.weight", -0.11284756072146215},
      {"h.0.ln_1.weight", 0.0035648990092971154},
      {"h.0.ln_1.bias", -0.0020978263307116799},
      {"h.0.attn.c_attn.weight", -0.0035291507064446302},
      {"h.0.attn.c_attn.bias", 0.0035645168167406805},
      {"h.0.attn.c_proj.weight", -0.00015994381970656311},
      {"h.0.attn.c_proj.bias", 0.016846999989504785},
      {"h.0.ln_2.weight", 0.019662265387715219},
      {"h.0.ln_2.bias", -0.0028513542878554256},
      {"h.0.mlp.c_fc.weight", -0.0017343496537942161},
      {"h.0.mlp.c_fc.bias", 0.0018432714511265971},
      {"h.0.mlp.c_proj.weight", -0.0021202653699013288},
      {"h.0.mlp.c_proj.bias", 0.017840279403524926},
      {"h.1.ln_1.weight", 0.0020780428224192078},
      {"h.1.ln_1.bias", 0.0066457901693688058},
      {"h.1.attn.c_attn.weight", 0.0028818450602748663},
      {"h.1.attn.c_attn.bias", 0.0075266129393960872},
      {"h.1.attn.c_proj.weight", 0.0035293426930916535},
      {"h.1.attn.c_proj.bias", 0.017382754677539056},
      {"h.1.ln_2.weight", -0.0094302762312935169},
      {"h.1.ln_2.bias", 0.0043427673934330942},
      {"h.1.mlp.c_fc.weight", -0.0028062942328424554},
      {"h.1.mlp.c_fc.bias", 0.0075003152517081097},
      {"h.1.mlp.c_proj.weight", 0.0017080434062919166},
      {"h.1.mlp.c_proj.bias", 0.018361130793780642},
      {"ln_f.weight", 0.058613082120214044},
      {"ln_f.bias", -0.058072507196035753},
  };

  const std::size_t V = 11, T = 5, B = 2;
  GPT model({.vocab_size = V, .block_size = T, .n_layer = 2, .n_head = 2, .n_embd = 8});
  const auto named = model.named_parameters();
  for (std::size_t k = 0; k < named.size(); ++k) {
    auto data = named[k].second.data();
    for (std::size_t j = 0; j < data.size(); ++j) {
      data[j] = static_cast<double>(static_cast<long>((7 * j + 13 * k) % 17) - 8) / 40.0;
    }
  }
  std::vector<int> idx(B * T), targets(B * T);
  for (std::size_t i = 0; i < B * T; ++i) {
    idx[i] = static_cast<int>((5 * i + 3) % V);
    targets[i] = static_cast<int>((3 * i + 1) % V);
  }
  Tensor out = model.loss(idx, targets, B, T);
  EXPECT_NEAR(out.item(), loss, 1e-13);
  out.backward();
  ASSERT_EQ(named.size(), grad_sums.size());
  for (std::size_t k = 0; k < named.size(); ++k) {
    ASSERT_EQ(named[k].first, grad_sums[k].first);
    const auto grad = named[k].second.grad();
    double sum = 0.0;
    for (std::size_t j = 0; j < grad.size(); ++j) sum += grad[j] * (static_cast<double>(j % 7) - 3.0);
    EXPECT_NEAR(sum, grad_sums[k].second, 1e-13) << named[k].first;
  }
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

// A GPT built deferred makes, for any range of any parameter, the values
// of an eager build with the same seed: what lets ZeRO stage 3 initialise
// only its own chunk.
TEST(GPTTest, ADeferredBuildMakesTheEagerValuesOfAnyRange) {
  const GPTConfig config{.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};
  GPT eager(config, 5);
  std::unique_ptr<GPT> deferred;
  {
    DeferredInitGuard guard;
    deferred = std::make_unique<GPT>(config, 5);
  }
  const std::vector<Tensor> want = eager.parameters(), got = deferred->parameters();
  ASSERT_EQ(want.size(), got.size());
  std::size_t state = 1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(is_deferred(got[i])) << "parameter " << i;
    EXPECT_TRUE(got[i].requires_grad());
    const std::size_t n = want[i].numel();
    for (int trial = 0; trial < 4; ++trial) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const std::size_t begin = (state >> 33) % n, count = 1 + (state >> 13) % (n - begin);
      std::vector<double> values(count);
      initial_values(got[i], begin, values);
      for (std::size_t k = 0; k < count; ++k) {
        ASSERT_EQ(values[k], want[i].data()[begin + k]) << "parameter " << i << ", element " << begin + k;
      }
    }
  }
}

}  // namespace
}  // namespace tinyllm::nn
