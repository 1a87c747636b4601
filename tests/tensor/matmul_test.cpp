// matmul and linear: forward values against hand-computed products and a
// plain triple loop written here, gradients against central differences, and
// the errors a user reads for every bad shape.
#include <gtest/gtest.h>
#include <tinyllm/tensor/ops.h>

#include <cstddef>
#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm {
namespace {

using testing::expect_gradients_match;
using testing::random_leaf;

// c [M, N] = a [M, K] · b [K, N] (or · bᵀ with b [N, K]), spelled out,
// sharing nothing with the library.
std::vector<double> naive_matmul(const double* a, const double* b, std::size_t M, std::size_t K, std::size_t N,
                                 bool transpose_b = false) {
  std::vector<double> c(M * N, 0.0);
  for (std::size_t i = 0; i < M; ++i) {
    for (std::size_t j = 0; j < N; ++j) {
      double total = 0.0;
      for (std::size_t k = 0; k < K; ++k) total += a[i * K + k] * (transpose_b ? b[j * K + k] : b[k * N + j]);
      c[i * N + j] = total;
    }
  }
  return c;
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double tol = 1e-12) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

// ---- matmul ----

TEST(MatmulTest, ProducesHandComputedValues) {
  Tensor a = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(c.to_vector(), (std::vector<double>{58, 64, 139, 154}));
  EXPECT_EQ(a.matmul(b).to_vector(), c.to_vector());
}

TEST(MatmulTest, MatchesNaiveProductIn2D) {
  Tensor a = random_leaf({7, 5}, 1);
  Tensor b = random_leaf({5, 9}, 2);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{7, 9}));
  expect_close(c.to_vector(), naive_matmul(a.data().data(), b.data().data(), 7, 5, 9));
}

TEST(MatmulTest, SharedRightOperandAppliesToEveryRow) {
  Tensor a = random_leaf({2, 3, 4, 5}, 3);
  Tensor b = random_leaf({5, 6}, 4);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, 4, 6}));
  expect_close(c.to_vector(), naive_matmul(a.data().data(), b.data().data(), 2 * 3 * 4, 5, 6));
}

TEST(MatmulTest, BatchedMatchesPerBatchProducts) {
  const std::size_t M = 3, K = 4, N = 2;
  Tensor a = random_leaf({2, 3, M, K}, 5);
  Tensor b = random_leaf({2, 3, K, N}, 6);
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3, M, N}));
  std::vector<double> expected;
  for (std::size_t i = 0; i < 6; ++i) {
    std::vector<double> ci = naive_matmul(a.data().data() + i * M * K, b.data().data() + i * K * N, M, K, N);
    expected.insert(expected.end(), ci.begin(), ci.end());
  }
  expect_close(c.to_vector(), expected);
}

TEST(MatmulTest, EmptyInnerDimGivesZeros) {
  Tensor a = Tensor::zeros({3, 0});
  Tensor b = Tensor::zeros({0, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(c.to_vector(), std::vector<double>(6, 0.0));
}

TEST(MatmulTest, GradientsMatchFiniteDifferences) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 5}},              // 2-D
      {{1, 4}, {4, 3}},              // M = 1
      {{3, 1}, {1, 4}},              // K = 1
      {{3, 4}, {4, 1}},              // N = 1
      {{1, 1}, {1, 1}},              // everything 1
      {{2, 3, 4}, {4, 5}},           // 3-D a, shared b
      {{2, 1, 3, 2}, {2, 4}},        // 4-D a with a size-1 dim, shared b
      {{2, 3, 4}, {2, 4, 5}},        // 3-D batched
      {{2, 2, 3, 4}, {2, 2, 4, 2}},  // 4-D batched
      {{1, 3, 1, 2}, {1, 3, 2, 1}},  // batched with size-1 dims
  };
  unsigned seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.a) + " x " + to_string(c.b));
    expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                           {random_leaf(c.a, seed), random_leaf(c.b, seed + 1)});
    seed += 2;
  }
}

TEST(MatmulTest, OnlyInputsRequiringGradGetGradients) {
  Tensor a = random_leaf({2, 3, 4}, 30);
  Tensor b = random_leaf({4, 5}, 31).clone();  // a constant
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
  EXPECT_TRUE(b.grad().empty());
  Tensor c = random_leaf({2, 4, 5}, 32).clone();
  expect_gradients_match([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, c});
  EXPECT_TRUE(c.grad().empty());
}

TEST(MatmulTest, BackwardAddsToExistingGrad) {
  Tensor a = Tensor::from({1, 2}, {1, 2}, true);
  Tensor b = Tensor::from({3, 4}, {2, 1}, true);
  matmul(a, b).backward();
  matmul(a, b).backward();
  EXPECT_EQ(std::vector<double>(a.grad().begin(), a.grad().end()), (std::vector<double>{6, 8}));
  EXPECT_EQ(std::vector<double>(b.grad().begin(), b.grad().end()), (std::vector<double>{2, 4}));

  // Batched: a second backward doubles every grad.
  Tensor p = random_leaf({2, 3, 4}, 33);
  Tensor q = random_leaf({2, 4, 5}, 34);
  const Tensor seed = random_leaf({2, 3, 5}, 35).clone();
  matmul(p, q).backward(seed);
  const std::vector<double> dp(p.grad().begin(), p.grad().end());
  const std::vector<double> dq(q.grad().begin(), q.grad().end());
  matmul(p, q).backward(seed);
  for (std::size_t i = 0; i < dp.size(); ++i) EXPECT_NEAR(p.grad()[i], 2 * dp[i], 1e-12) << "dp " << i;
  for (std::size_t i = 0; i < dq.size(); ++i) EXPECT_NEAR(q.grad()[i], 2 * dq[i], 1e-12) << "dq " << i;
}

TEST(MatmulTest, RejectsOneDimensionalOperands) {
  EXPECT_THROW_WITH(matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})), std::invalid_argument,
                    "matmul: both operands must have rank >= 2 (got a [3] and b [3, 2])");
  EXPECT_THROW_WITH(matmul(Tensor::zeros({2, 3}), Tensor::zeros({3})), std::invalid_argument,
                    "(got a [2, 3] and b [3])");
}

TEST(MatmulTest, RejectsMismatchedInnerDims) {
  EXPECT_THROW_WITH(matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})), std::invalid_argument,
                    "matmul: inner dims differ: a [2, 3] and b [4, 5]");
  EXPECT_THROW_WITH(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({2, 4, 5})), std::invalid_argument,
                    "inner dims differ: a [2, 2, 3] and b [2, 4, 5]");
}

TEST(MatmulTest, RejectsMismatchedBatchDims) {
  EXPECT_THROW_WITH(matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})), std::invalid_argument,
                    "matmul: batch dims must be equal (got a [2, 3, 4] and b [3, 4, 5])");
  EXPECT_THROW_WITH(matmul(Tensor::zeros({3, 4}), Tensor::zeros({2, 4, 5})), std::invalid_argument,
                    "(got a [3, 4] and b [2, 4, 5])");
  EXPECT_THROW_WITH(matmul(Tensor::zeros({2, 2, 3, 4}), Tensor::zeros({2, 4, 5})), std::invalid_argument,
                    "(got a [2, 2, 3, 4] and b [2, 4, 5])");
}

// ---- linear ----

TEST(LinearTest, ProducesHandComputedValues) {
  Tensor x = Tensor::from({1, 2, 3, 4}, {2, 2});
  Tensor w = Tensor::from({1, 0, 0, 1, 1, 1}, {3, 2});  // [out 3, in 2]
  Tensor b = Tensor::from({10, 20, 30}, {3});
  EXPECT_EQ(linear(x, w, b).to_vector(), (std::vector<double>{11, 22, 33, 13, 24, 37}));
  EXPECT_EQ(linear(x, w).to_vector(), (std::vector<double>{1, 2, 3, 3, 4, 7}));
}

TEST(LinearTest, MatchesNaiveProductWithAndWithoutBias) {
  // The GPT's default c_attn: x [16·64, 128] · [384, 128]ᵀ.
  Tensor x = random_leaf({16, 64, 128}, 40);
  Tensor w = random_leaf({384, 128}, 41);
  Tensor b = random_leaf({384}, 42);
  std::vector<double> expected = naive_matmul(x.data().data(), w.data().data(), 16 * 64, 128, 384, true);

  Tensor y = linear(x, w);
  EXPECT_EQ(y.shape(), (Shape{16, 64, 384}));
  expect_close(y.to_vector(), expected, 1e-11);

  for (std::size_t r = 0; r < 16 * 64; ++r)
    for (std::size_t j = 0; j < 384; ++j) expected[r * 384 + j] += b.data()[j];
  expect_close(linear(x, w, b).to_vector(), expected, 1e-11);
}

TEST(LinearTest, GradientsMatchFiniteDifferences) {
  struct Case {
    Shape x, w;
  };
  const std::vector<Case> cases = {
      {{4, 3}, {5, 3}},     // 2-D
      {{2, 3, 4}, {2, 4}},  // 3-D
      {{1, 3}, {1, 3}},     // one row, one output
      {{3, 1}, {2, 1}},     // in = 1
      {{3}, {2, 3}},        // a single vector
      {{2, 1, 5}, {3, 5}},  // size-1 middle dim
  };
  unsigned seed = 50;
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.x) + " x " + to_string(c.w));
    const Tensor x = random_leaf(c.x, seed);
    const Tensor w = random_leaf(c.w, seed + 1);
    const Tensor b = random_leaf({c.w[0]}, seed + 2);
    expect_gradients_match([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
    expect_gradients_match([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w});
    seed += 3;
  }
}

TEST(LinearTest, OnlyInputsRequiringGradGetGradients) {
  const Tensor x = random_leaf({3, 4}, 60).clone();  // constants
  const Tensor w = random_leaf({2, 4}, 61);
  const Tensor b = random_leaf({2}, 62).clone();
  expect_gradients_match([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
  EXPECT_TRUE(x.grad().empty());
  EXPECT_TRUE(b.grad().empty());
  EXPECT_FALSE(linear(x, w.clone(), b).requires_grad());
}

TEST(LinearTest, BackwardAddsToExistingGrad) {
  const std::vector<Tensor> in = {random_leaf({2, 3, 4}, 70), random_leaf({5, 4}, 71), random_leaf({5}, 72)};
  const Tensor seed = random_leaf({2, 3, 5}, 73).clone();
  linear(in[0], in[1], in[2]).backward(seed);
  std::vector<std::vector<double>> once;
  for (const Tensor& t : in) once.emplace_back(t.grad().begin(), t.grad().end());
  linear(in[0], in[1], in[2]).backward(seed);
  for (std::size_t which = 0; which < in.size(); ++which) {
    for (std::size_t i = 0; i < once[which].size(); ++i) {
      EXPECT_NEAR(in[which].grad()[i], 2 * once[which][i], 1e-12) << "input " << which << " element " << i;
    }
  }
}

TEST(LinearTest, RejectsMismatchedWidth) {
  EXPECT_THROW_WITH(linear(Tensor::zeros({2, 5}), Tensor::zeros({3, 4})), std::invalid_argument,
                    "linear: input width 5 does not match weight [3, 4] (input [2, 5])");
}

TEST(LinearTest, RejectsBadBias) {
  EXPECT_THROW_WITH(linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 4}), Tensor::zeros({4})), std::invalid_argument,
                    "linear: bias must be [3] for weight [3, 4] (got [4])");
  EXPECT_THROW_WITH(linear(Tensor::zeros({2, 4}), Tensor::zeros({3, 4}), Tensor::zeros({1, 3})), std::invalid_argument,
                    "(got [1, 3])");
}

TEST(LinearTest, RejectsWeightThatIsNotAMatrix) {
  EXPECT_THROW_WITH(linear(Tensor::zeros({2, 4}), Tensor::zeros({4})), std::invalid_argument,
                    "linear: weight must be 2-D [out, in] (got [4])");
  EXPECT_THROW_WITH(linear(Tensor::zeros({2, 4}), Tensor::zeros({1, 3, 4})), std::invalid_argument, "(got [1, 3, 4])");
}

TEST(LinearTest, RejectsScalarInput) {
  EXPECT_THROW_WITH(linear(Tensor::scalar(1.0), Tensor::zeros({1, 1})), std::invalid_argument,
                    "linear: input must have rank >= 1 (got [])");
}

}  // namespace
}  // namespace tinyllm
