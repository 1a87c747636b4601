// Tensor hooks: a leaf's post-accumulate-grad hook sees its final grad once
// per backward; a non-leaf's hook sees its whole grad before it flows on.
#include <gtest/gtest.h>
#include <tinyllm/tensor/autograd.h>
#include <tinyllm/tensor/ops.h>

#include <string>
#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm {
namespace {

using testing::grad_of;

TEST(TensorHookTest, PostAccumulateGradHookSeesTheFinalGradOnce) {
  // x is used three times: the hook must run after the last use has added its share.
  Tensor x = Tensor::from({1, 2}, {2}, true);
  std::vector<std::vector<double>> seen;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) { seen.push_back(grad_of(t)); });
  Tensor y = (x * x + x * 3.0) * x;  // y = x³ + 3x², dy/dx = 3x² + 6x
  y.sum().backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{9, 24}));
}

TEST(TensorHookTest, HooksRunInOrderOfLastUse) {
  // b is last used before a in backward (a feeds the final product), so b's grad is final first.
  Tensor a = Tensor::from({1}, {1}, true);
  Tensor b = Tensor::from({2}, {1}, true);
  std::vector<std::string> log;
  a.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("a"); });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("b"); });
  Tensor h = b * 3.0;
  Tensor out = (h * h) * a;
  out.sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"a", "b"}));
}

TEST(TensorHookTest, FiresOncePerBackwardWithAccumulation) {
  Tensor x = Tensor::from({1, 1}, {2}, true);
  std::vector<std::vector<double>> seen;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) { seen.push_back(grad_of(t)); });
  (x * 2.0).sum().backward();
  (x * 5.0).sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<double>{2, 2}));
  EXPECT_EQ(seen[1], (std::vector<double>{7, 7}));
}

TEST(TensorHookTest, RemovedHookNoLongerRuns) {
  Tensor x = Tensor::from({1}, {1}, true);
  int calls = 0;
  RemovableHandle handle = x.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  (x * 2.0).sum().backward();
  handle.remove();
  handle.remove();  // twice is a no-op
  (x * 2.0).sum().backward();
  EXPECT_EQ(calls, 1);
}

TEST(TensorHookTest, NoGradForwardFiresNothing) {
  Tensor x = Tensor::from({1}, {1}, true);
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  {
    autograd::NoGradGuard guard;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_EQ(calls, 0);
}

TEST(TensorHookTest, NonLeafHookRunsBeforeTheGradFlowsToTheInputs) {
  Tensor x = Tensor::from({1, 2}, {2}, true);
  Tensor h = x * 3.0;
  std::vector<std::string> log;
  h.register_hook([&](const Tensor& t) {
    EXPECT_EQ(grad_of(t), (std::vector<double>{4, 4}));  // d(sum(h·4))/dh, complete
    EXPECT_TRUE(x.grad().empty());                       // not yet passed on
    log.push_back("h");
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("x"); });
  ((h * 2.0) + (h * 2.0)).sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"h", "x"}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{12, 12}));
}

TEST(TensorHookTest, LeafRootFiresItsHook) {
  Tensor x = Tensor::from({1, 2}, {2}, true);
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  x.backward(Tensor::from({1, 1}, {2}));
  EXPECT_EQ(calls, 1);
}

TEST(TensorHookTest, HookMayRemoveItself) {
  Tensor x = Tensor::from({1}, {1}, true);
  int calls = 0;
  RemovableHandle handle;
  handle = x.register_post_accumulate_grad_hook([&](const Tensor&) {
    ++calls;
    handle.remove();
  });
  (x * 2.0).sum().backward();
  (x * 2.0).sum().backward();
  EXPECT_EQ(calls, 1);
}

TEST(TensorHookTest, RejectsTheWrongKindOfTensor) {
  Tensor leaf = Tensor::from({1}, {1}, true);
  Tensor constant = Tensor::from({1}, {1});
  Tensor inner = leaf * 2.0;
  EXPECT_THROW_WITH(inner.register_post_accumulate_grad_hook([](const Tensor&) {}), std::invalid_argument,
                    "only a leaf that requires grad");
  EXPECT_THROW_WITH(constant.register_post_accumulate_grad_hook([](const Tensor&) {}), std::invalid_argument,
                    "only a leaf that requires grad");
  EXPECT_THROW_WITH(leaf.register_hook([](const Tensor&) {}), std::invalid_argument, "this tensor is a leaf");
  EXPECT_THROW_WITH(leaf.register_post_accumulate_grad_hook(nullptr), std::invalid_argument,
                    "the hook must not be empty");
}

}  // namespace
}  // namespace tinyllm
