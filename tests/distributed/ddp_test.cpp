// DDP: the two tests of docs/ZERO.md under their names, on threads and processes,
// then what DDP itself promises: bit-identical averaged gradients, rank 0's
// weights from the constructor on, clear errors for disagreeing ranks.
#include "tinyllm/distributed/ddp.h"

#include <gtest/gtest.h>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/optim/sgd.h"
#include "zero_testing.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;
using dist::DDP;
using dist::NoSyncGuard;

optim::OptimizerFactory momentum_sgd() {
  return optim::SGD::factory({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
}

class DdpSeedTest : public ::testing::TestWithParam<Backend> {};

TEST_P(DdpSeedTest, DdpMatchesSingleProcess) {
  const TrainSetup setup{.mode = Mode::Ddp, .make_optimizer = momentum_sgd(), .steps = 5};
  const std::vector<double> expected = train_one_process(setup);
  // The full batch's gradient at the initial weights, for the first step.
  TinyNet one(setup.seed);
  tiny_loss(one, 0, 0, setup.rows).backward();
  const std::vector<double> full_grad = flat_grads(one.parameters());

  for (int p : {2, 4}) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    run_ranks(GetParam(), p, [&](Comm& comm) {
      auto net = std::make_shared<TinyNet>(setup.seed);
      DDP ddp(net, comm);
      const std::size_t rows = setup.rows / static_cast<std::size_t>(p);
      tiny_loss(*net, 0, rows * static_cast<std::size_t>(comm.rank()), rows).backward();
      ddp.sync_grads();
      const std::vector<double> grads = flat_grads(ddp.parameters());
      expect_all_within(grads, full_grad, 1e-12, "averaged gradient");
      expect_same_bits_on_every_rank(comm, grads, "averaged gradient");

      const std::vector<double> trained = train_ranks(comm, setup);
      expect_all_within(trained, expected, 1e-10, "parameters");
      expect_same_bits_on_every_rank(comm, trained, "parameters");
    });
  }
}

TEST_P(DdpSeedTest, DdpBroadcastsRank0Weights) {
  // Rank r builds its net from seed 7 + r; DDP must train rank 0's.
  const TrainSetup setup{.mode = Mode::Ddp, .make_optimizer = momentum_sgd(), .steps = 3, .seed_by_rank = true};
  const std::vector<double> expected = train_one_process(setup);
  const std::vector<double> rank0_init = flat_values(TinyNet(setup.seed).parameters());
  run_ranks(GetParam(), 4, [&](Comm& comm) {
    auto net = std::make_shared<TinyNet>(setup.seed + static_cast<std::uint64_t>(comm.rank()));
    if (comm.rank() != 0) {
      EXPECT_NE(flat_values(net->parameters()), rank0_init);
    }
    DDP ddp(net, comm);
    EXPECT_EQ(flat_values(net->parameters()), rank0_init) << "right after the constructor";

    const std::vector<double> trained = train_ranks(comm, setup);
    expect_all_within(trained, expected, 1e-10, "parameters");
    expect_same_bits_on_every_rank(comm, trained, "parameters");
  });
}

INSTANTIATE_TEST_SUITE_P(Threads, DdpSeedTest, ::testing::Values(Backend::Threads));
INSTANTIATE_TEST_SUITE_P(Procs, DdpSeedTest, ::testing::Values(Backend::Procs));

TEST(DdpTest, WrapsTheModelAsModule) {
  dist::run_threads(2, [](Comm& comm) {
    auto net = std::make_shared<TinyNet>(3);
    DDP ddp(net, comm);
    EXPECT_EQ(&ddp.module<TinyNet>(), net.get());
    const auto names = ddp.named_parameters();
    ASSERT_EQ(names.size(), 4u);
    EXPECT_EQ(names[0].first, "module.fc1.weight");
    EXPECT_TRUE(names[0].second.same(net->fc1->weight));
    Tensor x = Tensor::full({2, 5}, 0.5);
    EXPECT_EQ(ddp.forward<TinyNet>(x).to_vector(), net->forward(x).to_vector());
  });
}

// Each .grad is a view of its segment of one bucket, in parameter order, so
// backward adds straight into the bucket and sync_grads() reduces it in
// place. A grad from before DDP is copied in; when DDP goes, the grads
// become the parameters' own again, values unchanged.
TEST(DdpTest, GradsLiveInOneBucketAndOutliveIt) {
  dist::run_threads(2, [](Comm& comm) {
    auto net = std::make_shared<TinyNet>(1);
    const std::vector<Tensor> params = net->parameters();
    const std::size_t rows = 4 * static_cast<std::size_t>(comm.rank());
    tiny_loss(*net, 0, rows, 4).backward();
    std::vector<double> averaged;
    {
      DDP ddp(net, comm);
      ddp.sync_grads();
      for (std::size_t i = 1; i < params.size(); ++i) {
        EXPECT_EQ(params[i].grad().data(), params[i - 1].grad().data() + params[i - 1].numel()) << "parameter " << i;
      }
      const double* bucket = params[0].grad().data();
      for (const Tensor& p : params) p.zero_grad();
      tiny_loss(*net, 1, rows, 4).backward();
      EXPECT_EQ(params[0].grad().data(), bucket) << "backward writes into the bucket";
      ddp.sync_grads();
      averaged = flat_grads(params);
      expect_same_bits_on_every_rank(comm, averaged, "averaged gradient");
    }
    EXPECT_EQ(flat_grads(params), averaged);
    for (const Tensor& p : params) {
      EXPECT_FALSE(p.impl().grad.is_view());
      EXPECT_TRUE(p.impl().grad_home.empty());
    }
  });
}

TEST(DdpTest, RejectsANullModelAndAModelWithoutParameters) {
  dist::run_threads(2, [](Comm& comm) {
    EXPECT_THROW_WITH(DDP(nullptr, comm), std::invalid_argument, "DDP: model must not be null");
    EXPECT_THROW_WITH(DDP(std::make_shared<nn::Module>(), comm), std::invalid_argument,
                      "DDP: the parameter list must not be empty");
  });
}

// The odd rank is 1 here and 2 in ZeroOptimizerRanksTest: each rank is
// compared with rank 0, not with its neighbour.
TEST(DdpTest, RanksWithDifferentModelsFailOnEveryRank) {
  dist::run_threads(3, [](Comm& comm) {
    auto net = comm.rank() == 1 ? std::make_shared<TinyNet>(1, 5, 6, 4) : std::make_shared<TinyNet>(1);
    EXPECT_THROW_WITH(DDP(net, comm), std::invalid_argument,
                      "ranks disagree on the parameters: rank 1 has 4 tensors of 64 values, rank 0 has 4 of 44");
  });
}

// Stage 0 is DDP: a rank that wraps its model in DDP while another builds a
// ZeroOptimizer is refused before their collectives cross.
TEST(DdpTest, DdpOnOneRankAndZeroOnAnotherFailOnEveryRank) {
  dist::run_threads(2, [](Comm& comm) {
    auto net = std::make_shared<TinyNet>(1);
    const char* const expected = "ranks disagree on the stage: rank 1 runs ZeRO-1, rank 0 DDP";
    if (comm.rank() == 0) {
      EXPECT_THROW_WITH(DDP(net, comm), std::invalid_argument, expected);
    } else {
      EXPECT_THROW_WITH(dist::ZeroOptimizer(optim::SGD::factory({.lr = 0.1}), net->parameters(), comm, 1),
                        std::invalid_argument, expected);
    }
  });
}

TEST(DdpTest, SyncWithoutGradientsOnSomeRankNamesIt) {
  dist::run_threads(3, [](Comm& comm) {
    auto net = std::make_shared<TinyNet>(1);
    DDP ddp(net, comm);
    if (comm.rank() != 1) {
      NoSyncGuard quiet = ddp.no_sync();  // so that the check in sync_grads() is the first collective
      tiny_loss(*net, 0, 0, 4).backward();
    }
    EXPECT_THROW_WITH(ddp.sync_grads(), std::invalid_argument, "rank(s) 1 have no gradients");
  });
}

}  // namespace
}  // namespace tinyllm::testing
