// reshape, transpose and slice: exact values on small tensors, agreement with
// per-element indexing on larger ones, gradient checks (size-1 dims
// included), the method forms, and the error messages.
#include <gtest/gtest.h>
#include <tinyllm/tensor/ops.h>

#include <string>
#include <utility>
#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"
#include "support/indexing.h"

namespace tinyllm {
namespace {

using testing::expect_gradients_match;
using testing::random_leaf;

using testing::grad_of;

Tensor iota(const Shape& shape, bool requires_grad = false) {
  std::vector<double> values(numel_of(shape));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  return Tensor::from(values, shape, requires_grad);
}

using testing::unravel;

std::size_t ravel(const std::vector<std::size_t>& index, const Shape& shape) {
  std::size_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

TEST(ReshapeTest, KeepsRowMajorOrder) {
  const Tensor a = iota({2, 3});
  const Tensor out = reshape(a, {3, 1, 2});
  EXPECT_EQ(out.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(out.to_vector(), a.to_vector());
  EXPECT_EQ(reshape(Tensor::scalar(5.0), {1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(reshape(Tensor::from({5.0}, {1}), {}).shape(), Shape{});
}

TEST(ReshapeTest, ReturnsACopy) {
  const Tensor a = iota({2, 2});
  const Tensor out = reshape(a, {4});
  out.data()[0] = 100;
  EXPECT_EQ(a.data()[0], 0.0);
}

TEST(ReshapeTest, BackwardAddsTheGradientBack) {
  Tensor a = Tensor::zeros({2, 2}, true);
  reshape(a, {4}).backward(Tensor::from({1, 2, 3, 4}, {4}));
  EXPECT_EQ(grad_of(a), (std::vector<double>{1, 2, 3, 4}));
}

TEST(ReshapeTest, GradientsMatchNumeric) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3}, {3, 2}}, {{6}, {1, 6, 1}}, {{}, {1}}, {{1}, {}}, {{2, 3, 4}, {4, 6}}};
  unsigned seed = 1;
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(to_string(from) + " to " + to_string(to));
    expect_gradients_match([&to](const std::vector<Tensor>& in) { return reshape(in[0], to); },
                           {random_leaf(from, seed++)});
  }
}

TEST(ReshapeTest, MethodFormCallsTheOp) {
  const Tensor out = iota({2, 3}).reshape({6});
  EXPECT_EQ(out.shape(), Shape{6});
  EXPECT_EQ(out.to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST(ReshapeTest, RejectsADifferentElementCount) {
  EXPECT_THROW_WITH(reshape(iota({3, 4}), {2, 5}), std::invalid_argument,
                    "reshape: shape [2, 5] has 10 elements but the input [3, 4] has 12");
}

TEST(TransposeTest, SwapsTheLastTwoDims) {
  const Tensor out = transpose(iota({2, 3}), 0, 1);
  EXPECT_EQ(out.shape(), (Shape{3, 2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(TransposeTest, SwapsOuterDimsKeepingRowsWhole) {
  // [2, 3, 2] -> [3, 2, 2]: out[j][i] is the row in[i][j].
  const Tensor out = transpose(iota({2, 3, 2}), 0, 1);
  EXPECT_EQ(out.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11}));
}

TEST(TransposeTest, MatchesPerElementIndexing) {
  const Shape shape{2, 3, 4, 5};
  const Tensor a = iota(shape);
  for (const auto& [d0, d1] : std::vector<std::pair<int, int>>{{0, 1}, {0, 3}, {1, 2}, {1, 3}, {2, 3}, {3, 0}}) {
    const Tensor out = transpose(a, d0, d1);
    Shape out_shape = shape;
    std::swap(out_shape[static_cast<std::size_t>(d0)], out_shape[static_cast<std::size_t>(d1)]);
    ASSERT_EQ(out.shape(), out_shape);
    for (std::size_t i = 0; i < out.numel(); ++i) {
      std::vector<std::size_t> index = unravel(i, out_shape);
      std::swap(index[static_cast<std::size_t>(d0)], index[static_cast<std::size_t>(d1)]);
      ASSERT_EQ(out.data()[i], a.data()[ravel(index, shape)]) << "dims " << d0 << ", " << d1 << " element " << i;
    }
  }
}

TEST(TransposeTest, AcceptsNegativeDims) {
  const Tensor a = iota({2, 3, 4});
  EXPECT_EQ(transpose(a, -1, -3).to_vector(), transpose(a, 2, 0).to_vector());
  EXPECT_EQ(transpose(a, -2, 2).shape(), (Shape{2, 4, 3}));
}

TEST(TransposeTest, SameDimTwiceIsACopy) {
  Tensor a = iota({2, 3}, true);
  const Tensor out = transpose(a, 1, -1);
  EXPECT_EQ(out.to_vector(), a.to_vector());
  EXPECT_FALSE(out.same(a));
  out.backward(Tensor::full({2, 3}, 1.0));
  EXPECT_EQ(grad_of(a), (std::vector<double>(6, 1.0)));
}

TEST(TransposeTest, TwiceGivesBackTheInput) {
  const Tensor a = iota({2, 3, 4});
  EXPECT_EQ(transpose(transpose(a, 0, 2), 0, 2).to_vector(), a.to_vector());
}

TEST(TransposeTest, GradientsMatchNumeric) {
  struct Case {
    Shape shape;
    int dim0, dim1;
  };
  const std::vector<Case> cases = {{{2, 3}, 0, 1},     {{1, 4}, 0, 1},       {{3, 1, 2}, 0, 2},    {{2, 3, 4}, 1, 2},
                                   {{2, 3, 4}, -1, 0}, {{2, 1, 3, 2}, 1, 3}, {{2, 3, 2, 2}, 0, 2}, {{5}, 0, 0}};
  unsigned seed = 30;
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.shape) + " dims " + std::to_string(c.dim0) + ", " + std::to_string(c.dim1));
    expect_gradients_match([&c](const std::vector<Tensor>& in) { return transpose(in[0], c.dim0, c.dim1); },
                           {random_leaf(c.shape, seed++)});
  }
}

TEST(TransposeTest, MethodFormCallsTheOp) {
  EXPECT_EQ(iota({2, 3}).transpose(1, 0).to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(TransposeTest, RejectsDimsOutOfRange) {
  EXPECT_THROW_WITH(transpose(iota({2, 3}), 2, 0), std::invalid_argument,
                    "transpose: dim 2 is out of range for shape [2, 3] (must be in [-2, 2))");
  EXPECT_THROW_WITH(transpose(iota({2, 3}), 0, -3), std::invalid_argument,
                    "transpose: dim -3 is out of range for shape [2, 3]");
  EXPECT_THROW_WITH(transpose(Tensor::scalar(1.0), 0, 0), std::invalid_argument,
                    "transpose: dim 0 is out of range for shape []");
}

TEST(SliceTest, KeepsTheWindowOfOneDim) {
  const Tensor a = iota({3, 4});
  const Tensor cols = slice(a, 1, 1, 3);
  EXPECT_EQ(cols.shape(), (Shape{3, 2}));
  EXPECT_EQ(cols.to_vector(), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  const Tensor rows = slice(a, 0, 2, 3);
  EXPECT_EQ(rows.shape(), (Shape{1, 4}));
  EXPECT_EQ(rows.to_vector(), (std::vector<double>{8, 9, 10, 11}));
  // The middle dim of [2, 3, 2]: each outer block keeps its rows 1..2.
  EXPECT_EQ(slice(iota({2, 3, 2}), 1, 1, 3).to_vector(), (std::vector<double>{2, 3, 4, 5, 8, 9, 10, 11}));
}

TEST(SliceTest, AcceptsANegativeDim) {
  const Tensor a = iota({3, 4});
  EXPECT_EQ(slice(a, -1, 0, 1).to_vector(), (std::vector<double>{0, 4, 8}));
}

TEST(SliceTest, EmptyAndFullWindows) {
  const Tensor a = iota({3, 4});
  EXPECT_EQ(slice(a, 1, 2, 2).shape(), (Shape{3, 0}));
  EXPECT_EQ(slice(a, 0, 0, 3).to_vector(), a.to_vector());
}

TEST(SliceTest, BackwardAddsIntoTheWindowOnly) {
  Tensor a = Tensor::full({2, 3}, 0.0, true);
  slice(a, 1, 1, 3).backward(Tensor::from({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(grad_of(a), (std::vector<double>{0, 1, 2, 0, 3, 4}));
}

TEST(SliceTest, GradientsMatchNumeric) {
  struct Case {
    Shape shape;
    int dim;
    std::size_t start, end;
  };
  const std::vector<Case> cases = {{{5}, 0, 1, 4},       {{1}, 0, 0, 1},        {{3, 4}, 1, 1, 3},    {{3, 4}, 0, 2, 3},
                                   {{2, 3, 4}, 1, 0, 2}, {{2, 1, 4}, -1, 3, 4}, {{2, 3, 1}, -3, 1, 2}};
  unsigned seed = 60;
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.shape) + " dim " + std::to_string(c.dim));
    expect_gradients_match([&c](const std::vector<Tensor>& in) { return slice(in[0], c.dim, c.start, c.end); },
                           {random_leaf(c.shape, seed++)});
  }
}

TEST(SliceTest, MethodFormCallsTheOp) {
  EXPECT_EQ(iota({3, 4}).slice(1, 3, 4).to_vector(), (std::vector<double>{3, 7, 11}));
}

TEST(SliceTest, RejectsABadWindowOrDim) {
  const Tensor a = iota({4, 5});
  EXPECT_THROW_WITH(slice(a, 1, 3, 2), std::invalid_argument,
                    "slice: start 3 and end 2 must satisfy start <= end <= 5 (the size of dim 1 of shape [4, 5])");
  EXPECT_THROW_WITH(slice(a, 0, 1, 5), std::invalid_argument, "start 1 and end 5 must satisfy start <= end <= 4");
  EXPECT_THROW_WITH(slice(a, 2, 0, 1), std::invalid_argument,
                    "slice: dim 2 is out of range for shape [4, 5] (must be in [-2, 2))");
}

}  // namespace
}  // namespace tinyllm
