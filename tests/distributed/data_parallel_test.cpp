// What users of DDP, FSDP and DeepSpeed rely on, for DDP and every ZeRO
// stage, each equal to one process to 1e-10 with the same bits on every
// rank: gradient accumulation that sends nothing until the step, global-norm
// clipping across shards, and parameters that get no gradient.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/clip_grad.h"
#include "tinyllm/optim/sgd.h"
#include "zero_testing.h"

namespace tinyllm::testing {
namespace {

using dist::Collective;
using dist::Comm;
using dist::NoSyncGuard;

struct ModeCase {
  Backend backend;
  Mode mode;
};

class DataParallelTest : public ::testing::TestWithParam<ModeCase> {};

std::string case_name(const ::testing::TestParamInfo<ModeCase>& info) {
  return fmt::format("{}{}", info.param.backend == Backend::Threads ? "Threads" : "Procs", mode_name(info.param.mode));
}

optim::OptimizerFactory adamw_with_decay() {
  return optim::AdamW::factory({.lr = 0.05, .betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.1});
}

void expect_matches_one_process(const ModeCase& c, TrainSetup setup, std::initializer_list<int> worlds) {
  setup.mode = c.mode;
  const std::vector<double> expected = train_one_process(setup);
  for (int p : worlds) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    run_ranks(c.backend, p, [&](Comm& comm) {
      const std::vector<double> trained = train_ranks(comm, setup);
      expect_all_within(trained, expected, 1e-10, "parameters");
      expect_same_bits_on_every_rank(comm, trained, "parameters");
    });
  }
}

TEST_P(DataParallelTest, AccumulatedMicroBatchesMatchOneProcess) {
  expect_matches_one_process(GetParam(), {.make_optimizer = adamw_with_decay(), .steps = 3, .accum = 2}, {1, 2, 3, 4});
}

TEST_P(DataParallelTest, ClippedStepsMatchOneProcess) {
  // A limit well below the gradient's norm, so every step clips.
  expect_matches_one_process(GetParam(), {.make_optimizer = adamw_with_decay(), .steps = 3, .clip = 0.05},
                             {1, 2, 3, 4});
  expect_matches_one_process(
      GetParam(),
      {.make_optimizer = optim::SGD::factory({.lr = 0.1, .momentum = 0.9}), .steps = 3, .accum = 2, .clip = 0.05},
      {2, 4});
}

// One step on rank slices: the returned norm and the clipped gradient, set
// against clip_grad_norm on one process.
TEST_P(DataParallelTest, ClipReturnsTheGlobalNormOnEveryRank) {
  const auto [backend, mode] = GetParam();
  TinyNet one(5);
  tiny_loss(one, 0, 0, 24).backward();
  const double expected_norm = optim::clip_grad_norm(one.parameters(), 0.05);
  ASSERT_GT(expected_norm, 0.05);
  run_ranks(backend, 4, [&](Comm& comm) {
    auto net = std::make_shared<TinyNet>(5);
    const std::size_t first = 6 * static_cast<std::size_t>(comm.rank());
    double norm = 0;
    if (mode == Mode::Ddp) {
      dist::DDP ddp(net, comm);
      tiny_loss(*net, 0, first, 6).backward();
      ddp.sync_grads();
      norm = optim::clip_grad_norm(ddp.parameters(), 0.05);
    } else {
      dist::ZeroOptimizer zo(adamw_with_decay(), net->parameters(), comm, static_cast<int>(mode));
      zo.gather();
      tiny_loss(*net, 0, first, 6).backward();
      norm = zo.clip_grad_norm(0.05);
      // After clipping, the chunk's gradient has its share of a norm of 0.05.
      double squares = 0;
      for (double g : zo.master_chunk().grad()) squares += g * g;
      comm.all_reduce({&squares, 1}, dist::ReduceOp::Sum);
      EXPECT_NEAR(std::sqrt(squares), 0.05, 1e-6);
    }
    EXPECT_NEAR(norm, expected_norm, 1e-12);
    expect_same_bits_on_every_rank(comm, {norm}, "norm");
  });
}

// Buckets are reduced during backward, unless inside no_sync(): then the
// gradients add up locally and the last micro-batch's backward reduces
// them, bucket by bucket, so sync_grads() or step() sends only its checks.
TEST_P(DataParallelTest, NoSyncSendsNothingAndTheLastBackwardReduces) {
  const auto [backend, mode] = GetParam();
  run_ranks(backend, 2, [&](Comm& comm) {
    auto net = std::make_shared<TinyNet>(5);
    std::unique_ptr<dist::DDP> ddp;
    std::unique_ptr<dist::ZeroOptimizer> zo;
    // Four tensors in buckets of one each: the reductions are counted one by one.
    const dist::BucketOptions one_each{.bucket_bytes = 8, .first_bucket_bytes = 8};
    if (mode == Mode::Ddp) {
      ddp = std::make_unique<dist::DDP>(net, comm, one_each);
    } else {
      zo = std::make_unique<dist::ZeroOptimizer>(adamw_with_decay(), net->parameters(), comm, static_cast<int>(mode),
                                                 dist::ZeroOptions{.buckets = one_each, .units = {}, .prefetch = 1});
      zo->gather();
    }
    const auto quiet = [&] { return ddp ? ddp->no_sync() : zo->no_sync(); };
    const Collective reduction =
        mode == Mode::Ddp || mode == Mode::Zero1 ? Collective::AllReduce : Collective::ReduceScatter;
    const std::uint64_t calls = comm.total_traffic().calls;
    for (int m = 0; m < 2; ++m) {
      NoSyncGuard guard = quiet();
      tiny_loss(*net, 0, 4 * static_cast<std::size_t>(m), 4).backward();
    }
    EXPECT_EQ(comm.total_traffic().calls, calls) << "a backward inside no_sync() communicated";
    tiny_loss(*net, 0, 8, 4).backward();
    EXPECT_EQ(comm.traffic(reduction).calls, 4u) << "the last backward reduces each bucket once";
    if (ddp) {
      ddp->sync_grads();
    } else {
      zo->step();
    }
    EXPECT_EQ(comm.traffic(reduction).calls, 4u) << "nothing is left to reduce after backward";
  });
}

// Outside no_sync() every backward reduces its own buckets as they fill,
// the second micro-batch's too: stage 2 never holds a whole gradient, and
// the step equals one with the first micro-batch accumulated locally.
TEST_P(DataParallelTest, EveryBackwardOutsideNoSyncReducesItsBuckets) {
  const auto [backend, mode] = GetParam();
  const Collective reduction =
      mode == Mode::Ddp || mode == Mode::Zero1 ? Collective::AllReduce : Collective::ReduceScatter;
  run_ranks(backend, 2, [&](Comm& comm) {
    const dist::BucketOptions one_each{.bucket_bytes = 8, .first_bucket_bytes = 8};
    const auto train_step = [&](bool first_in_no_sync) {
      auto net = std::make_shared<TinyNet>(5);
      std::unique_ptr<dist::DDP> ddp;
      std::unique_ptr<dist::ZeroOptimizer> zo;
      std::unique_ptr<optim::Optimizer> sgd;
      if (mode == Mode::Ddp) {
        ddp = std::make_unique<dist::DDP>(net, comm, one_each);
        sgd = optim::SGD::factory({.lr = 0.1})(net->parameters());
      } else {
        zo = std::make_unique<dist::ZeroOptimizer>(optim::SGD::factory({.lr = 0.1}), net->parameters(), comm,
                                                   static_cast<int>(mode),
                                                   dist::ZeroOptions{.buckets = one_each, .units = {}, .prefetch = 1});
        zo->gather();
      }
      const std::uint64_t calls = comm.traffic(reduction).calls;
      {
        std::optional<NoSyncGuard> guard;
        if (first_in_no_sync) guard.emplace(ddp ? ddp->no_sync() : zo->no_sync());
        tiny_loss(*net, 0, 6 * static_cast<std::size_t>(comm.rank()), 3).backward();
      }
      tiny_loss(*net, 0, 6 * static_cast<std::size_t>(comm.rank()) + 3, 3).backward();
      const std::uint64_t in_backward = comm.traffic(reduction).calls - calls;
      if (mode == Mode::Zero2 || mode == Mode::Zero3) {
        for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.grad().empty()) << "a whole gradient is held";
      }
      if (ddp) {
        ddp->sync_grads();
        sgd->step();
      } else {
        zo->step();
        zo->gather();
      }
      EXPECT_EQ(comm.traffic(reduction).calls - calls, in_backward) << "the step reduced what backward had not";
      return std::pair(in_backward, flat_values(net->parameters()));
    };
    const auto [accumulated_calls, accumulated] = train_step(true);
    const auto [reduced_calls, reduced] = train_step(false);
    EXPECT_EQ(accumulated_calls, 4u);
    EXPECT_EQ(reduced_calls, 8u) << "each of the two backwards reduces its four buckets";
    expect_all_within(reduced, accumulated, 1e-14, "parameters");
  });
}

// A parameter that only rank 0's loss uses: the others have no grad for
// it, which counts as zero, and the mean is then exactly one process's.
// A parameter no rank uses gets a zero gradient, so it moves under decay:
// one process that zero-fills missing grads does the same.
class Partial : public nn::Module {
 public:
  Partial() {
    shared = register_parameter("shared", Tensor::from({0.5, -1.0, 2.0}, {3}));
    rank0_only = register_parameter("rank0_only", Tensor::from({1.5, -0.5}, {2}));
    unused = register_parameter("unused", Tensor::from({3.0}, {1}));
  }
  // Slice s of p: the shared term always, the rank-0 term on slice 0 only.
  Tensor loss(int slice, int p) const {
    Tensor t = Tensor::full({3}, slice);
    Tensor l = ((shared - t) * (shared - t)).sum() * (1.0 / p);
    if (slice == 0) l = l + (rank0_only * rank0_only * shared.slice(0, 0, 2)).sum() * (1.0 / p);
    return l;
  }
  Tensor shared, rank0_only, unused;
};

TEST_P(DataParallelTest, ParametersWithoutGradientCountAsZero) {
  const auto [backend, mode] = GetParam();
  constexpr int kSteps = 3;
  for (int p : {2, 3}) {
    SCOPED_TRACE(std::to_string(p) + " ranks");
    // One process: the sum of every slice's loss, the missing grad zero-filled.
    Partial one;
    const std::vector<double> expected = train_alone(one, adamw_with_decay(), kSteps, 0, [&](int) {
      Tensor total = one.loss(0, p);
      for (int s = 1; s < p; ++s) total = total + one.loss(s, p);
      total.backward();
      for (const Tensor& param : one.parameters()) param.mutable_grad();
    });
    ASSERT_NE(expected.back(), 3.0) << "weight decay moves the unused parameter";

    run_ranks(backend, p, [&](Comm& comm) {
      auto net = std::make_shared<Partial>();
      // Rank r's loss is p times its slice's, the mean over ranks one process's sum.
      const std::vector<double> trained = train_mode(comm, mode, net, adamw_with_decay(), kSteps, 0, [&](int) {
        (net->loss(comm.rank(), p) * static_cast<double>(p)).backward();
      });
      expect_all_within(trained, expected, 1e-10, "parameters");
      expect_same_bits_on_every_rank(comm, trained, "parameters");
    });
  }
}

// Clipping before any backward, or after zero_grad, is the caller's bug:
// DDP and every stage say so alike, in bitwise mode too, as a
// std::logic_error (Python's RuntimeError) and not as the reduction's
// std::invalid_argument (ValueError) or a silent norm of 0.
void expect_no_gradients_yet(const std::function<double()>& clip, const std::string& who) {
  try {
    const double norm = clip();
    ADD_FAILURE() << who << "::clip_grad_norm returned " << norm << " before any backward";
  } catch (const std::invalid_argument& e) {
    ADD_FAILURE() << "std::invalid_argument rather than std::logic_error: " << e.what();
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), who + "::clip_grad_norm: no gradients yet: call backward() first");
  }
}

TEST_P(DataParallelTest, ClipBeforeBackwardIsALogicError) {
  const auto [backend, mode] = GetParam();
  for (bool bitwise : {false, true}) {
    SCOPED_TRACE(bitwise ? "bitwise" : "not bitwise");
    run_ranks(backend, 2, [&](Comm& comm) {
      auto net = std::make_shared<TinyNet>(5);
      const dist::BucketOptions buckets{.bitwise = bitwise};
      std::unique_ptr<dist::DDP> ddp;
      std::unique_ptr<dist::ZeroOptimizer> zo;
      if (mode == Mode::Ddp) {
        ddp = std::make_unique<dist::DDP>(net, comm, buckets);
      } else {
        zo = std::make_unique<dist::ZeroOptimizer>(adamw_with_decay(), net->parameters(), comm, static_cast<int>(mode),
                                                   dist::ZeroOptions{.buckets = buckets, .units = {}, .prefetch = 1});
        zo->gather();
      }
      const auto clip = [&] { return ddp ? ddp->clip_grad_norm(1.0) : zo->clip_grad_norm(1.0); };
      const std::string who = ddp ? "DDP" : "ZeroOptimizer";
      expect_no_gradients_yet(clip, who);
      // A step clips as usual; after zero_grad there is nothing to clip again.
      tiny_loss(*net, 0, 6 * static_cast<std::size_t>(comm.rank()), 6).backward();
      if (bitwise) ddp ? ddp->add_leaf() : zo->add_leaf();
      if (ddp) ddp->sync_grads();
      EXPECT_GT(clip(), 0.0);
      if (ddp) {
        net->zero_grad();
      } else {
        zo->step();
        zo->zero_grad();
      }
      expect_no_gradients_yet(clip, who);
    });
  }
}

std::vector<ModeCase> mode_cases() {
  std::vector<ModeCase> cases;
  for (Backend backend : {Backend::Threads, Backend::Procs})
    for (Mode mode : {Mode::Ddp, Mode::Zero1, Mode::Zero2, Mode::Zero3}) cases.push_back({backend, mode});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Modes, DataParallelTest, ::testing::ValuesIn(mode_cases()), case_name);

}  // namespace
}  // namespace tinyllm::testing
