#include <gtest/gtest.h>
#include <tinyllm/train/trainer.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/expect_throw.h"

namespace tinyllm::train {
namespace {

TrainOptions small_run() {
  TrainOptions o;
  o.model = {.vocab_size = 256, .block_size = 16, .n_layer = 1, .n_head = 2, .n_embd = 16};
  o.batch = 4;
  o.steps = 40;
  o.adamw.lr = 1e-2;
  return o;
}

TEST(TrainerTest, LossFallsOnTheDefaultCorpus) {
  std::vector<double> losses;
  const TrainSummary summary = train(small_run(), [&](const StepReport& r) {
    EXPECT_EQ(r.step, losses.size());
    EXPECT_GT(r.tokens_per_second, 0.0);
    losses.push_back(r.loss);
  });
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.2);
  EXPECT_LT(summary.last_loss, losses.front() - 1.0);
  EXPECT_EQ(summary.first_loss, losses.front());
}

TEST(TrainerTest, SameOptionsGiveTheSameLosses) {
  TrainOptions o = small_run();
  o.steps = 5;
  std::vector<double> a, b;
  train(o, [&](const StepReport& r) { a.push_back(r.loss); });
  train(o, [&](const StepReport& r) { b.push_back(r.loss); });
  EXPECT_EQ(a, b);
}

TEST(TrainerTest, RejectsBadInput) {
  TrainOptions o = small_run();
  o.data = "/nonexistent/corpus.txt";
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "'/nonexistent/corpus.txt' cannot be opened");
  const auto tiny = std::filesystem::temp_directory_path() / "tinyllm_tiny_corpus.txt";
  std::ofstream(tiny) << "too short";
  o.data = tiny.string();
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "too few for one window of 16 + 1");
  std::filesystem::remove(tiny);
  o = small_run();
  o.model.n_head = 3;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "width 16 is not divisible by 3 heads");
}

}  // namespace
}  // namespace tinyllm::train
