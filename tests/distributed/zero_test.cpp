// The test catalog of docs/ZERO.md (section 2) under its names, on ranks that are
// threads and ranks that are processes, then ZeroOptimizer's own behaviour:
// what ranks must agree on, clipping, accumulation, stage 3's released
// parameters, chunks that are empty.
#include "tinyllm/distributed/zero.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/errors.h"
#include "tinyllm/distributed/procs_comm.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/sgd.h"
#include "zero_testing.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;
using dist::MemoryBytes;
using dist::NoSyncGuard;
using dist::ZeroOptimizer;

optim::OptimizerFactory adamw_with_decay() {
  return optim::AdamW::factory({.lr = 0.05, .betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.1});
}
optim::OptimizerFactory momentum_sgd() {
  return optim::SGD::factory({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
}

// ---- Section 3: w = [0, 1, ..., 9] on 4 ranks, rank r's loss Σ(w_i − r)²/2,
// AdamW with lr 0.5 and no decay. The averaged gradient is w − 1.5, and the
// first AdamW step moves each entry by 0.5·ḡ/(|ḡ| + eps).

Tensor hand_w() {
  std::vector<double> w(10);
  for (int i = 0; i < 10; ++i) w[static_cast<std::size_t>(i)] = i;
  return Tensor::from(w, {10}, /*requires_grad=*/true);
}

std::vector<double> hand_step_exact() {
  std::vector<double> w(10);
  for (int i = 0; i < 10; ++i) {
    const double g = i - 1.5;
    w[static_cast<std::size_t>(i)] = i - 0.5 * g / (std::abs(g) + 1e-8);
  }
  return w;
}

void hand_backward(const Tensor& w, int rank) {
  Tensor target = Tensor::full({10}, rank);
  (((w - target) * (w - target)).sum() * 0.5).backward();
}

ZeroOptimizer hand_optimizer(const Tensor& w, Comm& comm, int stage) {
  return ZeroOptimizer(optim::AdamW::factory({.lr = 0.5, .weight_decay = 0}), {w}, comm, stage);
}

class ZeroSeedTest : public ::testing::TestWithParam<Backend> {};

TEST_P(ZeroSeedTest, HandExampleZeroStep) {
  const std::vector<double> seed_table = {0.5, 1.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5};
  const std::vector<double> exact = hand_step_exact();
  const std::pair<std::size_t, std::size_t> chunks[] = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    run_ranks(GetParam(), 4, [&](Comm& comm) {
      Tensor w = hand_w();
      ZeroOptimizer zo = hand_optimizer(w, comm, stage);
      const auto [a, b] = chunks[comm.rank()];
      EXPECT_EQ(zo.chunk(), chunks[comm.rank()]);
      zo.gather();
      zo.zero_grad();
      hand_backward(w, comm.rank());
      zo.step();
      // This rank updated its own entries, and no others.
      expect_all_within(zo.master_chunk().to_vector(), {exact.begin() + a, exact.begin() + b}, 1e-14, "master chunk");
      if (stage == 3) {
        EXPECT_THROW_WITH(w.data(), std::invalid_argument, "released");
        zo.gather();
      }
      expect_all_within(w.to_vector(), exact, 1e-14, "w");
      expect_all_within(w.to_vector(), seed_table, 1e-7, "w against docs/ZERO.md's table");
      expect_same_bits_on_every_rank(comm, w.to_vector(), "w");
    });
  }
}

// A schedule reaches ZeRO through its inner optimizer: the hand example's
// lr 0.5, set on an inner AdamW made with lr 0.1, gives the hand example.
TEST(ZeroOptimizerTest, TheInnerOptimizersLrSetsTheStep) {
  const std::vector<double> exact = hand_step_exact();
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    run_ranks(Backend::Threads, 4, [&](Comm& comm) {
      Tensor w = hand_w();
      ZeroOptimizer zo(optim::AdamW::factory({.lr = 0.1, .weight_decay = 0}), {w}, comm, stage);
      zo.inner().set_lr(0.5);
      EXPECT_EQ(zo.inner().lr(), 0.5);
      zo.gather();
      zo.zero_grad();
      hand_backward(w, comm.rank());
      zo.step();
      zo.gather();
      expect_all_within(w.to_vector(), exact, 1e-14, "w");
    });
  }
}

TEST_P(ZeroSeedTest, HandExampleMemoryByStage) {
  // The table of docs/ZERO.md for ranks 0 and 3, in bytes, and the same rules for
  // ranks 1 and 2 (chunks of 3, 3, 2, 2 values).
  const MemoryBytes seed_table[4][2] = {
      {{80, 104, 72}, {80, 96, 48}},  // stage 1: rank 0, rank 3
      {{80, 24, 72}, {80, 16, 48}},   // stage 2
      {{24, 24, 48}, {16, 16, 32}},   // stage 3
  };
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    run_ranks(GetParam(), 4, [&](Comm& comm) {
      Tensor w = hand_w();
      ZeroOptimizer zo = hand_optimizer(w, comm, stage);
      zo.gather();
      zo.zero_grad();
      hand_backward(w, comm.rank());
      zo.step();
      const MemoryBytes m = zo.memory_bytes();
      const std::size_t c = 8 * (comm.rank() < 2 ? 3 : 2);
      const MemoryBytes rule = stage == 1   ? MemoryBytes{80, 80 + c, 3 * c}
                               : stage == 2 ? MemoryBytes{80, c, 3 * c}
                                            : MemoryBytes{c, c, 2 * c};
      EXPECT_EQ(m.params, rule.params);
      EXPECT_EQ(m.grads, rule.grads);
      EXPECT_EQ(m.optimizer, rule.optimizer);
      if (comm.rank() == 0 || comm.rank() == 3) {
        const MemoryBytes& row = seed_table[stage - 1][comm.rank() == 0 ? 0 : 1];
        EXPECT_EQ(m.params, row.params);
        EXPECT_EQ(m.grads, row.grads);
        EXPECT_EQ(m.optimizer, row.optimizer);
      }
    });
  }
  // One process: 80 bytes of parameters, 80 of gradients, 160 of moments.
  Tensor w = hand_w();
  optim::AdamW opt({w}, {.lr = 0.5, .weight_decay = 0});
  hand_backward(w, 0);
  opt.step();
  EXPECT_EQ(w.numel() * sizeof(double), 80u);
  EXPECT_EQ(w.grad().size() * sizeof(double), 80u);
  EXPECT_EQ(opt.state_dict().bytes(), 160u);
}

TEST_P(ZeroSeedTest, ZeroMatchesSingleProcess) {
  for (const auto& [name, factory] : {std::pair{"AdamW", adamw_with_decay()}, std::pair{"SGD", momentum_sgd()}}) {
    const TrainSetup one{.make_optimizer = factory, .steps = 4};
    const std::vector<double> expected = train_one_process(one);
    for (Mode mode : {Mode::Zero1, Mode::Zero2, Mode::Zero3}) {
      for (int p : {2, 4}) {
        SCOPED_TRACE(fmt::format("{} {} on {} ranks", name, mode_name(mode), p));
        TrainSetup setup = one;
        setup.mode = mode;
        run_ranks(GetParam(), p, [&](Comm& comm) {
          const std::vector<double> trained = train_ranks(comm, setup);
          expect_all_within(trained, expected, 1e-10, "parameters");
          expect_same_bits_on_every_rank(comm, trained, "parameters");
        });
      }
    }
  }
}

TEST_P(ZeroSeedTest, ZeroMemoryIsOneOverP) {
  // 44 parameters on 4 ranks: 11 values each, so every share is exact.
  ASSERT_EQ(TinyNet(1).num_parameters(), 44u);
  const std::size_t n = 44 * 8, share = n / 4;
  const MemoryBytes expected[3] = {{n, n + share, 3 * share}, {n, share, 3 * share}, {share, share, 2 * share}};
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    run_ranks(GetParam(), 4, [&](Comm& comm) {
      TinyNet net(1);
      ZeroOptimizer zo(adamw_with_decay(), net.parameters(), comm, stage);
      for (int step = 0; step < 2; ++step) {
        zo.gather();
        zo.zero_grad();
        tiny_loss(net, step, 6 * static_cast<std::size_t>(comm.rank()), 6).backward();
        zo.step();
      }
      const MemoryBytes m = zo.memory_bytes();
      const MemoryBytes& e = expected[stage - 1];
      EXPECT_EQ(m.params, e.params);
      EXPECT_EQ(m.grads, e.grads);
      EXPECT_EQ(m.optimizer, e.optimizer);
      // Stage 3 holds a quarter of one process's 4n bytes.
      if (stage == 3) {
        EXPECT_EQ(m.total() * 4, 4 * n);
      }
    });
  }
}

TEST_P(ZeroSeedTest, ZeroRejectsBadStage) {
  run_ranks(GetParam(), 2, [&](Comm& comm) {
    Tensor w = hand_w();
    for (int stage : {0, 4, -1}) {
      EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), {w}, comm, stage), std::invalid_argument,
                        "ZeroOptimizer: stage must be 1, 2 or 3 (got " + std::to_string(stage) + ")");
    }
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), {}, comm, 2), std::invalid_argument,
                      "ZeroOptimizer: the parameter list must not be empty (got 0 tensors)");
    // The group is still in step: a valid optimizer follows.
    ZeroOptimizer zo(adamw_with_decay(), {w}, comm, 2);
    EXPECT_EQ(zo.stage(), 2);
  });
}

// ---- Beyond the catalog.

class ZeroOptimizerRanksTest : public ::testing::TestWithParam<Backend> {};

TEST_P(ZeroOptimizerRanksTest, RanksThatDisagreeAreNamedOnEveryRank) {
  run_ranks(GetParam(), 3, [](Comm& comm) {
    const bool odd = comm.rank() == 2;
    // A different number of values.
    TinyNet wide(1, 5, odd ? 6 : 4, 4);
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), wide.parameters(), comm, 2), std::invalid_argument,
                      "ranks disagree on the parameters: rank 2 has 4 tensors of 64 values, rank 0 has 4 of 44");
    // The same values in another number of tensors.
    const std::vector<Tensor> split =
        odd ? std::vector<Tensor>{Tensor::zeros({3}), Tensor::zeros({3})} : std::vector<Tensor>{Tensor::zeros({6})};
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), split, comm, 2), std::invalid_argument,
                      "ranks disagree on the parameters: rank 2 has 2 tensors of 6 values, rank 0 has 1 of 6");
    // The same values, shaped otherwise: [3, 2] against [2, 3].
    Tensor w = Tensor::zeros(odd ? Shape{3, 2} : Shape{2, 3});
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), {w}, comm, 2), std::invalid_argument,
                      "rank 2's 1 tensors of 6 values are shaped unlike rank 0's");
    // Another stage.
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), {w}, comm, odd ? 3 : 1), std::invalid_argument,
                      "ranks disagree on the stage: rank 2 runs ZeRO-3, rank 0 ZeRO-1");
    // One rank with no parameters.
    std::vector<Tensor> params;
    if (!odd) params.push_back(w);
    EXPECT_THROW(ZeroOptimizer(adamw_with_decay(), params, comm, 1), std::invalid_argument);
  });
}

TEST_P(ZeroOptimizerRanksTest, StepWithoutGradientsNamesTheRank) {
  run_ranks(GetParam(), 3, [](Comm& comm) {
    TinyNet net(1);
    ZeroOptimizer zo(adamw_with_decay(), net.parameters(), comm, 2);
    // Inside no_sync() backward sends nothing, so the check at step() is the first collective.
    if (comm.rank() != 1) {
      NoSyncGuard quiet = zo.no_sync();
      tiny_loss(net, 0, 0, 4).backward();
    }
    EXPECT_THROW_WITH(zo.step(), std::invalid_argument,
                      "ZeroOptimizer::step: rank(s) 1 have no gradients (call backward() before reducing)");
    // No rank has any: every rank is named.
    zo.zero_grad();
    EXPECT_THROW_WITH(zo.step(), std::invalid_argument, "rank(s) 0, 1, 2 have no gradients");
  });
}

// Without no_sync(), the ranks that ran backward reduce its first bucket
// while the other checks for gradients: every rank names the mismatch.
TEST_P(ZeroOptimizerRanksTest, BackwardOnSomeRanksOnlyIsNamedAsAMismatch) {
  run_ranks(GetParam(), 3, [](Comm& comm) {
    TinyNet net(1);
    ZeroOptimizer zo(adamw_with_decay(), net.parameters(), comm, 2);
    const auto backward_and_step = [&] {
      if (comm.rank() != 1) tiny_loss(net, 0, 0, 4).backward();
      zo.step();
    };
    EXPECT_THROW_WITH(backward_and_step(), dist::CommError, "collective mismatch");
  });
}

TEST(ZeroOptimizerTest, RejectsUndefinedAndRepeatedParameters) {
  run_ranks(Backend::Threads, 2, [](Comm& comm) {
    Tensor w = hand_w();
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), {Tensor(), w}, comm, 1), std::invalid_argument,
                      "ZeroOptimizer: parameter 0 must be defined (got an undefined tensor)");
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), {w, Tensor()}, comm, 1), std::invalid_argument,
                      "parameter 1 must be defined");
    EXPECT_THROW_WITH(ZeroOptimizer(adamw_with_decay(), {w, hand_w(), w}, comm, 1), std::invalid_argument,
                      "ZeroOptimizer: parameter 2 must appear once (got the same tensor as parameter 0)");
  });
}

// A bad stage on one rank alone throws there before any collective; the
// others, already waiting in the agreement check, fail at once instead of
// hanging until the timeout.
TEST_P(ZeroOptimizerRanksTest, ABadStageOnOneRankStopsTheOthers) {
  const auto body = [](Comm& comm) {
    TinyNet net(1);
    ZeroOptimizer zo(adamw_with_decay(), net.parameters(), comm, comm.rank() == 1 ? 4 : 2);
  };
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW_WITH(GetParam() == Backend::Threads ? dist::run_threads(3, body) : dist::run_procs(3, body),
                    std::invalid_argument, "rank 1: ZeroOptimizer: stage must be 1, 2 or 3 (got 4)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

INSTANTIATE_TEST_SUITE_P(Threads, ZeroOptimizerRanksTest, ::testing::Values(Backend::Threads));
INSTANTIATE_TEST_SUITE_P(Procs, ZeroOptimizerRanksTest, ::testing::Values(Backend::Procs));

TEST(ZeroOptimizerTest, ForwardOnReleasedParametersAsksForGather) {
  run_ranks(Backend::Threads, 2, [](Comm& comm) {
    TinyNet net(1);
    ZeroOptimizer zo(adamw_with_decay(), net.parameters(), comm, 3);
    EXPECT_THROW_WITH(tiny_loss(net, 0, 0, 4), std::invalid_argument,
                      "tensor are released (a ZeRO stage-3 parameter between steps: call "
                      "ZeroOptimizer::gather() before using it)");
    const std::uint64_t calls = comm.total_traffic().calls;
    zo.gather();
    zo.gather();  // the second is a no-op
    EXPECT_EQ(comm.total_traffic().calls, calls + 1);
    EXPECT_NO_THROW(tiny_loss(net, 0, 0, 4));
  });
}

TEST(ZeroOptimizerTest, GatherIsANoOpBelowStage3) {
  run_ranks(Backend::Threads, 2, [](Comm& comm) {
    for (int stage : {1, 2}) {
      TinyNet net(1);
      ZeroOptimizer zo(adamw_with_decay(), net.parameters(), comm, stage);
      const std::uint64_t calls = comm.total_traffic().calls;
      zo.gather();
      EXPECT_EQ(comm.total_traffic().calls, calls);
    }
  });
}

// The parameters are views of one flat vector, in order, so the all_gather
// writes straight into them; the grads are views of another, so backward
// adds straight into it (stage 1 keeps it after the step). When the
// optimizer goes, they become the tensors' own again.
TEST(ZeroOptimizerTest, ParametersAreViewsOfOneVectorAndOutliveIt) {
  run_ranks(Backend::Threads, 2, [](Comm& comm) {
    for (int stage = 1; stage <= 3; ++stage) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      TinyNet net(1);
      const std::vector<Tensor> params = net.parameters();
      std::vector<double> values, grads;
      {
        ZeroOptimizer zo(adamw_with_decay(), params, comm, stage);
        zo.gather();
        zo.zero_grad();
        tiny_loss(net, 0, 12 * static_cast<std::size_t>(comm.rank()), 12).backward();
        const auto expect_views_of_one_vector = [&](auto span_of, const char* what) {
          for (std::size_t i = 1; i < params.size(); ++i) {
            EXPECT_EQ(span_of(params[i]).data(), span_of(params[i - 1]).data() + params[i - 1].numel())
                << what << " " << i;
          }
        };
        if (stage == 1) {
          expect_views_of_one_vector([](const Tensor& t) { return t.grad(); }, "grad after backward");
        } else {
          // Backward reduce-scattered every bucket into the chunk and dropped it.
          for (const Tensor& p : params) EXPECT_TRUE(p.grad().empty());
          EXPECT_EQ(zo.master_chunk().grad().size(), zo.master_chunk().numel());
        }
        zo.step();
        zo.gather();
        expect_views_of_one_vector([](const Tensor& t) { return t.data(); }, "parameter");
        if (stage == 1) {
          expect_views_of_one_vector([](const Tensor& t) { return t.grad(); }, "grad after the step");
        } else {
          EXPECT_TRUE(params[0].grad().empty()) << "stages 2 and 3 drop the full grads";
        }
        values = flat_values(params);
        grads = flat_grads(params);
      }
      EXPECT_EQ(flat_values(params), values);
      EXPECT_EQ(flat_grads(params), grads);
      for (const Tensor& p : params) {
        EXPECT_FALSE(p.impl().data.is_view());
        EXPECT_FALSE(p.impl().grad.is_view());
        EXPECT_TRUE(p.impl().grad_home.empty());
      }
    }
  });
}

// `zo = std::make_unique<ZeroOptimizer>(...)` builds the new optimizer
// before the old one goes: the old one must leave the new one's views
// alone. Plain SGD keeps no state, so the run still equals one process.
TEST(ZeroOptimizerTest, AReplacedOptimizerLeavesItsSuccessorsViewsAlone) {
  const auto sgd = optim::SGD::factory({.lr = 0.1});
  TinyNet one(4);
  auto opt = sgd(one.parameters());
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    tiny_loss(one, step, 0, 24).backward();
    opt->step();
  }
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    run_ranks(Backend::Threads, 2, [&](Comm& comm) {
      TinyNet net(4);
      auto zo = std::make_unique<ZeroOptimizer>(sgd, net.parameters(), comm, stage);
      for (int step = 0; step < 3; ++step) {
        if (step == 1) {
          zo->gather();  // a new optimizer reads the parameters, which stage 3 released
          zo = std::make_unique<ZeroOptimizer>(sgd, net.parameters(), comm, stage);
        }
        zo->gather();
        zo->zero_grad();
        tiny_loss(net, step, 12 * static_cast<std::size_t>(comm.rank()), 12).backward();
        zo->step();
      }
      zo->gather();
      expect_all_within(flat_values(net.parameters()), flat_values(one.parameters()), 1e-12, "parameters");
    });
  }
}

// The inner optimizer's state is one process's state for this rank's
// chunk: what a checkpoint writes at the chunk's offset.
TEST(ZeroOptimizerTest, OptimizerStateIsTheChunkOfOneProcess) {
  TinyNet one(2);
  auto opt = adamw_with_decay()(one.parameters());
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    tiny_loss(one, step, 0, 24).backward();
    opt->step();
  }
  std::vector<double> exp_avg, exp_avg_sq;
  for (const auto& [name, t] : opt->state_dict().tensors) {
    auto& into = name.ends_with(".exp_avg") ? exp_avg : exp_avg_sq;
    into.insert(into.end(), t.data().begin(), t.data().end());
  }
  for (int stage = 1; stage <= 3; ++stage) {
    run_ranks(Backend::Threads, 3, [&](Comm& comm) {
      TinyNet net(2);
      ZeroOptimizer zo(adamw_with_decay(), net.parameters(), comm, stage);
      for (int step = 0; step < 3; ++step) {
        zo.gather();
        zo.zero_grad();
        tiny_loss(net, step, 8 * static_cast<std::size_t>(comm.rank()), 8).backward();
        zo.step();
      }
      const auto [a, b] = zo.chunk();
      const optim::StateDict state = zo.inner().state_dict();
      ASSERT_EQ(state.tensors.size(), 2u);
      expect_all_within(state.tensors[0].second.to_vector(), {exp_avg.begin() + a, exp_avg.begin() + b}, 1e-12,
                        "exp_avg");
      expect_all_within(state.tensors[1].second.to_vector(), {exp_avg_sq.begin() + a, exp_avg_sq.begin() + b}, 1e-12,
                        "exp_avg_sq");
      EXPECT_EQ(state.scalars, (std::vector<std::pair<std::string, double>>{{"0.step", 3.0}}));
    });
  }
}

// n < p: the last ranks own nothing, hold no state, and still take part.
TEST(ZeroOptimizerTest, RanksWithEmptyChunksStillTrain) {
  const auto loss = [](const Tensor& w, int slice) {
    Tensor t = Tensor::full({3}, slice);
    return ((w - t) * (w - t)).sum() * 0.25;
  };
  Tensor one = Tensor::from({1.0, -2.0, 0.5}, {3}, true);
  auto opt = adamw_with_decay()({one});
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    Tensor total = loss(one, 0);
    for (int s = 1; s < 4; ++s) total = total + loss(one, s);
    total.backward();
    opt->step();
  }
  for (int stage = 1; stage <= 3; ++stage) {
    run_ranks(Backend::Threads, 4, [&](Comm& comm) {
      Tensor w = Tensor::from({1.0, -2.0, 0.5}, {3}, true);
      ZeroOptimizer zo(adamw_with_decay(), {w}, comm, stage);
      for (int step = 0; step < 3; ++step) {
        zo.gather();
        zo.zero_grad();
        (loss(w, comm.rank()) * 4.0).backward();
        zo.step();
      }
      zo.gather();
      expect_all_within(w.to_vector(), one.to_vector(), 1e-12, "w");
      if (comm.rank() == 3) {
        EXPECT_EQ(zo.chunk(), (std::pair<std::size_t, std::size_t>{3, 3}));
        EXPECT_EQ(zo.memory_bytes().optimizer, 0u);
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ZeroSeedTest, ::testing::Values(Backend::Threads));
INSTANTIATE_TEST_SUITE_P(Procs, ZeroSeedTest, ::testing::Values(Backend::Procs));

}  // namespace
}  // namespace tinyllm::testing
