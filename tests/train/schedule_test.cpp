// The learning-rate schedule in training: every mode's Replica takes the lr
// it is given, the trainer steps at get_lr(step) and reports it, a constant
// schedule without clipping is the loop as it was before schedules, and a
// bad schedule is refused naming its values.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/expect_throw.h"
#include "tinyllm/distributed/self_comm.h"
#include "tinyllm/distributed/threads_comm.h"
#include "tinyllm/tensor/deferred_init.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/metrics.h"
#include "tinyllm/train/replica.h"
#include "train_testing.h"

namespace tinyllm::train {
namespace {

// Every region of a Replica, end to end: what a checkpoint's data holds.
std::vector<double> state_of(Replica& replica) {
  std::vector<double> out;
  for (Region region : {Region::Params, Region::ExpAvg, Region::ExpAvgSq}) {
    const std::vector<double> values = replica.full(region);
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

// Two steps of a Replica in the given mode, its AdamW made with lr
// made_with and set to set_to before each step when that is given.
std::vector<double> two_steps(dist::Comm& comm, int zero, double made_with, std::optional<double> set_to) {
  TrainOptions o = testing::tiny_run();
  o.adamw.lr = made_with;
  const Corpus corpus = Corpus::load(o.data);
  std::shared_ptr<nn::GPT> model;
  {
    std::optional<DeferredInitGuard> deferred;  // as the trainer builds ZeRO's model
    if (zero > 0) deferred.emplace();
    model = std::make_shared<nn::GPT>(o.model, o.seed);
  }
  Replica replica(model, o.adamw, comm, zero);
  const int r = comm.rank(), p = comm.size();
  for (std::size_t step = 0; step < 2; ++step) {
    replica.zero_grad();
    replica.backward(corpus.batch(step, o.batch, o.model.block_size, r, p), 1);
    if (set_to) {
      replica.set_lr(*set_to);
      EXPECT_EQ(replica.lr(), *set_to);
    }
    replica.step(0);
  }
  return state_of(replica);
}

// set_lr reaches the optimizer that steps in every mode: one process's and
// DDP's AdamW, ZeRO's inner AdamW over the chunk. An AdamW made with lr 0.1
// and set to 0.02 trains the bits of one made with 0.02.
TEST(ReplicaScheduleTest, SetLrReachesTheOptimizerOfEveryMode) {
  dist::SelfComm self;
  const std::vector<double> alone = two_steps(self, 0, 0.02, std::nullopt);
  EXPECT_EQ(two_steps(self, 0, 0.1, 0.02), alone);
  EXPECT_NE(two_steps(self, 0, 0.1, std::nullopt), alone);
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(::testing::Message() << "zero " << zero);
    dist::run_threads(2, [&](dist::Comm& comm) {
      EXPECT_EQ(two_steps(comm, zero, 0.1, 0.02), two_steps(comm, zero, 0.02, std::nullopt));
    });
  }
}

TEST(ReplicaScheduleTest, SetLrRejectsANegativeLr) {
  dist::SelfComm self;
  Replica replica(std::make_shared<nn::GPT>(testing::tiny_run().model, 1), {}, self, 0);
  EXPECT_THROW_WITH(replica.set_lr(-0.5), std::invalid_argument, "lr must be finite and >= 0 (got -0.5)");
}

struct HandRun {
  std::vector<double> losses;
  std::vector<double> state;
};

// The trainer's loop on one process, written out: the lr is set only when a
// schedule is given, so without one this is the loop before schedules.
HandRun hand_loop(const TrainOptions& o, const optim::LRSchedule* schedule) {
  const Corpus corpus = Corpus::load(o.data);
  dist::SelfComm self;
  Replica replica(std::make_shared<nn::GPT>(o.model, o.seed), o.adamw, self, 0);
  HandRun out;
  for (std::size_t step = 0; step < o.steps; ++step) {
    replica.zero_grad();
    out.losses.push_back(replica.backward(corpus.batch(step, o.batch, o.model.block_size), o.grad_accum));
    if (schedule) replica.set_lr(schedule->get_lr(step));
    replica.step(o.clip);
  }
  out.state = state_of(replica);
  return out;
}

HandRun trained(const TrainOptions& o) {
  HandRun out;
  const TrainSummary s = train(o, [&](const StepReport& r) { out.losses.push_back(r.loss); });
  out.state = testing::read_all(s.last_checkpoint);
  return out;
}

TEST(TrainerScheduleTest, AConstantScheduleWithoutClippingTrainsAsAFixedLr) {
  const testing::ScratchDir dir("tinyllm-schedule-constant");
  TrainOptions o = testing::tiny_run();
  o.schedule = optim::LRScheduleKind::Constant;
  o.clip = 0;
  o.save_dir = dir / "run";
  o.overwrite = true;  // trained() saves the same run first
  std::vector<double> lrs;
  const HandRun run = trained(o);
  train(o, [&](const StepReport& r) { lrs.push_back(r.lr); });
  const HandRun fixed = hand_loop(o, nullptr);
  EXPECT_EQ(run.losses, fixed.losses);
  EXPECT_EQ(run.state, fixed.state);
  EXPECT_EQ(lrs, std::vector<double>(o.steps, o.adamw.lr));
}

// The default, cosine with clipping at 1, is the loop that sets each
// step's lr from the schedule; and it is not the fixed lr's run.
TEST(TrainerScheduleTest, TheDefaultCosineTrainsAtEachStepsLr) {
  const testing::ScratchDir dir("tinyllm-schedule-cosine");
  TrainOptions o = testing::tiny_run();
  o.warmup_steps = 1;
  o.save_dir = dir / "run";
  ASSERT_EQ(o.clip, 1.0);
  const optim::LRSchedule schedule = lr_schedule(o);
  const HandRun run = trained(o);
  EXPECT_EQ(run.state, hand_loop(o, &schedule).state);
  EXPECT_NE(run.state, hand_loop(o, nullptr).state);
}

// lr 0.01, min_lr 0.001 (a tenth), warmup 1, decay at --steps 4:
// 0.01·1/2, then the cosine from 0.01 at step 1 over 3 steps.
TEST(TrainerScheduleTest, EachStepReportsItsLrInTheReportAndTheMetrics) {
  const testing::ScratchDir dir("tinyllm-schedule-report");
  TrainOptions o = testing::tiny_run(2, 1);
  o.warmup_steps = 1;
  o.metrics = dir / "m.jsonl";
  std::vector<StepReport> reports;
  train(o, [&](const StepReport& r) { reports.push_back(r); });
  const std::vector<double> hand = {0.005, 0.01, 0.001 + 0.75 * 0.009, 0.001 + 0.25 * 0.009};
  ASSERT_EQ(reports.size(), hand.size());
  std::ifstream in(o.metrics);
  for (std::size_t i = 0; i < hand.size(); ++i) {
    EXPECT_NEAR(reports[i].lr, hand[i], 1e-17) << "step " << i;
    std::string line;
    std::getline(in, line);
    EXPECT_NE(line.find(fmt::format(",\"lr\":{:.17g},", reports[i].lr)), std::string::npos) << line;
    EXPECT_NE(line.find("\"grad_norm\":"), std::string::npos) << line;
  }
}

// The decay defaults to --steps and min_lr to lr/10; warmup to a tenth of
// the decay steps.
TEST(TrainerScheduleTest, DefaultsFollowTheRun) {
  TrainOptions o = testing::tiny_run();
  o.steps = 500;
  o.adamw.lr = 0.002;
  const optim::LRSchedule s = lr_schedule(o);
  EXPECT_EQ(s.lr(), 0.002);
  EXPECT_EQ(s.options().kind, optim::LRScheduleKind::Cosine);
  EXPECT_EQ(s.options().decay_steps, 500u);
  EXPECT_EQ(s.options().warmup_steps, 50u);
  EXPECT_EQ(s.options().min_lr, 0.0002);
  o.decay_steps = 1000;
  o.warmup_steps = 0;
  o.min_lr = 0.0;
  EXPECT_EQ(lr_schedule(o).options().decay_steps, 1000u);
  EXPECT_EQ(lr_schedule(o).options().warmup_steps, 0u);
  EXPECT_EQ(lr_schedule(o).options().min_lr, 0.0);
}

TEST(TrainerScheduleTest, RejectsABadScheduleBeforeWritingAnything) {
  const testing::ScratchDir dir("tinyllm-schedule-bad");
  TrainOptions o = testing::tiny_run(2, 2);
  o.metrics = dir / "m.jsonl";
  o.save_dir = dir / "ckpt";
  o.warmup_steps = 4;  // the decay is at --steps 4
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--warmup-steps 4 must be below the decay steps");
  o.decay_steps = 3;
  o.warmup_steps = 5;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--warmup-steps 5 must be below --decay-steps 3");
  o = testing::tiny_run(2, 2);
  o.min_lr = 0.5;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--min-lr 0.5 must not be above --lr 0.01");
  o.min_lr = -1;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--min-lr must be a number in [0, 1000] (got -1)");
  EXPECT_FALSE(std::filesystem::exists(dir / "m.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt"));
}

// The schedule's errors name the flags as typed, with their values, and a
// decay the user left out as the --steps it defaulted to; never the
// LRSchedule fields (warmup_steps, decay_steps) the command has no flag for.
TEST(TrainerScheduleTest, ErrorsNameTheFlagsAndTheDecayStepsDefault) {
  const auto message = [](const TrainOptions& o) {
    try {
      check_flags(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainOptions o = testing::tiny_run();
  o.steps = 5;
  o.warmup_steps = 5;
  EXPECT_EQ(message(o),
            "--warmup-steps 5 must be below the decay steps, which are --steps 5 as --decay-steps is not given");
  o.steps = 0;
  EXPECT_EQ(message(o),
            "--warmup-steps 5 must be below the decay steps, which are 1 for --steps 0 as --decay-steps is not given");
  o.steps = 1;
  o.warmup_steps = 10;
  o.decay_steps = 4;
  EXPECT_EQ(message(o), "--warmup-steps 10 must be below --decay-steps 4");
  o.decay_steps = 11;
  EXPECT_EQ(message(o), "no error");
  o = testing::tiny_run();
  o.min_lr = 0.02;
  EXPECT_EQ(message(o), "--min-lr 0.02 must not be above --lr 0.01");
  // The default warmup (a tenth of the decay) and min_lr (a tenth of --lr) always fit.
  o = testing::tiny_run();
  for (std::size_t steps : {0, 1, 9, 10, 500}) {
    o.steps = steps;
    EXPECT_EQ(message(o), "no error") << "--steps " << steps;
  }
}

// The norm is computed only to clip: without clipping the metrics leave it
// out rather than claim 0, and with clipping each line holds it.
TEST(TrainerScheduleTest, TheMetricsHoldTheGradientNormOnlyWhenClipping) {
  const testing::ScratchDir dir("tinyllm-grad-norm");
  for (const double clip : {0.0, 1.0}) {
    TrainOptions o = testing::tiny_run();
    o.clip = clip;
    o.metrics = dir / "m.jsonl";
    std::vector<StepReport> reports;
    train(o, [&](const StepReport& r) { reports.push_back(r); });
    std::ifstream in(o.metrics);
    for (const StepReport& r : reports) {
      std::string line;
      std::getline(in, line);
      EXPECT_EQ(r.grad_norm.has_value(), clip > 0);
      EXPECT_EQ(line.find("\"grad_norm\":") != std::string::npos, clip > 0) << line;
      if (r.grad_norm) {
        EXPECT_GT(*r.grad_norm, 0) << line;
      }
    }
  }
}

}  // namespace
}  // namespace tinyllm::train
