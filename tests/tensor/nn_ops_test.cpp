// embedding, layer_norm, gelu and cross_entropy: a central-difference
// gradient check of each over shapes with size-1 dims, values from their
// definitions, and every input error. Gradchecks use the default eps 1e-6,
// atol 1e-7, rtol 1e-6.
#include <gtest/gtest.h>
#include <tinyllm/tensor/ops.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm {
namespace {

using testing::expect_gradients_match;
using testing::random_leaf;

using testing::grad_of;

// Ids 0..n-1 folded into [0, V) with a stride, so rows repeat once n > V.
std::vector<int> spread_ids(std::size_t n, std::size_t V) {
  std::vector<int> ids(n);
  for (std::size_t p = 0; p < n; ++p) ids[p] = static_cast<int>((p * 5 + 2) % V);
  return ids;
}

// ---------------------------------------------------------------------------
// embedding

TEST(EmbeddingTest, PicksTheRowsOfTheIds) {
  std::vector<double> values(12);
  std::iota(values.begin(), values.end(), 0.0);
  const Tensor weight = Tensor::from(values, {4, 3});  // row r is {3r, 3r+1, 3r+2}
  const std::vector<int> ids{2, 0, 2, 3};
  const Tensor out = embedding(weight, ids, {2, 2});
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{6, 7, 8, 0, 1, 2, 6, 7, 8, 9, 10, 11}));
}

TEST(EmbeddingTest, ScalarIdsShapeGivesOneRow) {
  const Tensor weight = Tensor::from({1, 2, 3, 4}, {2, 2});
  const std::vector<int> ids{1};
  const Tensor out = embedding(weight, ids, {});
  EXPECT_EQ(out.shape(), (Shape{2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{3, 4}));
}

TEST(EmbeddingTest, NoIdsGiveAnEmptyOutput) {
  const Tensor weight = Tensor::from({1, 2, 3, 4}, {2, 2});
  const Tensor out = embedding(weight, {}, {0, 3});
  EXPECT_EQ(out.shape(), (Shape{0, 3, 2}));
  EXPECT_EQ(out.numel(), 0u);
}

TEST(EmbeddingTest, RepeatedIdsSumTheirGradients) {
  const Tensor weight = Tensor::from({0, 0, 0, 0, 0, 0}, {3, 2}, true);
  const std::vector<int> ids{1, 1, 0};
  const Tensor out = embedding(weight, ids, {3});
  out.backward(Tensor::from({1, 2, 10, 20, 100, 200}, {3, 2}));
  EXPECT_EQ(grad_of(weight), (std::vector<double>{100, 200, 11, 22, 0, 0}));
}

TEST(EmbeddingTest, GradientsMatchNumeric) {
  struct Case {
    std::size_t V, C;
    Shape ids_shape;
  };
  const std::vector<Case> cases{
      {1, 1, {1}}, {1, 3, {4}}, {5, 1, {3}}, {5, 3, {4}}, {7, 2, {2, 3}}, {3, 4, {2, 1, 2}}, {4, 2, {1, 1}}, {2, 3, {}},
  };
  unsigned seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "V " << c.V << " C " << c.C << " ids " << to_string(c.ids_shape));
    const std::vector<int> ids = spread_ids(numel_of(c.ids_shape), c.V);
    expect_gradients_match([&](const std::vector<Tensor>& in) { return embedding(in[0], ids, c.ids_shape); },
                           {random_leaf({c.V, c.C}, seed++)});
  }
}

TEST(EmbeddingTest, GradientsMatchNumericWithRepeatedIds) {
  const std::vector<int> ids{3, 1, 3, 3, 0, 1};
  expect_gradients_match(
      [&](const std::vector<Tensor>& in) {
        return embedding(in[0], ids, {2, 3});
      },
      {random_leaf({5, 4}, 11)});
}

TEST(EmbeddingTest, RejectsIdOutsideVocabulary) {
  const Tensor weight = Tensor::zeros({256, 2});
  const std::vector<int> ids{0, 1, 2, 3, 4, 300};
  EXPECT_THROW_WITH(embedding(weight, ids, {6}), std::invalid_argument,
                    "embedding: token id 300 at position 5 is outside the vocabulary [0, 256)");
  const std::vector<int> negative{-1};
  EXPECT_THROW_WITH(embedding(weight, negative, {1}), std::invalid_argument,
                    "token id -1 at position 0 is outside the vocabulary [0, 256)");
}

TEST(EmbeddingTest, RejectsWeightThatIsNotAMatrix) {
  const std::vector<int> ids{0};
  EXPECT_THROW_WITH(embedding(Tensor::zeros({4}), ids, {1}), std::invalid_argument,
                    "weight must be rank 2 [V, C] (got [4])");
  EXPECT_THROW_WITH(embedding(Tensor::zeros({2, 2, 2}), ids, {1}), std::invalid_argument, "(got [2, 2, 2])");
}

TEST(EmbeddingTest, RejectsIdsThatDoNotFillTheirShape) {
  const std::vector<int> ids{0, 1, 0, 1, 0};
  EXPECT_THROW_WITH(embedding(Tensor::zeros({2, 2}), ids, {2, 3}), std::invalid_argument,
                    "ids must fill ids_shape [2, 3] (6 ids) (got 5 ids)");
}

// ---------------------------------------------------------------------------
// layer_norm

TEST(LayerNormTest, MatchesDefinitionOnSmallExample) {
  const std::vector<double> x{1, 2, 3, 4, -1, 0.5, 2, 10};  // [2, 4]
  const std::vector<double> w{1, 2, 0.5, -1};
  const std::vector<double> b{0.1, 0, -0.2, 3};
  const double eps = 1e-5;
  const Tensor out = layer_norm(Tensor::from(x, {2, 4}), Tensor::from(w, {4}), Tensor::from(b, {4}), eps);
  ASSERT_EQ(out.shape(), (Shape{2, 4}));
  for (std::size_t n = 0; n < 2; ++n) {
    double mean = 0.0;
    for (std::size_t c = 0; c < 4; ++c) mean += x[n * 4 + c] / 4.0;
    double var = 0.0;
    for (std::size_t c = 0; c < 4; ++c) var += (x[n * 4 + c] - mean) * (x[n * 4 + c] - mean) / 4.0;
    for (std::size_t c = 0; c < 4; ++c) {
      const double expected = (x[n * 4 + c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
      EXPECT_NEAR(out.data()[n * 4 + c], expected, 1e-14) << "row " << n << " col " << c;
    }
  }
  // Row 0 by hand: mean 2.5, biased variance 1.25.
  EXPECT_NEAR(out.data()[0], -1.5 / std::sqrt(1.25 + eps) + 0.1, 1e-14);
}

TEST(LayerNormTest, NormalisedRowsHaveZeroMeanAndBiasedUnitVariance) {
  const Shape shape{3, 5};
  const Tensor x = random_leaf(shape, 7);
  const double eps = 1e-5;
  const Tensor out = layer_norm(x, Tensor::full({5}, 1.0), Tensor::zeros({5}), eps);
  for (std::size_t n = 0; n < 3; ++n) {
    double in_mean = 0.0, out_mean = 0.0;
    for (std::size_t c = 0; c < 5; ++c) {
      in_mean += x.data()[n * 5 + c] / 5.0;
      out_mean += out.data()[n * 5 + c] / 5.0;
    }
    double in_var = 0.0, out_var = 0.0;
    for (std::size_t c = 0; c < 5; ++c) {
      in_var += std::pow(x.data()[n * 5 + c] - in_mean, 2) / 5.0;
      out_var += std::pow(out.data()[n * 5 + c] - out_mean, 2) / 5.0;
    }
    EXPECT_NEAR(out_mean, 0.0, 1e-15) << "row " << n;
    EXPECT_NEAR(out_var, in_var / (in_var + eps), 1e-14) << "row " << n;
    EXPECT_LT(out_var, 1.0) << "row " << n;  // eps shrinks it, biased or not
  }
}

TEST(LayerNormTest, ConstantRowGivesBias) {
  // Zero variance: x̂ = 0 / √eps = 0, so only the bias is left.
  const Tensor out =
      layer_norm(Tensor::full({2, 3}, 4.0), Tensor::from({5, 6, 7}, {3}), Tensor::from({0.5, -1, 2}, {3}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{0.5, -1, 2, 0.5, -1, 2}));
}

TEST(LayerNormTest, GradientsMatchNumeric) {
  const std::vector<Shape> shapes{{1}, {5}, {3, 1}, {1, 4}, {2, 3}, {2, 3, 4}, {2, 1, 6}};
  unsigned seed = 100;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(to_string(shape));
    const std::size_t C = shape.back();
    expect_gradients_match([](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); },
                           {random_leaf(shape, seed), random_leaf({C}, seed + 1), random_leaf({C}, seed + 2)});
    seed += 3;
  }
}

TEST(LayerNormTest, GradientsMatchNumericWithConstantAffine) {
  const Tensor weight = Tensor::from({0.5, -2, 1.5}, {3});
  const Tensor bias = Tensor::from({1, 0, -1}, {3});
  expect_gradients_match([&](const std::vector<Tensor>& in) { return layer_norm(in[0], weight, bias); },
                         {random_leaf({4, 3}, 31)});
  EXPECT_TRUE(weight.grad().empty());
  EXPECT_TRUE(bias.grad().empty());
}

TEST(LayerNormTest, RejectsMismatchedWeightAndBias) {
  const Tensor x = Tensor::zeros({2, 4});
  EXPECT_THROW_WITH(layer_norm(x, Tensor::zeros({3}), Tensor::zeros({4})), std::invalid_argument,
                    "layer_norm: weight must be [4] for x [2, 4] (got [3])");
  EXPECT_THROW_WITH(layer_norm(x, Tensor::zeros({4}), Tensor::zeros({1, 4})), std::invalid_argument,
                    "layer_norm: bias must be [4] for x [2, 4] (got [1, 4])");
}

TEST(LayerNormTest, RejectsScalarAndUndefinedInputs) {
  EXPECT_THROW_WITH(layer_norm(Tensor::scalar(1.0), Tensor::zeros({1}), Tensor::zeros({1})), std::invalid_argument,
                    "x must have a last dim [..., C] (got [])");
  EXPECT_THROW_WITH(layer_norm(Tensor::zeros({2}), Tensor::zeros({2}), Tensor()), std::invalid_argument,
                    "must all be defined (got defined, defined, undefined)");
}

// ---------------------------------------------------------------------------
// gelu

TEST(GeluTest, MatchesKnownValues) {
  const Tensor out = gelu(Tensor::from({0.0, 1.0, -1.0}, {3}));
  EXPECT_EQ(out.data()[0], 0.0);
  EXPECT_NEAR(out.data()[1], 0.8411919906082768, 1e-15);
  EXPECT_NEAR(out.data()[2], -0.15880800939172324, 1e-15);
}

TEST(GeluTest, DifferenceWithMirrorIsIdentity) {
  // tanh is odd, so ½x(1 + tanh u) − ½(−x)(1 − tanh u) = x.
  const std::vector<double> xs{0.1, 0.5, 1.0, 2.5, 7.0};
  std::vector<double> mirrored;
  for (double x : xs) mirrored.push_back(-x);
  const Tensor pos = gelu(Tensor::from(xs, {xs.size()}));
  const Tensor neg = gelu(Tensor::from(mirrored, {xs.size()}));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(pos.data()[i] - neg.data()[i], xs[i], 1e-15 * xs[i]) << "x " << xs[i];
  }
}

TEST(GeluTest, NegativeTailKeepsItsDigits) {
  // References to 50 digits from the definition. Written as ½x(1 + tanh u),
  // gelu(−5) keeps only 9 digits and gelu(−10) rounds to 0.
  const Tensor out = gelu(Tensor::from({-5.0, -10.0}, {2}));
  EXPECT_NEAR(out.data()[0] / -2.2917961966295060455927553285469050268482164598529e-7, 1.0, 1e-13);
  EXPECT_NEAR(out.data()[1] / -1.2040923482098059936592504400305093421513240902888e-37, 1.0, 1e-13);
}

TEST(GeluTest, SaturatesWithoutOverflow) {
  // exp(−2u) overflows to inf below x ≈ −20; y and its slope must still be 0.
  const Tensor x = Tensor::from({-40.0, 40.0}, {2}, true);
  const Tensor out = gelu(x);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{0.0, 40.0}));
  out.backward(Tensor::from({1, 1}, {2}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{0.0, 1.0}));
}

TEST(GeluTest, SlopeAtZeroIsHalf) {
  const Tensor x = Tensor::from({0.0}, {1}, true);
  gelu(x).backward(Tensor::from({1.0}, {1}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{0.5}));
}

TEST(GeluTest, GradientsMatchNumeric) {
  const std::vector<Shape> shapes{{1}, {7}, {1, 1}, {2, 3}, {2, 1, 4}, {3, 2, 2}};
  unsigned seed = 200;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(to_string(shape));
    expect_gradients_match([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {random_leaf(shape, seed++)});
  }
  // Out in the tails too, where tanh saturates.
  expect_gradients_match([](const std::vector<Tensor>& in) { return gelu(in[0]); },
                         {Tensor::from({-6, -3, -0.7, 0.3, 2.2, 4.5}, {6}, true)});
}

// ---------------------------------------------------------------------------
// cross_entropy

TEST(CrossEntropyTest, AllEqualLogitsGiveLogV) {
  for (std::size_t V : {1u, 2u, 3u, 256u}) {
    SCOPED_TRACE(::testing::Message() << "V " << V);
    const std::vector<int> targets = spread_ids(4, V);
    const Tensor loss = cross_entropy(Tensor::full({4, V}, 7.5), targets);
    EXPECT_EQ(loss.shape(), Shape{});
    EXPECT_NEAR(loss.item(), std::log(static_cast<double>(V)), 1e-15);
  }
}

TEST(CrossEntropyTest, HandExampleWithThreeClasses) {
  // Row 0: logits (1, 2, 3), target 2: log(e + e² + e³) − 3 = log(1 + e⁻¹ + e⁻²).
  // Row 1: logits (0, 0, 0), target 0: log 3. The loss is their mean.
  const Tensor logits = Tensor::from({1, 2, 3, 0, 0, 0}, {2, 3}, true);
  const std::vector<int> targets{2, 0};
  const Tensor loss = cross_entropy(logits, targets);
  EXPECT_EQ(loss.shape(), Shape{});
  EXPECT_NEAR(loss.item(), (0.40760596444438013 + 1.0986122886681098) / 2.0, 1e-15);

  // (softmax − onehot) / N, softmax(1, 2, 3) = (0.0900…, 0.2447…, 0.6652…).
  loss.backward();
  const std::vector<double> expected{0.09003057317038046 / 2,
                                     0.24472847105479767 / 2,
                                     (0.6652409557748219 - 1) / 2,
                                     (1.0 / 3 - 1) / 2,
                                     1.0 / 6,
                                     1.0 / 6};
  const std::vector<double> grad = grad_of(logits);
  ASSERT_EQ(grad.size(), expected.size());
  for (std::size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(grad[i], expected[i], 1e-15) << "element " << i;
}

TEST(CrossEntropyTest, HugeLogitsStayFiniteAndExact) {
  const std::vector<int> target0{0};
  const std::vector<int> target1{1};
  // exp(x) would overflow at 1e4; after subtracting the max it is exp(0) = 1.
  EXPECT_EQ(cross_entropy(Tensor::from({1e4, 0, -1e4}, {3}), target0).item(), 0.0);
  EXPECT_EQ(cross_entropy(Tensor::from({1e4, 0, -1e4}, {3}), target1).item(), 1e4);
  EXPECT_NEAR(cross_entropy(Tensor::from({-1e4, -1e4}, {2}), target0).item(), std::log(2.0), 1e-15);
  // A small loss on top of huge logits keeps all its digits: 1 + log(1 + 2/e).
  EXPECT_NEAR(cross_entropy(Tensor::from({1e4, 1e4 + 1, 1e4}, {3}), target0).item(),
              1.0 + std::log1p(2.0 * std::exp(-1.0)), 1e-15);

  const Tensor logits = Tensor::from({1e4, 0, -1e4}, {3}, true);
  cross_entropy(logits, target1).backward();
  EXPECT_EQ(grad_of(logits), (std::vector<double>{1, -1, 0}));
}

TEST(CrossEntropyTest, GradientsMatchNumeric) {
  const std::vector<Shape> shapes{{1}, {5}, {3, 1}, {1, 4}, {4, 7}, {2, 3, 4}, {2, 1, 3}};
  unsigned seed = 300;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(to_string(shape));
    const std::size_t V = shape.back();
    const std::vector<int> targets = spread_ids(numel_of(shape) / V, V);
    expect_gradients_match([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); },
                           {random_leaf(shape, seed++)});
  }
}

TEST(CrossEntropyTest, RejectsTargetCountThatIsNotTheRowCount) {
  const std::vector<int> targets{0, 1, 2, 3, 0};
  EXPECT_THROW_WITH(cross_entropy(Tensor::zeros({2, 3, 4}), targets), std::invalid_argument,
                    "targets must have one per row of logits [2, 3, 4] (6 rows) (got 5)");
}

TEST(CrossEntropyTest, RejectsTargetOutsideVocabulary) {
  const std::vector<int> targets{0, 3, 7};
  EXPECT_THROW_WITH(cross_entropy(Tensor::zeros({3, 4}), targets), std::invalid_argument,
                    "cross_entropy: target 7 in row 2 is outside the vocabulary [0, 4)");
  const std::vector<int> negative{-2};
  EXPECT_THROW_WITH(cross_entropy(Tensor::zeros({4}), negative), std::invalid_argument,
                    "target -2 in row 0 is outside the vocabulary [0, 4)");
}

TEST(CrossEntropyTest, RejectsLogitsWithoutRowsOrClasses) {
  const std::vector<int> one{0};
  EXPECT_THROW_WITH(cross_entropy(Tensor::scalar(1.0), one), std::invalid_argument,
                    "logits must have a last dim [..., V] (got [])");
  EXPECT_THROW_WITH(cross_entropy(Tensor::zeros({1, 0}), one), std::invalid_argument,
                    "vocabulary size V must be positive (got logits [1, 0])");
  EXPECT_THROW_WITH(cross_entropy(Tensor::zeros({0, 3}), {}), std::invalid_argument,
                    "logits must have at least one row (got [0, 3])");
}

}  // namespace
}  // namespace tinyllm
