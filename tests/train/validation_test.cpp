// The trainer's validation: it trains on the corpus's first part as if that
// were the whole file, and reports, after each due step's update, the mean
// of the validation windows' mean losses, the same in every mode and world.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "tinyllm/tensor/autograd.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/metrics.h"
#include "tinyllm/train/trainer.h"
#include "train_testing.h"

namespace tinyllm::train {
namespace {

TrainOptions validated_run(int world = 1, int zero = 0) {
  TrainOptions o = testing::tiny_run(world, zero);
  o.val_fraction = 0.05;
  o.eval_every = 2;
  o.eval_batches = 2;  // 48 of the validation part's windows
  o.steps = 5;
  return o;
}

// The val loss of a step's update, step -> loss.
std::map<std::size_t, double> val_losses(const TrainOptions& o) {
  std::map<std::size_t, double> out;
  train(o, [&](const StepReport& r) {
    if (r.val_loss) out[r.step] = *r.val_loss;
  });
  return out;
}

// Window by window, on the model a checkpoint holds.
double by_hand(const std::string& checkpoint, const Corpus& val, std::size_t windows) {
  const auto model = load_gpt(SafetensorsFile::open(checkpoint));
  const autograd::NoGradGuard no_grad;
  double sum = 0;
  for (std::size_t w = 0; w < windows; ++w) {
    const Batch b = val.windows(w, 1, model->config().block_size);
    sum += model->loss(b.inputs, b.targets, 1, b.seq).item();
  }
  return sum / static_cast<double>(windows);
}

TEST(ValidationTest, TheValLossIsThatOfTheParametersAfterTheStep) {
  const testing::ScratchDir dir("tinyllm-validation-steps");
  TrainOptions o = validated_run();
  o.save_dir = dir.path().string();
  o.save_every = 1;
  const std::map<std::size_t, double> losses = val_losses(o);
  // Every second step, and the last.
  ASSERT_EQ(losses.size(), 3u);
  const Corpus val = load_corpora(o).second;
  ASSERT_GT(val.num_windows(o.model.block_size), 48u);
  for (const std::size_t step : {1, 3, 4}) {
    ASSERT_TRUE(losses.contains(step)) << "step " << step;
    EXPECT_NEAR(losses.at(step), by_hand(checkpoint_path(o.save_dir, step + 1), val, 48), 1e-12) << "step " << step;
  }
  EXPECT_NE(losses.at(1), losses.at(3));
}

TEST(ValidationTest, EveryModeAndWorldReportsOneProcesssValLoss) {
  const std::map<std::size_t, double> alone = val_losses(validated_run());
  for (int zero = 0; zero <= 3; ++zero) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << "zero " << zero << ", world " << world);
      const std::map<std::size_t, double> losses = val_losses(validated_run(world, zero));
      ASSERT_EQ(losses.size(), alone.size());
      for (const auto& [step, loss] : alone) EXPECT_NEAR(losses.at(step), loss, 1e-12) << "step " << step;
    }
  }
}

TEST(ValidationTest, TrainsOnTheFirstPartAsIfItWereTheWholeFile) {
  const testing::ScratchDir dir("tinyllm-validation-split");
  TrainOptions split = validated_run(2, 1);
  TrainOptions whole = split;
  const Corpus train_part = load_corpora(split).first;
  std::ifstream in(split.data, std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  ASSERT_EQ(train_part.size(), static_cast<std::size_t>(0.95 * static_cast<double>(bytes.size())));
  std::ofstream(dir / "first-part.txt", std::ios::binary) << bytes.substr(0, train_part.size());
  whole.data = dir / "first-part.txt";
  whole.val_fraction = 0;
  std::vector<double> a, b;
  train(split, [&](const StepReport& r) { a.push_back(r.loss); });
  train(whole, [&](const StepReport& r) { b.push_back(r.loss); });
  EXPECT_EQ(a, b);
}

TEST(ValidationTest, TheBestCheckpointIsTheLowestValLoss) {
  const testing::ScratchDir dir("tinyllm-validation-best");
  TrainOptions o = validated_run(2, 3);
  o.eval_every = 1;
  o.adamw.lr = 0.2;  // high enough that the val loss rises again
  o.save_dir = dir.path().string();
  o.save_every = 1;
  const std::map<std::size_t, double> losses = val_losses(o);
  const auto lowest =
      std::min_element(losses.begin(), losses.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  ASSERT_NE(lowest->first + 1, o.steps) << "the lowest should come before the end";
  const std::string best = dir / kBestCheckpoint;
  EXPECT_EQ(read_checkpoint_info(SafetensorsFile::open(best)).step, lowest->first + 1);
  EXPECT_EQ(testing::read_all(best), testing::read_all(checkpoint_path(o.save_dir, lowest->first + 1)));
  // A resume from the directory takes the latest step, not the best.
  EXPECT_EQ(find_checkpoint(o.save_dir), checkpoint_path(o.save_dir, o.steps));
}

TEST(ValidationTest, MetricsGetALineAfterEachEvaluatedStep) {
  const testing::ScratchDir dir("tinyllm-validation-metrics");
  TrainOptions o = validated_run(2, 2);
  o.metrics = dir / "m.jsonl";
  std::vector<StepReport> reports;
  const TrainSummary summary = train(o, [&](const StepReport& r) { reports.push_back(r); });
  std::vector<std::string> expected;
  for (const StepReport& r : reports) {
    expected.push_back(metrics_line(r));
    if (r.val_loss) expected.push_back(val_metrics_line(r.step, *r.val_loss));
  }
  std::ifstream in(o.metrics);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  EXPECT_EQ(lines, expected);
  EXPECT_EQ(lines.size(), 5u + 3u);
  EXPECT_TRUE(lines[2].starts_with("{\"step\":1,\"val_loss\":")) << lines[2];
  ASSERT_TRUE(summary.val_loss && summary.best_val_loss);
  EXPECT_EQ(*summary.val_loss, *reports.back().val_loss);
  EXPECT_LE(*summary.best_val_loss, *summary.val_loss);
}

TEST(ValidationTest, NoEvaluationWithoutAValidationPartOrAnInterval) {
  const testing::ScratchDir dir("tinyllm-validation-none");
  for (const auto& [fraction, every] : {std::pair{0.0, std::size_t{2}}, {0.05, std::size_t{0}}}) {
    TrainOptions o = validated_run(2, 0);
    o.val_fraction = fraction;
    o.eval_every = every;
    o.save_dir = dir / fmt::format("{}-{}", fraction, every);
    o.overwrite = true;  // val_losses() saves the same run first
    EXPECT_TRUE(val_losses(o).empty());
    const TrainSummary summary = train(o);
    EXPECT_FALSE(summary.val_loss.has_value());
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(o.save_dir) / kBestCheckpoint));
  }
}

}  // namespace
}  // namespace tinyllm::train
