// Bitwise mode's refusals (docs/BITWISE.md): a gradient beyond the exact
// range never reaches the optimizer as NaN, and an add_leaf() with no
// backward before it never counts an empty leaf; every rank says so alike.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/ddp.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/optim/sgd.h"
#include "zero_testing.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;

const dist::BucketOptions kBitwise{.bitwise = true};

dist::ZeroOptions bitwise_zero() {
  dist::ZeroOptions options;
  options.buckets = kBitwise;
  return options;
}

// The tiny net's loss times `scale`: its gradients grow with it.
void scaled_backward(const TinyNet& net, double scale) { (tiny_loss(net, 0, 0, 4) * scale).backward(); }

TEST(BitwiseTest, AGradientBeyondTheExactRangeIsAnErrorOnEveryRank) {
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    run_ranks(Backend::Threads, 2, [&](Comm& comm) {
      auto net = std::make_shared<TinyNet>(7);
      // Only rank 1's gradient leaves the range: rank 0 must fail too.
      const double scale = comm.rank() == 1 ? 0x1p40 : 1.0;
      if (stage == 0) {
        dist::DDP ddp(net, comm, kBitwise);
        scaled_backward(*net, scale);
        ddp.add_leaf();
        EXPECT_THROW_WITH(ddp.sync_grads(), std::range_error, "the mean gradient is not finite");
        return;
      }
      dist::ZeroOptimizer zo(optim::SGD::factory({.lr = 0.1}), net->parameters(), comm, stage, bitwise_zero());
      zo.gather();
      scaled_backward(*net, scale);
      zo.add_leaf();
      EXPECT_THROW_WITH(zo.step(), std::range_error, "beyond bitwise mode's exact range, |g| < 2^20");
    });
  }
}

TEST(BitwiseTest, AddLeafWithNoBackwardSinceTheLastIsRefused) {
  run_ranks(Backend::Threads, 2, [&](Comm& comm) {
    auto net = std::make_shared<TinyNet>(7);
    dist::DDP ddp(net, comm, kBitwise);
    scaled_backward(*net, 1.0);
    ddp.add_leaf();
    EXPECT_THROW_WITH(ddp.add_leaf(), std::logic_error, "DDP::add_leaf: no backward since the last add_leaf()");
    ddp.sync_grads();  // the one leaf still counts once
    dist::ZeroOptimizer zo(optim::SGD::factory({.lr = 0.1}), net->parameters(), comm, 2, bitwise_zero());
    EXPECT_THROW_WITH(zo.add_leaf(), std::logic_error, "ZeroOptimizer::add_leaf: no backward");
  });
}

// A leaf added twice would have halved the mean: with one add_leaf() per
// backward it is the plain gradient.
TEST(BitwiseTest, OneLeafOneAddLeafGivesTheGradient) {
  TinyNet one(7);
  scaled_backward(one, 1.0);
  const std::vector<double> expected = flat_grads(one.parameters());
  run_ranks(Backend::Threads, 2, [&](Comm& comm) {
    auto net = std::make_shared<TinyNet>(7);
    dist::DDP ddp(net, comm, kBitwise);
    scaled_backward(*net, 1.0);
    ddp.add_leaf();
    ddp.sync_grads();
    expect_all_within(flat_grads(ddp.parameters()), expected, 1e-15, "mean of two equal leaves");
  });
}

}  // namespace
}  // namespace tinyllm::testing
