#include "tinyllm/optim/clip_grad.h"

#include <gtest/gtest.h>

#include "support/expect_throw.h"

namespace tinyllm::optim {
namespace {

// Grads (3, 4) and (12): a total norm of 13, as if one vector.
std::vector<Tensor> grads_of_norm_13() {
  Tensor a = Tensor::zeros({2}, true), b = Tensor::zeros({1}, true), none = Tensor::zeros({3}, true);
  a.mutable_grad()[0] = 3;
  a.mutable_grad()[1] = 4;
  b.mutable_grad()[0] = 12;
  return {a, none, b};
}

TEST(ClipGradNormTest, ScalesEveryGradByPyTorchsCoefficient) {
  const std::vector<Tensor> params = grads_of_norm_13();
  EXPECT_EQ(clip_grad_norm(params, 6.5), 13.0);
  const double c = 6.5 / (13.0 + 1e-6);
  EXPECT_EQ(params[0].grad()[0], 3 * c);
  EXPECT_EQ(params[0].grad()[1], 4 * c);
  EXPECT_EQ(params[2].grad()[0], 12 * c);
  EXPECT_TRUE(params[1].grad().empty()) << "a parameter without grad stays without";
}

TEST(ClipGradNormTest, LeavesGradsBelowTheLimitAsTheyAre) {
  const std::vector<Tensor> params = grads_of_norm_13();
  EXPECT_EQ(clip_grad_norm(params, 13.5), 13.0);
  EXPECT_EQ(params[0].grad()[1], 4.0);
  EXPECT_EQ(clip_coefficient(13.0, 13.5), 1.0);
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);
}

TEST(ClipGradNormTest, RejectsALimitThatIsNotPositive) {
  const std::vector<Tensor> params = grads_of_norm_13();
  EXPECT_THROW_WITH(clip_grad_norm(params, 0), std::invalid_argument, "clip_grad_norm: max_norm must be > 0 (got 0)");
  EXPECT_THROW_WITH(clip_grad_norm(params, -1), std::invalid_argument, "(got -1)");
  EXPECT_EQ(params[2].grad()[0], 12.0) << "nothing scaled";
}

}  // namespace
}  // namespace tinyllm::optim
