#include <gtest/gtest.h>
#include <tinyllm/train/verify.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "support/expect_throw.h"
#include "train_testing.h"

namespace tinyllm::train {
namespace {

// The capstone check in the library, on threads (the command's matrix runs
// it on processes): every mode at 3 ranks with accumulation and clipping
// reports every step, each within the tolerance and with identical bits.
TEST(VerifyTest, EveryModeMatchesOneProcessAtEveryStep) {
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(::testing::Message() << "zero " << zero);
    TrainOptions o = testing::tiny_run(3, zero);
    o.grad_accum = 2;
    o.clip = 0.01;
    std::vector<VerifyStep> steps;
    verify(o, {}, [&](const VerifyStep& v) { steps.push_back(v); });
    ASSERT_EQ(steps.size(), o.steps);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      EXPECT_EQ(steps[i].step, i);
      EXPECT_LE(steps[i].worst(), kVerifyTolerance);
      EXPECT_TRUE(steps[i].same_bits);
      EXPECT_GT(steps[i].loss, 0.0);
    }
  }
}

// Both sides step at the schedule's lr: a warmup and the cosine, clipping
// at the default 1, on DDP and stage 3 (were the one-process side at
// another lr, the parameters would differ by far more than 1e-10).
TEST(VerifyTest, TheScheduleAndDefaultClippingMatchOneProcess) {
  for (const auto& [world, zero] : {std::pair{2, 0}, std::pair{3, 3}}) {
    SCOPED_TRACE(::testing::Message() << "world " << world << ", zero " << zero);
    TrainOptions o = testing::tiny_run(world, zero);
    o.steps = 5;
    o.warmup_steps = 2;
    ASSERT_EQ(o.clip, 1.0);
    std::size_t steps = 0;
    verify(o, {}, [&](const VerifyStep& v) {
      ++steps;
      EXPECT_LE(v.worst(), kVerifyTolerance);
      EXPECT_TRUE(v.same_bits);
    });
    EXPECT_EQ(steps, o.steps);
  }
}

// The check can fail: below any possible difference, every rank throws
// after the last step, naming the first step that failed.
TEST(VerifyTest, ADifferenceAboveTheToleranceFailsOnEveryRank) {
  TrainOptions o = testing::tiny_run(2, 1);
  o.steps = 2;
  std::atomic<int> reported = 0;
  EXPECT_THROW_WITH(verify(
                        o, {}, [&](const VerifyStep&) { ++reported; }, -1.0),
                    std::runtime_error, "verify failed: at step 1 the ranks differ from one process by ");
  EXPECT_EQ(reported, 2);
}

// The check compares two real computations: three ranks sum in another
// order than one process, so some figure differs in its last bits, and a
// tolerance below that difference fails.
// A NaN anywhere is the worst difference, never one that passes.
TEST(VerifyTest, ANanDifferenceIsTheWorst) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int field = 0; field < 4; ++field) {
    train::VerifyStep v{.loss_diff = 1e-13, .params_diff = 2e-13, .exp_avg_diff = 3e-13, .exp_avg_sq_diff = 4e-13};
    EXPECT_EQ(v.worst(), 4e-13);
    double* fields[] = {&v.loss_diff, &v.params_diff, &v.exp_avg_diff, &v.exp_avg_sq_diff};
    *fields[field] = nan;
    EXPECT_TRUE(std::isnan(v.worst())) << "field " << field;
    EXPECT_FALSE(v.worst() <= train::kVerifyTolerance);
  }
}

TEST(VerifyTest, MeasuresTheRoundingDifferenceOfRealRanks) {
  TrainOptions o = testing::tiny_run(3, 2);
  o.steps = 3;
  double worst = 0;
  verify(o, {}, [&](const VerifyStep& v) { worst = std::max(worst, v.worst()); });
  ASSERT_GT(worst, 0.0);
  EXPECT_LT(worst, 1e-13);
  EXPECT_THROW_WITH(verify(o, {}, {}, worst / 2), std::runtime_error, "verify failed");
}

}  // namespace
}  // namespace tinyllm::train
