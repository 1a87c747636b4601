#include <fmt/format.h>
#include <gtest/gtest.h>
#include <tinyllm/train/trainer.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "support/expect_throw.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/metrics.h"
#include "train_testing.h"

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
  const testing::ScratchDir dir("tinyllm-tiny-corpus");
  o.data = dir / "corpus.txt";
  std::ofstream(o.data) << "too short";
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "too few for one window of 16 + 1");
  o = small_run();
  o.model.n_head = 3;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "width 16 is not divisible by 3 heads");
}

TEST(TrainerTest, RejectsBadDistributedOptionsBeforeWritingAnything) {
  const testing::ScratchDir dir("tinyllm-trainer-bad");
  TrainOptions o = testing::tiny_run(3, 2);
  o.metrics = dir / "metrics.jsonl";
  o.save_dir = dir / "ckpt";
  o.batch = 16;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "batch of 16 rows does not divide by world size 3");
  o = testing::tiny_run(2, 1);
  o.metrics = dir / "metrics.jsonl";
  o.grad_accum = 5;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "world size 2 × grad-accum 5 (= 10)");
  o = testing::tiny_run(2, 4);
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--zero must be 0, 1, 2 or 3 (got 4)");
  o = testing::tiny_run(2, 0);
  o.clip = -1;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--clip must be a finite norm >= 0 (got -1)");
  o = testing::tiny_run(2, 0);
  o.save_every = 2;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--save-every needs --save DIR");
  o = testing::tiny_run(2, 0);
  o.resume = dir / "a";
  o.init = dir / "b";
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--resume and --init exclude each other");
  // A regular file where the directory should be: not even root can write under it.
  std::ofstream(dir / "file") << "x";
  o = testing::tiny_run(2, 0);
  o.save_dir = dir / "file/ckpt";
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "is not writable");
  o = testing::tiny_run(2, 0);
  o.metrics = dir / "file/metrics.jsonl";
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "cannot be written");
  o = testing::tiny_run(2, 0);
  o.backend = Backend::Threads;
  o.world = 0;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "world size must be at least 1 (got 0)");
  EXPECT_FALSE(std::filesystem::exists(dir / "metrics.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt"));
}

// --timeout is seconds in [0.001, 1e9]: 0, below 0, NaN, infinity and values
// that would overflow std::chrono's deadline are refused by name.
TEST(TrainerTest, RejectsATimeoutOutOfRangeNamingIt) {
  TrainOptions o = testing::tiny_run(2, 0);
  for (double bad : {0.0, -1.0, 0.0004, std::nan(""), HUGE_VAL, 1e300, 1.5e9}) {
    o.timeout = bad;
    EXPECT_THROW_WITH(train(o), std::invalid_argument,
                      fmt::format("--timeout must be a number of seconds from 0.001 to 1e+09 (got {})", bad));
  }
}

// A short timeout must not fail a normal run on three ranks, each step a
// dozen collectives: 5 s, over 5 times the whole run (70 ms alone, up to
// 0.66 s measured beside a CI run; a 1 s timeout had less than 2x).
TEST(TrainerTest, AShortTimeoutDoesNotFailANormalRun) {
  TrainOptions o = testing::tiny_run(3, 3);
  o.timeout = 5;
  o.steps = 8;
  EXPECT_EQ(train(o).steps_run, 8u);
}

TEST(TrainerTest, ALossThatIsNotFiniteStopsTheRunNamingTheStep) {
  TrainOptions o = testing::tiny_run(2, 3);
  // The largest --lr, undamped: the loss turns NaN some 30 steps in.
  o.adamw.lr = 1000;
  o.adamw.betas = {0, 0};
  o.clip = 0;
  o.steps = 50;
  // Counted from 1, as the progress line counts: the step after the last reported.
  std::size_t reported = 0;
  try {
    train(o, [&](const StepReport& r) { reported = r.step + 1; });
    ADD_FAILURE() << "the loss stayed finite";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("at step {}", reported + 1)), std::string::npos) << e.what();
  }
}

// The bytes each rank reports are exactly the table `tinyllm memory`
// prints (state after a step, peak within one), and its collectives send
// what theory says plus the few bytes of the loss and the gradient norm.
TEST(TrainerTest, EveryModeReportsTheBytesOfTheTable) {
  for (int zero = 0; zero <= 3; ++zero) {
    for (int world : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "zero " << zero << ", world " << world);
      TrainOptions o = testing::tiny_run(world, zero);
      o.model.n_layer = 4;  // more blocks than stage 3 holds at once (one, and one prefetched)
      o.clip = 1.0;
      const TrainSummary s = train(o);
      ASSERT_EQ(s.ranks.size(), static_cast<std::size_t>(world));
      const std::size_t n = s.num_parameters;
      EXPECT_EQ(n, o.model.num_parameters());
      for (const RankStats& q : s.ranks) {
        const dist::MemoryBytes state = state_bytes(zero, n, world, q.rank);
        const dist::MemoryBytes peak = peak_bytes(zero, o.model, world, q.rank, o.grad_accum);
        EXPECT_EQ(q.state.params, state.params);
        EXPECT_EQ(q.state.grads, state.grads);
        EXPECT_EQ(q.state.optimizer, state.optimizer);
        EXPECT_EQ(q.peak.params, peak.params);
        EXPECT_EQ(q.peak.grads, peak.grads);
        if (zero == 3 && world > 1) {
          // Block by block: never every parameter at once.
          EXPECT_LT(q.peak.params, n * sizeof(double));
        }
        EXPECT_EQ(q.peak.optimizer, peak.optimizer);
        EXPECT_EQ(q.theory_sent, theory_bytes_sent(zero, o.model, world, q.rank, o.grad_accum));
        EXPECT_GE(q.bytes_sent, q.theory_sent);
        EXPECT_LE(q.bytes_sent, q.theory_sent + 2 * 8 * static_cast<std::size_t>(world));
        EXPECT_GT(q.peak_rss, 0u);
      }
    }
  }
}

TEST(TrainerTest, StageThreeHoldsAboutOneOverPOfDdp) {
  const nn::GPTConfig config;  // the trainer's default model
  const std::size_t n = config.num_parameters();
  for (int p : {2, 4, 8}) {
    const double ratio =
        static_cast<double>(state_bytes(3, n, p, 0).total()) / static_cast<double>(state_bytes(0, n, p, 0).total());
    EXPECT_NEAR(ratio, 1.0 / p, 1e-5) << p << " ranks";
  }
}

TEST(TrainerTest, ForkedRanksHandBackRankZerosSummary) {
  TrainOptions o = testing::tiny_run(2, 2);
  o.backend = Backend::Procs;
  std::vector<double> losses;
  const TrainSummary s = train(o);
  EXPECT_EQ(s.steps_run, 4u);
  EXPECT_EQ(s.num_parameters, o.model.num_parameters());
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_EQ(s.ranks[1].rank, 1);
  EXPECT_EQ(s.ranks[1].state.total(), state_bytes(2, s.num_parameters, 2, 1).total());
  EXPECT_NEAR(s.first_loss, std::log(256.0), 0.2);
  EXPECT_GT(s.timed_seconds, 0.0);
  EXPECT_LT(s.timed_seconds, s.seconds);
}

// The first step touches fresh memory; tokens/s and MFU are measured over
// the steps after it.
TEST(TrainerTest, TimesTheStepsAfterTheFirst) {
  const TrainOptions o = testing::tiny_run(2, 2);
  std::vector<double> seconds;
  const TrainSummary s = train(o, [&](const StepReport& r) { seconds.push_back(r.seconds); });
  ASSERT_EQ(seconds.size(), 4u);
  EXPECT_EQ(s.timed_seconds, seconds[1] + seconds[2] + seconds[3]);
}

// --overlap moves the buckets' collectives onto a communication thread of
// each forked rank; the trained weights and moments keep their bits.
TEST(TrainerTest, OverlapTrainsTheSameBitsOnForkedRanks) {
  const testing::ScratchDir dir("tinyllm-trainer-overlap");
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(::testing::Message() << "zero " << zero);
    TrainOptions o = testing::tiny_run(2, zero);
    o.backend = Backend::Procs;
    o.grad_accum = 2;
    o.save_dir = dir / fmt::format("plain{}", zero);
    const TrainSummary plain = train(o);
    o.overlap = true;
    o.save_dir = dir / fmt::format("overlap{}", zero);
    const TrainSummary overlapped = train(o);
    EXPECT_EQ(overlapped.last_loss, plain.last_loss);
    EXPECT_EQ(testing::read_all(overlapped.last_checkpoint), testing::read_all(plain.last_checkpoint));
  }
}

// The run's start tells whether the collectives overlap backward: the
// threads backend runs a communication thread per rank as procs does (the
// app's header test covers procs, whose rank 0 observes in another
// process); DDP on one rank has no collectives, so --overlap is off there.
TEST(TrainerTest, TheStartSaysWhetherTheCollectivesOverlap) {
  class Start final : public TrainObserver {
   public:
    void on_start(const RunInfo& info) override { overlap = info.overlap; }
    std::optional<bool> overlap;
  };
  struct Case {
    int world, zero;
    bool asked, on;
  };
  for (const Case c : {Case{2, 0, true, true}, Case{2, 0, false, false}, Case{2, 3, true, true}, Case{3, 2, true, true},
                       Case{1, 0, true, false}, Case{1, 1, true, true}}) {
    SCOPED_TRACE(::testing::Message() << "world " << c.world << " zero " << c.zero << (c.asked ? " --overlap" : ""));
    TrainOptions o = testing::tiny_run(c.world, c.zero);  // on threads
    o.overlap = c.asked;
    o.steps = 1;
    Start start;
    train(o, start);
    EXPECT_EQ(start.overlap, std::optional(c.on));
  }
}

TEST(TrainerTest, MetricsFileHasOneJsonObjectPerStep) {
  const testing::ScratchDir dir("tinyllm-trainer-metrics");
  TrainOptions o = testing::tiny_run(2, 1);
  o.metrics = dir / "m.jsonl";
  std::vector<StepReport> reports;
  train(o, [&](const StepReport& r) { reports.push_back(r); });
  std::ifstream in(o.metrics);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i], metrics_line(reports[i]));
    EXPECT_TRUE(lines[i].starts_with(fmt::format("{{\"step\":{},\"loss\":", i))) << lines[i];
    EXPECT_NE(lines[i].find("\"ranks\":[{\"rank\":0,"), std::string::npos);
    EXPECT_NE(lines[i].find("{\"rank\":1,"), std::string::npos);
  }
}

// A resumed run appends to its metrics, as nanoGPT's and llm.c's logs do;
// a fresh run starts the file anew.
TEST(TrainerTest, AResumedRunAppendsToItsMetrics) {
  const testing::ScratchDir dir("tinyllm-trainer-metrics-resume");
  TrainOptions o = testing::tiny_run();
  o.steps = 2;
  o.metrics = dir / "m.jsonl";
  o.save_dir = dir / "run";
  train(o);
  o.steps = 4;
  o.resume = o.save_dir;
  train(o);
  const auto steps = [&] {
    std::ifstream in(o.metrics);
    std::vector<std::size_t> seen;
    for (std::string line; std::getline(in, line);) seen.push_back(std::stoul(line.substr(line.find(':') + 1)));
    return seen;
  };
  EXPECT_EQ(steps(), (std::vector<std::size_t>{0, 1, 2, 3}));
  o.resume.clear();
  o.overwrite = true;
  o.steps = 1;
  train(o);
  EXPECT_EQ(steps(), (std::vector<std::size_t>{0}));
}

// The metrics file is never a file the run reads, nor a checkpoint.
TEST(TrainerTest, TheMetricsFileIsNeverACheckpointOrTheData) {
  const testing::ScratchDir dir("tinyllm-trainer-metrics-files");
  TrainOptions o = testing::tiny_run();
  o.steps = 1;
  o.save_dir = dir / "run";
  train(o);
  const std::string saved = checkpoint_path(o.save_dir, 1);
  const std::uintmax_t bytes = std::filesystem::file_size(saved);
  TrainOptions again = o;
  again.steps = 2;
  again.resume = saved;
  again.metrics = saved;
  EXPECT_THROW_WITH(train(again), std::invalid_argument, "is the checkpoint the run starts from");
  again.resume.clear();
  again.init = saved;
  again.save_dir.clear();
  EXPECT_THROW_WITH(train(again), std::invalid_argument, "is the checkpoint the run starts from");
  again.init.clear();
  again.metrics = (std::filesystem::path(dir / "run") / kBestCheckpoint).string();
  EXPECT_THROW_WITH(train(again), std::invalid_argument, "named as a checkpoint (.safetensors)");
  again.metrics = again.data;
  EXPECT_THROW_WITH(train(again), std::invalid_argument, "is the --data file");
  EXPECT_EQ(std::filesystem::file_size(saved), bytes);
}

// The largest rise, after step 5, of the validation loss (after every
// step's update) above its lowest before: a spike of the training, which
// the single batches' losses cannot show, since one batch a pass over the
// default corpus is its capitalised warranty text.
double largest_val_rise(TrainOptions o) {
  o.eval_every = 1;
  o.eval_batches = 2;  // 32 of the 54 windows, to keep the test short
  std::vector<double> val;
  train(o, [&](const StepReport& r) { val.push_back(*r.val_loss); });
  double rise = 0;
  for (std::size_t s = 5; s < val.size(); ++s) {
    rise = std::max(rise, val[s] - *std::min_element(val.begin(), val.begin() + static_cast<std::ptrdiff_t>(s)));
  }
  return rise;
}

TEST(TrainerTest, TheDefaultRunsTrainWithoutASpike) {
  TrainOptions train_default;  // tinyllm train's first 65 steps: past two passes
  train_default.steps = 65;
  train_default.decay_steps = 500;
  EXPECT_LT(largest_val_rise(train_default), 0.25);
  TrainOptions verify_default;  // the README's verify job, on one process
  verify_default.steps = 50;
  EXPECT_LT(largest_val_rise(verify_default), 0.25);
  // The check sees the spike a constant lr without clipping makes at step 32.
  TrainOptions before = train_default;
  before.steps = 33;
  before.schedule = optim::LRScheduleKind::Constant;
  before.decay_steps = 0;  // the cosine's alone
  before.clip = 0;
  EXPECT_GT(largest_val_rise(before), 0.5);
}

}  // namespace
}  // namespace tinyllm::train
