// causal_attention: forward against a plain reference written here with
// explicit loops over b, h, t, s; causality; gradients against central
// differences; and the errors for every bad input.
#include <gtest/gtest.h>
#include <tinyllm/tensor/autograd.h>
#include <tinyllm/tensor/ops.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm {
namespace {

using testing::expect_gradients_match;
using testing::random_leaf;

struct Config {
  std::size_t B, T, C, H;
};

std::string name_of(const Config& c) {
  return "B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " C " + std::to_string(c.C) + " H " +
         std::to_string(c.H);
}

// The textbook definition, one output element at a time:
//   y[b, t, h·D + d] = Σ_{s ≤ t} softmax_s(q_t · k_s / √D) · v[b, s, h·D + d]
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t H) {
  const std::size_t B = q.shape()[0], T = q.shape()[1], C = q.shape()[2], D = C / H;
  auto at = [&](const Tensor& x, std::size_t b, std::size_t t, std::size_t c) { return x.data()[(b * T + t) * C + c]; };
  std::vector<double> y(B * T * C, 0.0);
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t t = 0; t < T; ++t) {
        std::vector<double> score(t + 1);
        for (std::size_t s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (std::size_t d = 0; d < D; ++d) dot += at(q, b, t, h * D + d) * at(k, b, s, h * D + d);
          score[s] = dot / std::sqrt(static_cast<double>(D));
        }
        double max = score[0];
        for (double x : score) max = std::max(max, x);
        double total = 0.0;
        for (double& x : score) total += (x = std::exp(x - max));
        for (std::size_t s = 0; s <= t; ++s) {
          for (std::size_t d = 0; d < D; ++d) {
            y[(b * T + t) * C + h * D + d] += score[s] / total * at(v, b, s, h * D + d);
          }
        }
      }
    }
  }
  return y;
}

const std::vector<Config> kConfigs = {
    {1, 1, 4, 2},                // T = 1
    {2, 5, 6, 1},                // one head
    {2, 4, 6, 3}, {1, 6, 4, 4},  // n_head = C: heads of width 1
    {3, 3, 8, 2}, {1, 7, 1, 1},  // C = 1
};

TEST(CausalAttentionTest, ProducesHandComputedValues) {
  // Equal scores: position 1 averages v over positions 0 and 1.
  Tensor q = Tensor::zeros({1, 2, 1});
  Tensor v = Tensor::from({2, 4}, {1, 2, 1});
  EXPECT_EQ(causal_attention(q, q, v, 1).to_vector(), (std::vector<double>{2, 3}));
  // Scores 0 and ln 3 at position 1 weight v by 1/4 and 3/4 (D = 1, scale 1).
  Tensor q2 = Tensor::from({0, 1}, {1, 2, 1});
  Tensor k2 = Tensor::from({0, std::log(3.0)}, {1, 2, 1});
  std::vector<double> y = causal_attention(q2, k2, v, 1).to_vector();
  EXPECT_EQ(y[0], 2.0);
  EXPECT_NEAR(y[1], 0.25 * 2 + 0.75 * 4, 1e-15);
}

TEST(CausalAttentionTest, MatchesPlainReference) {
  unsigned seed = 1;
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(name_of(c));
    Tensor q = random_leaf({c.B, c.T, c.C}, seed++);
    Tensor k = random_leaf({c.B, c.T, c.C}, seed++);
    Tensor v = random_leaf({c.B, c.T, c.C}, seed++);
    const std::vector<double> expected = reference_attention(q, k, v, c.H);
    Tensor y = causal_attention(q, k, v, c.H);
    EXPECT_EQ(y.shape(), (Shape{c.B, c.T, c.C}));
    std::vector<double> actual = y.to_vector();
    for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-13) << "element " << i;
  }
}

TEST(CausalAttentionTest, SameValuesWithAndWithoutGrad) {
  Tensor q = random_leaf({2, 5, 6}, 20);
  Tensor k = random_leaf({2, 5, 6}, 21);
  Tensor v = random_leaf({2, 5, 6}, 22);
  Tensor with_grad = causal_attention(q, k, v, 3);
  EXPECT_TRUE(with_grad.requires_grad());
  autograd::NoGradGuard guard;
  Tensor without = causal_attention(q, k, v, 3);
  EXPECT_FALSE(without.requires_grad());
  EXPECT_EQ(without.to_vector(), with_grad.to_vector());
}

TEST(CausalAttentionTest, SingleStepOutputEqualsV) {
  Tensor q = random_leaf({3, 1, 6}, 30);
  Tensor k = random_leaf({3, 1, 6}, 31);
  Tensor v = random_leaf({3, 1, 6}, 32);
  EXPECT_EQ(causal_attention(q, k, v, 2).to_vector(), v.to_vector());
}

TEST(CausalAttentionTest, LaterPositionsDoNotReachEarlierOutputs) {
  const std::size_t B = 2, T = 5, C = 6, H = 2;
  const Tensor q = random_leaf({B, T, C}, 40);
  const Tensor k = random_leaf({B, T, C}, 41);
  const Tensor v = random_leaf({B, T, C}, 42);
  const std::vector<double> base = causal_attention(q, k, v, H).to_vector();
  for (std::size_t which = 0; which < 3; ++which) {
    for (std::size_t t = 0; t < T; ++t) {
      SCOPED_TRACE("input " + std::to_string(which) + " position " + std::to_string(t));
      std::vector<Tensor> in = {q.clone(), k.clone(), v.clone()};
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t c = 0; c < C; ++c) in[which].data()[(b * T + t) * C + c] += 1.0;
      const std::vector<double> y = causal_attention(in[0], in[1], in[2], H).to_vector();
      bool changed_at_t = false;
      for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t s = 0; s < T; ++s) {
          for (std::size_t c = 0; c < C; ++c) {
            const std::size_t i = (b * T + s) * C + c;
            if (s < t) {
              EXPECT_EQ(y[i], base[i]) << "b " << b << " s " << s << " c " << c;
            }
            if (s == t) changed_at_t = changed_at_t || y[i] != base[i];
          }
        }
      }
      // Position t itself must feel the change, or the test proves nothing;
      // at t = 0 a shift of q or k only moves a lone score, which softmax ignores.
      if (t > 0 || which == 2) {
        EXPECT_TRUE(changed_at_t);
      }
    }
  }
}

TEST(CausalAttentionTest, GradientsMatchFiniteDifferences) {
  unsigned seed = 50;
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(name_of(c));
    const Shape shape = {c.B, c.T, c.C};
    expect_gradients_match(
        [h = c.H](const std::vector<Tensor>& in) { return causal_attention(in[0], in[1], in[2], h); },
        {random_leaf(shape, seed), random_leaf(shape, seed + 1), random_leaf(shape, seed + 2)});
    seed += 3;
  }
}

TEST(CausalAttentionTest, OnlyInputsRequiringGradGetGradients) {
  const Shape shape = {2, 4, 6};
  auto f = [](const std::vector<Tensor>& in) { return causal_attention(in[0], in[1], in[2], 2); };
  // Only v: backward skips dS altogether.
  Tensor q = random_leaf(shape, 60).clone();
  Tensor k = random_leaf(shape, 61).clone();
  expect_gradients_match(f, {q, k, random_leaf(shape, 62)});
  EXPECT_TRUE(q.grad().empty());
  EXPECT_TRUE(k.grad().empty());
  // Only q.
  Tensor v = random_leaf(shape, 63).clone();
  expect_gradients_match(f, {random_leaf(shape, 64), k, v});
  EXPECT_TRUE(v.grad().empty());
}

TEST(CausalAttentionTest, BackwardAddsToExistingGrad) {
  const Shape shape = {2, 3, 4};
  const std::vector<Tensor> in = {random_leaf(shape, 70), random_leaf(shape, 71), random_leaf(shape, 72)};
  const Tensor seed = random_leaf(shape, 73).clone();
  causal_attention(in[0], in[1], in[2], 2).backward(seed);
  std::vector<std::vector<double>> once;
  for (const Tensor& t : in) once.emplace_back(t.grad().begin(), t.grad().end());
  causal_attention(in[0], in[1], in[2], 2).backward(seed);
  for (std::size_t which = 0; which < in.size(); ++which) {
    for (std::size_t i = 0; i < once[which].size(); ++i) {
      EXPECT_NEAR(in[which].grad()[i], 2 * once[which][i], 1e-12) << "input " << which << " element " << i;
    }
  }
}

TEST(CausalAttentionTest, RejectsInputsThatAreNot3D) {
  EXPECT_THROW_WITH(causal_attention(Tensor::zeros({4, 6}), Tensor::zeros({4, 6}), Tensor::zeros({4, 6}), 2),
                    std::invalid_argument, "causal_attention: q must be 3-D [B, T, C] (got [4, 6])");
}

TEST(CausalAttentionTest, RejectsUnequalShapes) {
  EXPECT_THROW_WITH(causal_attention(Tensor::zeros({1, 4, 6}), Tensor::zeros({1, 3, 6}), Tensor::zeros({1, 4, 6}), 2),
                    std::invalid_argument,
                    "causal_attention: q, k and v must have equal shapes (got q [1, 4, 6], k [1, 3, 6], v [1, 4, 6])");
  EXPECT_THROW_WITH(
      causal_attention(Tensor::zeros({1, 4, 6}), Tensor::zeros({1, 4, 6}), Tensor::zeros({1, 4, 6, 1}), 2),
      std::invalid_argument, "v [1, 4, 6, 1]");
}

TEST(CausalAttentionTest, RejectsZeroHeads) {
  Tensor x = Tensor::zeros({1, 2, 4});
  EXPECT_THROW_WITH(causal_attention(x, x, x, 0), std::invalid_argument,
                    "causal_attention: n_head must be >= 1 (got 0)");
}

TEST(CausalAttentionTest, RejectsWidthNotDivisibleByHeads) {
  Tensor x = Tensor::zeros({1, 2, 10});
  EXPECT_THROW_WITH(causal_attention(x, x, x, 3), std::invalid_argument,
                    "causal_attention: width 10 is not divisible by 3 heads");
}

}  // namespace
}  // namespace tinyllm
