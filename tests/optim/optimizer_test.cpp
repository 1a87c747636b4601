// What every optimizer shares, through a minimal subclass and through SGD:
// the parameter checks, zero_grad, StateDict::bytes and the grad length check.
#include <gtest/gtest.h>
#include <tinyllm/optim/optimizer.h>
#include <tinyllm/optim/sgd.h>
#include <tinyllm/tensor/autograd.h>

#include <cmath>
#include <stdexcept>

#include "support/expect_throw.h"

namespace tinyllm::optim {
namespace {

// Keeps no state; counts its steps.
class CountingOptimizer : public Optimizer {
 public:
  using Optimizer::Optimizer;
  void step() override { ++steps; }
  StateDict state_dict() const override { return {}; }
  void load_state_dict(const StateDict&) override {}
  double lr() const override { return lr_; }
  std::string describe() const override { return "CountingOptimizer()"; }
  int steps = 0;

 private:
  void apply_lr(double lr) override { lr_ = lr; }
  double lr_ = 0;
};

TEST(OptimizerTest, RejectsAnEmptyParameterList) {
  EXPECT_THROW_WITH(CountingOptimizer(std::vector<Tensor>{}), std::invalid_argument,
                    "Optimizer: parameter list must not be empty (got 0 tensors)");
}

TEST(OptimizerTest, RejectsAnUndefinedTensor) {
  Tensor w = Tensor::zeros({2}, true);
  EXPECT_THROW_WITH(CountingOptimizer({w, Tensor()}), std::invalid_argument, "Optimizer: parameter 1 must be defined");
}

TEST(OptimizerTest, RejectsANonLeaf) {
  // A non-leaf made through the engine itself, so this test needs no op.
  Tensor w = Tensor::zeros({2, 2}, true);
  Tensor y = Tensor::zeros({2, 2});
  autograd::record(y, {w}, [](const Tensor&) {});
  EXPECT_THROW_WITH(CountingOptimizer({w, y}), std::invalid_argument,
                    "Optimizer: parameter 1 must be a leaf (got a tensor of shape [2, 2] with a grad_fn)");
}

TEST(OptimizerTest, RejectsATensorListedTwice) {
  Tensor a = Tensor::zeros({2}, true);
  Tensor b = Tensor::zeros({2}, true);
  EXPECT_THROW_WITH(CountingOptimizer({a, b, a}), std::invalid_argument,
                    "parameter 2 must appear once (got the same tensor as parameter 0)");
}

TEST(OptimizerTest, ParametersKeepTheirOrderAndShareArrays) {
  Tensor a = Tensor::zeros({2}, true);
  Tensor b = Tensor::zeros({3}, true);
  CountingOptimizer opt({b, a});
  ASSERT_EQ(opt.parameters().size(), 2u);
  EXPECT_TRUE(opt.parameters()[0].same(b));
  EXPECT_TRUE(opt.parameters()[1].same(a));
}

TEST(OptimizerTest, ZeroGradDropsEveryGrad) {
  Tensor a = Tensor::from({1, 2}, {2}, true);
  Tensor b = Tensor::from({3}, {1}, true);
  a.mutable_grad()[0] = 1;
  b.mutable_grad()[0] = 1;
  ASSERT_FALSE(a.grad().empty());
  ASSERT_FALSE(b.grad().empty());
  CountingOptimizer opt({a, b});
  opt.zero_grad();
  EXPECT_TRUE(a.grad().empty());
  EXPECT_TRUE(b.grad().empty());
  // The values stay; only the grads go.
  EXPECT_EQ(a.to_vector(), (std::vector<double>{1, 2}));
}

TEST(OptimizerTest, StateDictBytesCountsEveryTensorElement) {
  StateDict state;
  EXPECT_EQ(state.bytes(), 0u);
  state.tensors.emplace_back("0.exp_avg", Tensor::zeros({2, 3}));
  state.tensors.emplace_back("1.exp_avg", Tensor::zeros({5}));
  state.scalars.emplace_back("0.step", 7.0);  // scalars are not arrays and are not counted
  EXPECT_EQ(state.bytes(), 8u * 11u);
}

// set_lr checks for every optimizer alike, and a refused lr leaves the old one.
TEST(OptimizerTest, SetLrRejectsANegativeOrNonFiniteLr) {
  Tensor w = Tensor::zeros({2}, true);
  CountingOptimizer opt({w});
  opt.set_lr(0.125);
  EXPECT_EQ(opt.lr(), 0.125);
  EXPECT_THROW_WITH(opt.set_lr(-1), std::invalid_argument, "Optimizer: lr must be finite and >= 0 (got -1)");
  EXPECT_THROW_WITH(opt.set_lr(std::nan("")), std::invalid_argument, "(got nan)");
  EXPECT_THROW_WITH(opt.set_lr(HUGE_VAL), std::invalid_argument, "(got inf)");
  EXPECT_EQ(opt.lr(), 0.125);
  opt.set_lr(0);
  EXPECT_EQ(opt.lr(), 0.0);
}

TEST(OptimizerTest, GradOfTheWrongLengthIsABug) {
  // Only a broken caller can give a grad another length; it must not run off the end.
  Tensor w = Tensor::zeros({4}, true);
  w.impl().grad = Storage(3);
  SGD sgd({w}, {.lr = 0.1});
  EXPECT_THROW_WITH(sgd.step(), std::logic_error, "SGD: parameter 0 has 4 elements but its grad has 3");
}

}  // namespace
}  // namespace tinyllm::optim
