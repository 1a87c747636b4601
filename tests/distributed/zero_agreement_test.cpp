// ZeroOptimizer's ranks must build one optimizer: each steps its own chunk
// with its own, so a learning rate or a class that differs on one rank
// would train the chunks by different rules. Refused on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/ddp.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/sgd.h"
#include "zero_testing.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;
using dist::ZeroOptimizer;

TEST(ZeroAgreementTest, RanksThatBuildDifferentOptimizersAreRefusedOnEveryRank) {
  run_ranks(Backend::Threads, 3, [](Comm& comm) {
    const bool odd = comm.rank() == 2;
    TinyNet net(7);
    EXPECT_THROW_WITH(ZeroOptimizer(optim::AdamW::factory({.lr = odd ? 2e-3 : 1e-3}), net.parameters(), comm, 2),
                      std::invalid_argument,
                      "ZeroOptimizer: ranks disagree on the optimizer: rank 2 builds AdamW(lr=0.002, betas=(0.9, "
                      "0.999), eps=1e-08, weight_decay=0.01), rank 0 AdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, "
                      "weight_decay=0.01)");
    const optim::OptimizerFactory other = odd ? optim::SGD::factory({.lr = 1e-3}) : optim::AdamW::factory({.lr = 1e-3});
    EXPECT_THROW_WITH(ZeroOptimizer(other, net.parameters(), comm, 1), std::invalid_argument,
                      "rank 2 builds SGD(lr=0.001, momentum=0, dampening=0, weight_decay=0, nesterov=false), rank 0 "
                      "AdamW(");
    // The last bit of a hyperparameter counts.
    const double eps = odd ? std::nextafter(1e-8, 1.0) : 1e-8;
    EXPECT_THROW_WITH(ZeroOptimizer(optim::AdamW::factory({.eps = eps}), net.parameters(), comm, 3),
                      std::invalid_argument, "eps=1.0000000000000002e-08, weight_decay=0.01), rank 0");
    ZeroOptimizer same(optim::AdamW::factory({.lr = 1e-3}), net.parameters(), comm, 2);  // agreeing ranks pass
  });
}

}  // namespace
}  // namespace tinyllm::testing

// Frozen parameters (requires_grad false): broadcast from rank 0, then
// never reduced, stepped or released, on every stage; ranks must freeze
// the same ones.
namespace tinyllm::testing {
namespace {

std::vector<double> values_of(const Tensor& t) { return t.to_vector(); }

TEST(FrozenParametersTest, StayRankZerosAndUntouchedUnderDdpAndEveryStage) {
  const std::vector<double> rank0_bias = values_of(TinyNet(7).fc1->bias);
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    run_ranks(Backend::Threads, 2, [&](Comm& comm) {
      auto net = std::make_shared<TinyNet>(7 + static_cast<std::uint64_t>(comm.rank()));
      net->fc1->bias.set_requires_grad(false);
      std::unique_ptr<dist::DDP> ddp;
      std::unique_ptr<ZeroOptimizer> zo;
      if (stage == 0) {
        ddp = std::make_unique<dist::DDP>(net, comm);
      } else {
        zo = std::make_unique<ZeroOptimizer>(optim::SGD::factory({.lr = 0.5, .weight_decay = 0.5}), net->parameters(),
                                             comm, stage);
        zo->gather();
      }
      EXPECT_EQ(values_of(net->fc1->bias), rank0_bias) << "broadcast from rank 0";
      tiny_loss(*net, 0, 0, 4).backward();
      if (ddp) ddp->sync_grads();
      if (zo) zo->step();
      EXPECT_EQ(values_of(net->fc1->bias), rank0_bias) << "readable and untouched after the step";
      EXPECT_TRUE(net->fc1->bias.grad().empty());
    });
  }
}

TEST(FrozenParametersTest, RanksThatFreezeOthersOrEverythingAreRefused) {
  run_ranks(Backend::Threads, 2, [](Comm& comm) {
    auto net = std::make_shared<TinyNet>(7);
    (comm.rank() == 1 ? net->fc2->bias : net->fc1->bias).set_requires_grad(false);
    EXPECT_THROW_WITH(dist::DDP(net, comm), std::invalid_argument,
                      "DDP: ranks disagree on which parameters are frozen (requires_grad false): rank 1 freezes 1 of "
                      "them, rank 0 1, not the same ones");
    for (const Tensor& p : net->parameters()) p.impl().requires_grad = false;
    EXPECT_THROW_WITH(ZeroOptimizer(optim::SGD::factory({.lr = 0.1}), net->parameters(), comm, 2),
                      std::invalid_argument,
                      "every parameter is frozen (requires_grad false): there is nothing to train");
  });
}

}  // namespace
}  // namespace tinyllm::testing
