// LRSchedule against hand values and against nanoGPT's get_lr itself, bit
// for bit, plus its errors.
#include <gtest/gtest.h>
#include <tinyllm/optim/lr_schedule.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "support/expect_throw.h"

namespace tinyllm::optim {
namespace {

// lr 1, min_lr 0.1, warmup 4, decay 12: the cosine spans steps 4..12.
LRSchedule hand_schedule() { return LRSchedule(1.0, {.warmup_steps = 4, .decay_steps = 12, .min_lr = 0.1}); }

TEST(LRScheduleTest, WarmupRisesLinearlyFromLrOverWarmupPlusOne) {
  const LRSchedule s = hand_schedule();
  EXPECT_EQ(s.get_lr(0), 1.0 / 5);
  EXPECT_EQ(s.get_lr(1), 2.0 / 5);
  EXPECT_EQ(s.get_lr(3), 4.0 / 5);
}

TEST(LRScheduleTest, CosineStartsAtLrPassesTheMidpointAndEndsAtMinLr) {
  const LRSchedule s = hand_schedule();
  EXPECT_EQ(s.get_lr(4), 1.0);                                              // cos(0) = 1
  EXPECT_NEAR(s.get_lr(6), 0.1 + 0.5 * (1 + std::sqrt(0.5)) * 0.9, 1e-15);  // a quarter: cos(π/4)
  EXPECT_NEAR(s.get_lr(8), 0.55, 1e-15);                                    // the midpoint: halfway from 1 to 0.1
  EXPECT_NEAR(s.get_lr(12), 0.1, 1e-15);                                    // cos(π) = −1
}

TEST(LRScheduleTest, AfterTheDecayItIsMinLr) {
  const LRSchedule s = hand_schedule();
  EXPECT_EQ(s.get_lr(13), 0.1);
  EXPECT_EQ(s.get_lr(1000000), 0.1);
}

TEST(LRScheduleTest, WithoutWarmupTheFirstStepIsLr) {
  const LRSchedule s(0.5, {.warmup_steps = 0, .decay_steps = 2, .min_lr = 0.0});
  EXPECT_EQ(s.get_lr(0), 0.5);
  EXPECT_EQ(s.get_lr(1), 0.25);  // cos(π/2) is 6e-17: 0.5·(1 + 6e-17)·0.5 rounds to 0.25
  EXPECT_EQ(s.get_lr(3), 0.0);
}

TEST(LRScheduleTest, ConstantIsLrAtEveryStepAndIgnoresTheCosinesSteps) {
  const LRSchedule s(0.3, {.kind = LRScheduleKind::Constant, .warmup_steps = 50, .decay_steps = 10, .min_lr = 0.1});
  for (std::size_t step : {0, 1, 9, 10, 11, 49, 50, 1000}) EXPECT_EQ(s.get_lr(step), 0.3) << "step " << step;
}

// Bits printed by nanoGPT's get_lr (train.py, CPython 3 with glibc's cos)
// with its GPT-2 settings: learning_rate 6e-4, warmup_iters 2000,
// lr_decay_iters 600000, min_lr 6e-5.
TEST(LRScheduleTest, ProducesNanoGptsBits) {
  const LRSchedule s(6e-4, {.warmup_steps = 2000, .decay_steps = 600000, .min_lr = 6e-5});
  const std::pair<std::size_t, double> expected[] = {{0, 0x1.41f62937790d4p-22},      {999, 0x1.3a6a64402c36fp-12},
                                                     {1999, 0x1.3a6a64402c36fp-11},   {2000, 0x1.3a92a30553261p-11},
                                                     {2001, 0x1.3a92a3054ac24p-11},   {123456, 0x1.1eb88ffc3b94bp-11},
                                                     {301000, 0x1.5a07b352a8437p-12}, {599999, 0x1.f75104d5d813fp-15},
                                                     {600000, 0x1.f75104d551d69p-15}, {600001, 0x1.f75104d551d69p-15}};
  for (const auto& [step, lr] : expected) EXPECT_EQ(s.get_lr(step), lr) << "step " << step;
}

TEST(LRScheduleTest, RejectsAWarmupThatDoesNotEndBeforeTheDecay) {
  EXPECT_THROW_WITH(LRSchedule(1.0, {.warmup_steps = 12, .decay_steps = 12}), std::invalid_argument,
                    "LRSchedule: warmup_steps must be below decay_steps (got warmup_steps 12, decay_steps 12)");
  EXPECT_THROW_WITH(LRSchedule(1.0, {.warmup_steps = 20, .decay_steps = 12}), std::invalid_argument,
                    "(got warmup_steps 20, decay_steps 12)");
  // Constant has no warmup and no decay to check.
  EXPECT_NO_THROW(LRSchedule(1.0, {.kind = LRScheduleKind::Constant, .warmup_steps = 20, .decay_steps = 12}));
}

TEST(LRScheduleTest, RejectsAMinLrOutsideZeroToLr) {
  EXPECT_THROW_WITH(LRSchedule(0.1, {.decay_steps = 10, .min_lr = 0.5}), std::invalid_argument,
                    "LRSchedule: min_lr must not be above lr (got min_lr 0.5, lr 0.1)");
  EXPECT_THROW_WITH(LRSchedule(0.1, {.decay_steps = 10, .min_lr = -0.01}), std::invalid_argument,
                    "LRSchedule: min_lr must be >= 0 (got -0.01)");
  EXPECT_THROW_WITH(LRSchedule(0.1, {.decay_steps = 10, .min_lr = std::nan("")}), std::invalid_argument,
                    "LRSchedule: min_lr must be >= 0 (got nan)");
  EXPECT_NO_THROW(LRSchedule(0.1, {.decay_steps = 10, .min_lr = 0.1}));
}

TEST(LRScheduleTest, RejectsALrThatIsNegativeOrNotFinite) {
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW_WITH(LRSchedule(bad, {.decay_steps = 10}), std::invalid_argument,
                      "LRSchedule: lr must be finite and >= 0 (got ");
  }
}

TEST(LRScheduleTest, ParsesItsNames) {
  EXPECT_EQ(parse_lr_schedule("cosine"), LRScheduleKind::Cosine);
  EXPECT_EQ(parse_lr_schedule("constant"), LRScheduleKind::Constant);
  EXPECT_STREQ(lr_schedule_name(LRScheduleKind::Cosine), "cosine");
  EXPECT_THROW_WITH(parse_lr_schedule("linear"), std::invalid_argument,
                    "schedule must be cosine or constant (got 'linear')");
}

}  // namespace
}  // namespace tinyllm::optim
