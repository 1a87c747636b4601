// The engine alone, on ops defined here through autograd::record, so these
// tests hold whatever the op files do.
#include <gtest/gtest.h>
#include <tinyllm/tensor/autograd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "support/expect_throw.h"
#include "support/gradcheck.h"

namespace tinyllm {
namespace {

// y = a ⊙ b, recording which order the backward functions ran in.
Tensor times(const Tensor& a, const Tensor& b, std::vector<std::string>* log = nullptr, std::string name = "") {
  Tensor out = Tensor::empty(a.shape());
  for (std::size_t i = 0; i < a.numel(); ++i) out.data()[i] = a.data()[i] * b.data()[i];
  autograd::record(out, {a, b}, [a, b, log, name](const Tensor& y) {
    if (log) log->push_back(name);
    if (a.requires_grad())
      for (std::size_t i = 0; i < a.numel(); ++i) a.mutable_grad()[i] += y.grad()[i] * b.data()[i];
    if (b.requires_grad())
      for (std::size_t i = 0; i < b.numel(); ++i) b.mutable_grad()[i] += y.grad()[i] * a.data()[i];
  });
  return out;
}

using testing::grad_of;

TEST(AutogradTest, ProductRuleOnADiamond) {
  // x feeds two paths that meet again: z = (x·x)·(x·c), dz/dx = 3·x²·c.
  Tensor x = Tensor::from({2, -1}, {2}, true);
  Tensor c = Tensor::from({3, 5}, {2});
  Tensor z = times(times(x, x), times(x, c));
  z.backward(Tensor::from({1, 1}, {2}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{36, 15}));
  EXPECT_TRUE(c.grad().empty());
}

TEST(AutogradTest, BackwardAccumulatesAcrossCalls) {
  Tensor x = Tensor::from({1, 2}, {2}, true);
  Tensor k = Tensor::from({3, 4}, {2});
  times(x, k).backward(Tensor::from({1, 1}, {2}));
  times(x, k).backward(Tensor::from({1, 1}, {2}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{6, 8}));
}

// A write to an input after its op ran (a NumPy view taken under no_grad
// bumps the version) makes backward refuse before any grad moves, as
// torch's version counter does; one to the output too.
TEST(AutogradTest, BackwardRefusesInputsChangedAfterTheForward) {
  Tensor x = Tensor::from({1, 2}, {2}, true);
  Tensor k = Tensor::from({3, 4}, {2});
  Tensor y = times(times(x, x), k);
  ++k.impl().version;
  EXPECT_THROW_WITH(y.backward(Tensor::from({1, 1}, {2})), std::invalid_argument,
                    "input 1 of an op, a [2] tensor, was modified in place after the forward (it is at "
                    "version 1, the op saw version 0)");
  EXPECT_TRUE(x.grad().empty()) << "no gradient may move before the check";

  Tensor z = times(x, x);
  ++z.impl().version;
  EXPECT_THROW_WITH(z.backward(Tensor::from({1, 1}, {2})), std::invalid_argument, "an op's output");
  Tensor fresh = times(x, k);  // a forward after the write sees the new version
  fresh.backward(Tensor::from({1, 1}, {2}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{3, 4}));
}

// Backwards on several threads into one shared leaf lose no contribution.
TEST(AutogradTest, ConcurrentBackwardsIntoASharedLeafAddUp) {
  constexpr int kThreads = 4, kRounds = 200;
  const std::size_t n = 4096;
  Tensor w = Tensor::full({n}, 1.0, true);
  Tensor c = Tensor::full({n}, 1.0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) times(w, c).backward(Tensor::full({n}, 1.0));
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<double> g = grad_of(w);
  EXPECT_EQ(std::count(g.begin(), g.end(), double{kThreads * kRounds}), static_cast<std::ptrdiff_t>(n));
}

TEST(AutogradTest, ConsumersRunBeforeProducersInInputOrder) {
  std::vector<std::string> log;
  Tensor x = Tensor::from({1}, {1}, true);
  Tensor a = times(x, x, &log, "a");
  Tensor b = times(a, x, &log, "b");
  Tensor c = times(a, b, &log, "c");
  c.backward(Tensor::from({1}, {1}));
  EXPECT_EQ(log, (std::vector<std::string>{"c", "b", "a"}));
}

TEST(AutogradTest, BackwardFreesTheGraph) {
  Tensor x = Tensor::from({1, 2}, {2}, true);
  Tensor y = times(x, x);
  Tensor z = times(y, x);
  z.backward(Tensor::from({1, 1}, {2}));
  EXPECT_TRUE(y.grad().empty());
  EXPECT_TRUE(y.grad_fn()->inputs.empty());
  EXPECT_FALSE(static_cast<bool>(y.grad_fn()->backward));
  EXPECT_THROW_WITH(z.backward(Tensor::from({1, 1}, {2})), std::invalid_argument, "already freed");
}

TEST(AutogradTest, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::from({1, 2}, {2}, true);
  {
    autograd::NoGradGuard guard;
    EXPECT_FALSE(autograd::is_grad_enabled());
    Tensor y = times(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  EXPECT_TRUE(autograd::is_grad_enabled());
  EXPECT_TRUE(times(x, x).requires_grad());
}

TEST(AutogradTest, ConstantsProduceLeaves) {
  Tensor a = Tensor::from({1}, {1});
  Tensor y = times(a, a);
  EXPECT_TRUE(y.is_leaf());
  EXPECT_FALSE(autograd::needs_grad(a, Tensor()));
  EXPECT_TRUE(autograd::needs_grad(a, Tensor::zeros({1}, true)));
}

TEST(AutogradTest, UndefinedInputsTakeNoPartInTheGraph) {
  Tensor x = Tensor::from({2}, {1}, true);
  Tensor y = Tensor::empty({1});
  y.data()[0] = 3 * x.data()[0];
  autograd::record(y, {x, Tensor()}, [x](const Tensor& out) { x.mutable_grad()[0] += 3 * out.grad()[0]; });
  ASSERT_EQ(y.grad_fn()->inputs.size(), 1u);
  y.backward();
  EXPECT_EQ(grad_of(x), (std::vector<double>{3}));
}

TEST(AutogradTest, DeepChainsDoNotOverflowTheStack) {
  Tensor x = Tensor::from({1.0}, {1}, true);
  Tensor one = Tensor::from({1.0}, {1});
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = times(y, one);
  y.backward(Tensor::from({1}, {1}));
  EXPECT_EQ(grad_of(x), (std::vector<double>{1.0}));
}

TEST(AutogradTest, DroppingADeepGraphDoesNotOverflowTheStack) {
  Tensor x = Tensor::from({1.0}, {1}, true);
  Tensor one = Tensor::from({1.0}, {1});
  Tensor y = x;
  for (int i = 0; i < 1000000; ++i) y = times(y, one);
  y = Tensor();
  EXPECT_EQ(x.use_count(), 1);
}

}  // namespace
}  // namespace tinyllm
