// add, sub and mul: hand examples, every broadcasting layout (equal shapes,
// one shape a suffix of the other in both directions, scalars, and general
// stretching of a, b or both) against per-element indexing, gradient checks
// on all of them, the operator forms, and the error messages.
#include <gtest/gtest.h>
#include <tinyllm/tensor/autograd.h>
#include <tinyllm/tensor/ops.h>

#include <functional>
#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"
#include "support/indexing.h"

namespace tinyllm {
namespace {

using testing::expect_gradients_match;
using testing::random_leaf;

struct BroadcastCase {
  Shape a, b, out;
};

// Covers each path of the implementation: flat, outer blocks, and the index
// counter over more than one outer dim.
const std::vector<BroadcastCase> kBroadcastCases = {
    // equal shapes, size-1 dims included
    {{1}, {1}, {1}},
    {{5}, {5}, {5}},
    {{2, 1, 3}, {2, 1, 3}, {2, 1, 3}},
    // one shape a suffix of the other, each way round (x + bias, x + wpe)
    {{2, 3, 4}, {4}, {2, 3, 4}},
    {{4}, {2, 3, 4}, {2, 3, 4}},
    {{2, 3, 4}, {3, 4}, {2, 3, 4}},
    {{3, 4}, {2, 3, 4}, {2, 3, 4}},
    {{2, 3, 4}, {1, 4}, {2, 3, 4}},
    // scalars of shape [] and [1]
    {{}, {2, 3}, {2, 3}},
    {{2, 3}, {}, {2, 3}},
    {{}, {}, {}},
    {{1}, {2, 3}, {2, 3}},
    // general: b stretched, a stretched, both (the output larger than either)
    {{2, 3}, {2, 1}, {2, 3}},
    {{2, 1}, {2, 3}, {2, 3}},
    {{3, 1}, {1, 4}, {3, 4}},
    {{1, 4}, {3, 1}, {3, 4}},
    {{2, 1, 4}, {3, 1}, {2, 3, 4}},
    {{2, 3, 1, 4}, {3, 5, 1}, {2, 3, 5, 4}},
    {{2, 1, 3, 1}, {1, 4, 1, 2}, {2, 4, 3, 2}},
};

using BinaryOp = std::function<Tensor(const Tensor&, const Tensor&)>;

// The element of `t` that broadcasting reads for output index `index`:
// dims align from the end and a size-1 dim always reads its element 0.
double broadcast_at(const Tensor& t, const std::vector<std::size_t>& index) {
  const Shape& shape = t.shape();
  const std::size_t skip = index.size() - shape.size();
  std::size_t offset = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) offset = offset * shape[d] + (shape[d] == 1 ? 0 : index[skip + d]);
  return t.data()[offset];
}

using testing::unravel;

void expect_matches_indexing(const BinaryOp& op, const std::function<double(double, double)>& reference) {
  unsigned seed = 1;
  for (const BroadcastCase& c : kBroadcastCases) {
    const Tensor a = random_leaf(c.a, seed++);
    const Tensor b = random_leaf(c.b, seed++);
    const Tensor out = op(a, b);
    ASSERT_EQ(out.shape(), c.out) << to_string(c.a) << " with " << to_string(c.b);
    for (std::size_t i = 0; i < out.numel(); ++i) {
      const std::vector<std::size_t> index = unravel(i, c.out);
      EXPECT_EQ(out.data()[i], reference(broadcast_at(a, index), broadcast_at(b, index)))
          << to_string(c.a) << " with " << to_string(c.b) << " at element " << i;
    }
  }
}

void expect_gradients_on_every_case(const BinaryOp& op) {
  unsigned seed = 100;
  for (const BroadcastCase& c : kBroadcastCases) {
    SCOPED_TRACE(to_string(c.a) + " with " + to_string(c.b));
    expect_gradients_match([&](const std::vector<Tensor>& in) { return op(in[0], in[1]); },
                           {random_leaf(c.a, seed), random_leaf(c.b, seed + 1)});
    seed += 2;
  }
}

using testing::grad_of;

TEST(AddTest, AddsEqualShapesElementwise) {
  const Tensor a = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from({10, 20, 30, 40, 50, 60}, {2, 3});
  const Tensor out = add(a, b);
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{11, 22, 33, 44, 55, 66}));
}

TEST(AddTest, BroadcastsBiasOverRows) {
  const Tensor x = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor bias = Tensor::from({10, 20, 30}, {3});
  EXPECT_EQ(add(x, bias).to_vector(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(add(bias, x).to_vector(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
}

TEST(AddTest, BroadcastsColumnAgainstRow) {
  Tensor a = Tensor::from({1, 2, 3}, {3, 1}, true);
  Tensor b = Tensor::from({10, 20, 30, 40}, {1, 4}, true);
  const Tensor out = add(a, b);
  EXPECT_EQ(out.shape(), (Shape{3, 4}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43}));
  out.backward(Tensor::full({3, 4}, 1.0));
  EXPECT_EQ(grad_of(a), (std::vector<double>{4, 4, 4}));  // each a element feeds a row of 4
  EXPECT_EQ(grad_of(b), (std::vector<double>{3, 3, 3, 3}));
}

TEST(AddTest, SumsTheGradientOfAStretchedOperandInOrder) {
  Tensor x = Tensor::zeros({2, 3}, true);
  Tensor bias = Tensor::zeros({3}, true);
  add(x, bias).backward(Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(grad_of(bias), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(AddTest, MatchesPerElementIndexingOnEveryBroadcastCase) {
  expect_matches_indexing([](const Tensor& a, const Tensor& b) { return add(a, b); },
                          [](double x, double z) { return x + z; });
}

TEST(AddTest, GradientsMatchNumericOnEveryBroadcastCase) {
  expect_gradients_on_every_case([](const Tensor& a, const Tensor& b) { return add(a, b); });
}

TEST(AddTest, ZeroSizedDimsGiveAnEmptyResult) {
  EXPECT_EQ(add(Tensor::zeros({0, 3}), Tensor::zeros({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(add(Tensor::zeros({1}), Tensor::zeros({4, 0})).shape(), (Shape{4, 0}));
}

TEST(AddTest, RejectsShapesThatDoNotBroadcast) {
  EXPECT_THROW_WITH(add(Tensor::zeros({2, 3}), Tensor::zeros({4})), std::invalid_argument,
                    "add: shapes [2, 3] and [4] do not broadcast");
  EXPECT_THROW_WITH(add(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 1, 4})), std::invalid_argument,
                    "add: shapes [2, 3, 4] and [3, 1, 4] do not broadcast");
}

TEST(SubTest, SubtractsWithBroadcasting) {
  Tensor a = Tensor::from({1, 2, 3}, {3, 1}, true);
  Tensor b = Tensor::from({10, 20, 30, 40}, {1, 4}, true);
  const Tensor out = sub(a, b);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{-9, -19, -29, -39, -8, -18, -28, -38, -7, -17, -27, -37}));
  out.backward(Tensor::full({3, 4}, 1.0));
  EXPECT_EQ(grad_of(a), (std::vector<double>{4, 4, 4}));
  EXPECT_EQ(grad_of(b), (std::vector<double>{-3, -3, -3, -3}));
}

TEST(SubTest, MatchesPerElementIndexingOnEveryBroadcastCase) {
  expect_matches_indexing([](const Tensor& a, const Tensor& b) { return sub(a, b); },
                          [](double x, double z) { return x - z; });
}

TEST(SubTest, GradientsMatchNumericOnEveryBroadcastCase) {
  expect_gradients_on_every_case([](const Tensor& a, const Tensor& b) { return sub(a, b); });
}

TEST(SubTest, RejectsShapesThatDoNotBroadcast) {
  EXPECT_THROW_WITH(sub(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})), std::invalid_argument,
                    "sub: shapes [2, 3] and [3, 2] do not broadcast");
}

TEST(MulTest, MultipliesWithBroadcastingAndUsesTheSavedInputs) {
  Tensor a = Tensor::from({1, 2}, {2, 1}, true);
  Tensor b = Tensor::from({1, 2, 3}, {1, 3}, true);
  const Tensor out = mul(a, b);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{1, 2, 3, 2, 4, 6}));
  out.backward(Tensor::full({2, 3}, 1.0));
  EXPECT_EQ(grad_of(a), (std::vector<double>{6, 6}));  // Σ b over the row each a element fed
  EXPECT_EQ(grad_of(b), (std::vector<double>{3, 3, 3}));
}

TEST(MulTest, ScalarTensorOperandBroadcasts) {
  Tensor s = Tensor::scalar(2.0, true);
  Tensor x = Tensor::from({1, 2, 3, 4}, {2, 2}, true);
  const Tensor out = mul(s, x);
  EXPECT_EQ(out.shape(), (Shape{2, 2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{2, 4, 6, 8}));
  out.backward(Tensor::full({2, 2}, 1.0));
  EXPECT_EQ(grad_of(s), (std::vector<double>{10}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{2, 2, 2, 2}));
}

TEST(MulTest, MatchesPerElementIndexingOnEveryBroadcastCase) {
  expect_matches_indexing([](const Tensor& a, const Tensor& b) { return mul(a, b); },
                          [](double x, double z) { return x * z; });
}

TEST(MulTest, GradientsMatchNumericOnEveryBroadcastCase) {
  expect_gradients_on_every_case([](const Tensor& a, const Tensor& b) { return mul(a, b); });
}

TEST(MulTest, ByDoubleScalesValuesAndGradient) {
  Tensor x = Tensor::from({1, -2, 3}, {3}, true);
  const Tensor out = mul(x, 2.5);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{2.5, -5, 7.5}));
  out.backward(Tensor::from({1, 2, 3}, {3}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{2.5, 5, 7.5}));
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{4}, Shape{2, 1, 3}}) {
    SCOPED_TRACE(to_string(shape));
    expect_gradients_match([](const std::vector<Tensor>& in) { return mul(in[0], -1.5); }, {random_leaf(shape, 7)});
  }
}

TEST(MulTest, RejectsShapesThatDoNotBroadcast) {
  EXPECT_THROW_WITH(mul(Tensor::zeros({2, 3}), Tensor::zeros({2})), std::invalid_argument,
                    "mul: shapes [2, 3] and [2] do not broadcast");
}

TEST(ElementwiseTest, OperatorsCallTheOps) {
  const Tensor a = Tensor::from({1, 2, 3}, {3});
  const Tensor b = Tensor::from({4, 5, 6}, {3});
  EXPECT_EQ((a + b).to_vector(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ((a - b).to_vector(), (std::vector<double>{-3, -3, -3}));
  EXPECT_EQ((a * b).to_vector(), (std::vector<double>{4, 10, 18}));
  EXPECT_EQ((a * 2.0).to_vector(), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ((2.0 * a).to_vector(), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ((-a).to_vector(), (std::vector<double>{-1, -2, -3}));
}

TEST(ElementwiseTest, OperatorFormsHaveTheOpsGradients) {
  const Shape x_shape{2, 3};
  const Shape bias_shape{3};
  expect_gradients_match([](const std::vector<Tensor>& in) { return -((in[0] + in[1]) * (in[0] - in[1]) * 2.0) * 0.5; },
                         {random_leaf(x_shape, 11), random_leaf(bias_shape, 12)});
}

TEST(ElementwiseTest, TensorUsedTwiceGetsTheSummedGradient) {
  Tensor x = Tensor::from({1, -2, 3}, {3}, true);
  (x * x).backward(Tensor::full({3}, 1.0));
  EXPECT_EQ(grad_of(x), (std::vector<double>{2, -4, 6}));  // d(x²)/dx = 2x
  x.zero_grad();
  (x + x).backward(Tensor::full({3}, 1.0));
  EXPECT_EQ(grad_of(x), (std::vector<double>{2, 2, 2}));
  x.zero_grad();
  (x - x).backward(Tensor::full({3}, 1.0));
  EXPECT_EQ(grad_of(x), (std::vector<double>{0, 0, 0}));
  const Shape shape{2, 3};
  expect_gradients_match([](const std::vector<Tensor>& in) { return in[0] * in[0] + in[0]; }, {random_leaf(shape, 21)});
}

TEST(ElementwiseTest, OnlyInputsThatRequireGradGetAGradient) {
  Tensor x = Tensor::from({1, 2}, {2}, true);
  Tensor c = Tensor::from({3, 4}, {2});
  (x * c).backward(Tensor::full({2}, 1.0));
  EXPECT_EQ(grad_of(x), (std::vector<double>{3, 4}));
  EXPECT_TRUE(c.grad().empty());
  EXPECT_FALSE(add(c, c).requires_grad());
  autograd::NoGradGuard no_grad;
  EXPECT_FALSE(add(x, c).requires_grad());
}

}  // namespace
}  // namespace tinyllm
