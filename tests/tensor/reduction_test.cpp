// sum and mean over every element: exact values (the lanes and the tail of
// the summation included), gradient checks, the method forms, and mean's
// refusal of zero elements.
#include <gtest/gtest.h>
#include <tinyllm/tensor/ops.h>

#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm {
namespace {

using testing::expect_gradients_match;
using testing::random_leaf;

const std::vector<Shape> kShapes = {{}, {1}, {3}, {7}, {2, 1, 3}, {3, 4, 5}, {1, 1}};

using testing::grad_of;

// 1, 2, ..., n as a tensor of shape [n].
Tensor counting(std::size_t n, bool requires_grad = false) {
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<double>(i + 1);
  return Tensor::from(values, {n}, requires_grad);
}

TEST(SumTest, AddsEveryElementIntoAScalar) {
  const Tensor out = sum(Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(out.shape(), Shape{});
  EXPECT_EQ(out.item(), 21.0);
  // Lengths around the four-lane blocking: n(n+1)/2 is exact in float64.
  for (std::size_t n : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 1001u}) {
    EXPECT_EQ(sum(counting(n)).item(), static_cast<double>(n * (n + 1) / 2)) << "n = " << n;
  }
}

TEST(SumTest, OfNoElementsIsZero) {
  const Tensor out = sum(Tensor::zeros({0, 3}));
  EXPECT_EQ(out.shape(), Shape{});
  EXPECT_EQ(out.item(), 0.0);
}

TEST(SumTest, BackwardBroadcastsTheSeed) {
  Tensor x = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}, true);
  sum(x).backward(Tensor::scalar(2.5));
  EXPECT_EQ(grad_of(x), (std::vector<double>(6, 2.5)));
}

TEST(SumTest, GradientsMatchNumeric) {
  unsigned seed = 1;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(to_string(shape));
    expect_gradients_match([](const std::vector<Tensor>& in) { return sum(in[0]); }, {random_leaf(shape, seed++)});
  }
}

TEST(SumTest, MethodFormCallsTheOp) {
  Tensor x = counting(4, true);
  const Tensor out = x.sum();
  EXPECT_EQ(out.item(), 10.0);
  out.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{1, 1, 1, 1}));
}

TEST(MeanTest, DividesTheSumByTheCount) {
  const Tensor out = mean(Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(out.shape(), Shape{});
  EXPECT_EQ(out.item(), 3.5);
  EXPECT_EQ(mean(Tensor::scalar(-4.0)).item(), -4.0);
}

TEST(MeanTest, BackwardSpreadsTheSeedEvenly) {
  Tensor x = counting(4, true);
  mean(x).backward(Tensor::scalar(2.0));
  EXPECT_EQ(grad_of(x), (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
}

TEST(MeanTest, GradientsMatchNumeric) {
  unsigned seed = 50;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(to_string(shape));
    expect_gradients_match([](const std::vector<Tensor>& in) { return mean(in[0]); }, {random_leaf(shape, seed++)});
  }
}

TEST(MeanTest, MethodFormCallsTheOp) {
  Tensor x = counting(4, true);
  const Tensor out = x.mean();
  EXPECT_EQ(out.item(), 2.5);
  out.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
}

TEST(MeanTest, RejectsNoElements) {
  EXPECT_THROW_WITH(mean(Tensor::zeros({0, 3})), std::invalid_argument,
                    "mean: input must have at least one element (got shape [0, 3])");
}

}  // namespace
}  // namespace tinyllm
