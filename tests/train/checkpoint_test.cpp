#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <tinyllm/tensor/deferred_init.h>
#include <tinyllm/train/checkpoint.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "support/expect_throw.h"
#include "train_testing.h"

namespace tinyllm::train {
namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double max_diff(const std::vector<double>& x, const std::vector<double>& y) {
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// A run of 6 steps saving at 3 and 6, in the given mode.
TrainOptions saving_run(const testing::ScratchDir& dir, const std::string& name, int world, int zero) {
  TrainOptions o = testing::tiny_run(world, zero);
  o.steps = 6;
  o.save_dir = dir / name;
  o.save_every = 3;
  return o;
}

TEST(CheckpointTest, HoldsTheModelUnderGpt2NamesThenTheOptimizerState) {
  const testing::ScratchDir dir("tinyllm-ckpt-names");
  const TrainOptions o = saving_run(dir, "a", 2, 3);
  const TrainSummary s = train(o);
  EXPECT_EQ(s.last_checkpoint, checkpoint_path(o.save_dir, 6));
  const SafetensorsFile file = SafetensorsFile::open(s.last_checkpoint);
  const std::size_t n = o.model.num_parameters();
  ASSERT_EQ(file.size(), 3 * n);
  ASSERT_EQ(file.tensors().size(), 3 * (2 + 2 * 12 + 2));
  EXPECT_EQ(file.tensors()[0].name, "wte.weight");
  EXPECT_EQ(file.tensors()[0].shape, (std::vector<std::size_t>{256, 16}));
  EXPECT_EQ(file.tensors()[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(file.tensors()[4].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(file.tensors()[4].shape, (std::vector<std::size_t>{48, 16}));
  EXPECT_EQ(file.tensors()[27].name, "ln_f.bias");
  EXPECT_EQ(file.tensors()[28].name, "wte.weight.exp_avg");
  EXPECT_EQ(file.offset("wte.weight.exp_avg"), n);
  EXPECT_EQ(file.offset("wte.weight.exp_avg_sq"), 2 * n);
  const CheckpointInfo info = read_checkpoint_info(file);
  EXPECT_EQ(info.step, 6u);
  EXPECT_EQ(info.batch, 24u);
  EXPECT_EQ(info.world, 2);
  EXPECT_EQ(info.zero, 3);
  EXPECT_EQ(info.config.n_embd, 16u);
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(o.save_dir, 3)));
  // Nothing but the two checkpoints: no temporary file left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(o.save_dir), {}), 2);
}

// Resuming from step 3 writes, at step 6, the uninterrupted run's file
// byte for byte: parameters, optimizer state, step and data position.
TEST(CheckpointTest, AResumedRunContinuesBitIdentically) {
  for (int zero = 0; zero <= 3; ++zero) {
    for (Backend backend : {Backend::Threads, Backend::Procs}) {
      SCOPED_TRACE(::testing::Message() << "zero " << zero << " on " << backend_name(backend));
      const testing::ScratchDir dir("tinyllm-ckpt-resume");
      TrainOptions whole = saving_run(dir, "whole", 3, zero);
      whole.backend = backend;
      train(whole);
      TrainOptions resumed = whole;
      resumed.save_dir = dir / "resumed";
      resumed.resume = checkpoint_path(whole.save_dir, 3);
      const TrainSummary s = train(resumed);
      EXPECT_EQ(s.steps_run, 3u);
      EXPECT_EQ(bytes_of(checkpoint_path(resumed.save_dir, 6)), bytes_of(checkpoint_path(whole.save_dir, 6)));
    }
  }
}

// The lr is a function of the absolute step: resumed in the warmup or in
// the cosine, a run takes the uninterrupted run's lr at every step and
// writes its file byte for byte.
TEST(CheckpointTest, AResumedRunContinuesTheScheduleBitIdentically) {
  for (int zero : {0, 3}) {
    SCOPED_TRACE(::testing::Message() << "zero " << zero);
    const testing::ScratchDir dir("tinyllm-ckpt-schedule");
    TrainOptions whole = saving_run(dir, "whole", 2, zero);
    whole.warmup_steps = 3;
    whole.decay_steps = 10;
    whole.save_every = 2;
    std::vector<double> lrs;
    train(whole, [&](const StepReport& r) { lrs.push_back(r.lr); });
    for (std::size_t from : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << "resumed at step " << from);
      TrainOptions resumed = whole;
      resumed.save_dir = dir / fmt::format("resumed{}", from);
      resumed.resume = checkpoint_path(whole.save_dir, from);
      train(resumed, [&](const StepReport& r) { EXPECT_EQ(r.lr, lrs[r.step]) << "step " << r.step; });
      EXPECT_EQ(bytes_of(checkpoint_path(resumed.save_dir, 6)), bytes_of(checkpoint_path(whole.save_dir, 6)));
    }
  }
}

// A checkpoint written by 4 ranks in stage 3 resumes on 1, 2 or 3 ranks in
// any mode and continues equal to the uninterrupted run to 1e-10.
TEST(CheckpointTest, ResumesAtAnyWorldAndStage) {
  const testing::ScratchDir dir("tinyllm-ckpt-reshard");
  const TrainOptions whole = saving_run(dir, "whole", 4, 3);
  train(whole);
  const std::vector<double> expected = testing::read_all(checkpoint_path(whole.save_dir, 6));
  for (int world = 1; world <= 3; ++world) {
    for (int zero = 0; zero <= 3; ++zero) {
      SCOPED_TRACE(::testing::Message() << "world " << world << ", zero " << zero);
      TrainOptions o = testing::tiny_run(world, zero);
      o.steps = 6;
      o.save_dir = dir / "resumed";
      o.overwrite = true;  // each mode's run replaces the one before
      o.resume = checkpoint_path(whole.save_dir, 3);
      train(o);
      EXPECT_LE(max_diff(testing::read_all(checkpoint_path(o.save_dir, 6)), expected), 1e-10);
    }
  }
}

// A deferred model reads a checkpoint range by range, as stage 3 needs for
// its chunk, and gets the values an eager load gets.
TEST(CheckpointTest, ADeferredModelReadsAnyRangeOfTheCheckpoint) {
  const testing::ScratchDir dir("tinyllm-ckpt-deferred");
  const TrainOptions o = saving_run(dir, "a", 2, 1);
  const SafetensorsFile file = SafetensorsFile::open(train(o).last_checkpoint);
  nn::GPT eager(o.model, 1);
  load_model(file, eager);
  std::unique_ptr<nn::GPT> deferred;
  {
    DeferredInitGuard guard;
    deferred = std::make_unique<nn::GPT>(o.model, 1);
  }
  load_model(file, *deferred);
  const std::vector<Tensor> want = eager.parameters(), got = deferred->parameters();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const std::size_t n = want[i].numel(), begin = n / 3, count = n - begin - n / 5;
    std::vector<double> values(count);
    initial_values(got[i], begin, values);
    const std::span<const double> w = want[i].data().subspan(begin, count);
    EXPECT_TRUE(std::equal(values.begin(), values.end(), w.begin())) << "parameter " << i;
  }
}

TEST(CheckpointTest, GatheringThroughRankZeroWritesTheSameFile) {
  const testing::ScratchDir dir("tinyllm-ckpt-gather");
  TrainOptions shared = saving_run(dir, "shared", 3, 2);
  train(shared);
  TrainOptions gathered = saving_run(dir, "gathered", 3, 2);
  gathered.shared_files = SharedFiles::No;
  train(gathered);
  EXPECT_EQ(bytes_of(checkpoint_path(gathered.save_dir, 6)), bytes_of(checkpoint_path(shared.save_dir, 6)));
}

TEST(CheckpointTest, InitTakesTheWeightsAndStartsAfresh) {
  const testing::ScratchDir dir("tinyllm-ckpt-init");
  train(saving_run(dir, "source", 2, 0));
  const std::string source = checkpoint_path(dir / "source", 3);
  TrainOptions o = testing::tiny_run(2, 1);
  o.init = source;
  o.steps = 1;
  o.adamw.lr = 0;  // AdamW with no step size leaves the weights as they came
  o.save_dir = dir / "init";
  const TrainSummary s = train(o);
  EXPECT_EQ(s.steps_run, 1u);
  const SafetensorsFile started = SafetensorsFile::open(checkpoint_path(o.save_dir, 1));
  EXPECT_EQ(read_checkpoint_info(started).step, 1u);
  const std::size_t n = o.model.num_parameters();
  std::vector<double> theirs(n), ours(n);
  SafetensorsFile::open(source).read(0, theirs);
  started.read(0, ours);
  EXPECT_EQ(ours, theirs);
}

// --steps 0 --save DIR: the weights a run starts from, for a peer to start
// from too (tools/train_in_torch.py), even when ZeRO-3 shards them.
TEST(CheckpointTest, ARunOfNoStepsSavesItsStartingWeights) {
  const testing::ScratchDir dir("tinyllm-ckpt-zero-steps");
  TrainOptions o = testing::tiny_run(2, 3);
  o.steps = 0;
  o.save_dir = dir / "a";
  const TrainSummary s = train(o);
  EXPECT_EQ(s.steps_run, 0u);
  ASSERT_EQ(s.last_checkpoint, checkpoint_path(o.save_dir, 0));
  const SafetensorsFile file = SafetensorsFile::open(s.last_checkpoint);
  EXPECT_EQ(read_checkpoint_info(file).step, 0u);
  std::vector<double> expected;
  for (const Tensor& t : nn::GPT(o.model, o.seed).parameters())
    expected.insert(expected.end(), t.data().begin(), t.data().end());
  const std::vector<double> values = testing::read_all(s.last_checkpoint);
  const std::size_t n = o.model.num_parameters();
  ASSERT_EQ(values.size(), 3 * n);
  EXPECT_EQ(std::vector<double>(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n)), expected);
  EXPECT_TRUE(std::all_of(values.begin() + static_cast<std::ptrdiff_t>(n), values.end(), [](double x) {
    return x == 0;
  })) << "AdamW's moments start at zero";
}

TEST(CheckpointTest, LatestInADirectoryIsFound) {
  const testing::ScratchDir dir("tinyllm-ckpt-latest");
  train(saving_run(dir, "a", 1, 0));
  EXPECT_EQ(find_checkpoint(dir / "a"), checkpoint_path(dir / "a", 6));
  EXPECT_THROW_WITH(find_checkpoint(dir.path().string()), std::invalid_argument,
                    "'" + dir.path().string() + "': the directory holds no step-*.safetensors checkpoint");
}

TEST(CheckpointTest, DiffNamesTheLargestDifferenceOfEachRegion) {
  const testing::ScratchDir dir("tinyllm-ckpt-diff");
  train(saving_run(dir, "a", 2, 1));
  const SafetensorsFile three = SafetensorsFile::open(checkpoint_path(dir / "a", 3));
  const SafetensorsFile six = SafetensorsFile::open(checkpoint_path(dir / "a", 6));
  EXPECT_EQ(checkpoint_diff(six, six), (std::array<double, 3>{0, 0, 0}));
  const std::vector<double> x = testing::read_all(three.path()), y = testing::read_all(six.path());
  const std::size_t n = x.size() / 3;
  std::array<double, 3> expected{};
  for (std::size_t i = 0; i < x.size(); ++i) expected[i / n] = std::max(expected[i / n], std::abs(x[i] - y[i]));
  EXPECT_EQ(checkpoint_diff(three, six), expected);
  EXPECT_GT(expected[0], 0);
  TrainOptions wider = testing::tiny_run(1, 0);
  wider.model.n_embd = 32;
  wider.steps = 1;
  wider.save_dir = dir / "b";
  train(wider);
  EXPECT_THROW_WITH(checkpoint_diff(six, SafetensorsFile::open(checkpoint_path(dir / "b", 1))), std::invalid_argument,
                    "hold different tensors");
}

// A value gone NaN in one checkpoint is a NaN difference in its region,
// which no tolerance passes; the other regions keep their figure.
TEST(CheckpointTest, DiffReportsANanValueAsANanDifference) {
  const testing::ScratchDir dir("tinyllm-ckpt-diff-nan");
  train(saving_run(dir, "a", 1, 0));
  const SafetensorsFile good = SafetensorsFile::open(checkpoint_path(dir / "a", 6));
  std::vector<double> values = testing::read_all(good.path());
  const std::size_t n = values.size() / 3;
  Metadata metadata = good.metadata();
  metadata.erase("checksum");
  for (const double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    for (std::size_t region = 0; region < 3; ++region) {
      SCOPED_TRACE(::testing::Message() << bad << " in region " << region);
      std::vector<double> broken = values;
      broken[region * n + n / 2] = bad;
      write_safetensors(dir / "broken.safetensors", good.tensors(), metadata, broken);
      const auto worst = checkpoint_diff(good, SafetensorsFile::open(dir / "broken.safetensors"));
      for (std::size_t g = 0; g < 3; ++g) EXPECT_TRUE(g == region ? !std::isfinite(worst[g]) : worst[g] == 0) << g;
    }
  }
  // ∞ − ∞ is NaN too: the same infinity on both sides is no difference of 0.
  std::vector<double> infinite = values;
  infinite[n / 2] = std::numeric_limits<double>::infinity();
  write_safetensors(dir / "x.safetensors", good.tensors(), metadata, infinite);
  const SafetensorsFile x = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_TRUE(std::isnan(checkpoint_diff(x, x)[0]));
}

TEST(CheckpointTest, RefusesACorruptTruncatedOrMismatchedCheckpoint) {
  const testing::ScratchDir dir("tinyllm-ckpt-bad");
  train(saving_run(dir, "a", 2, 2));
  const std::string good = checkpoint_path(dir / "a", 3);
  const std::string bytes = bytes_of(good);

  TrainOptions o = testing::tiny_run(2, 2);
  o.steps = 6;
  o.save_dir = dir / "out";
  const auto resume_from = [&](const std::string& contents) {
    const std::string path = dir / "bad.safetensors";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
    o.resume = path;
    train(o);
  };
  std::string flipped = bytes;
  flipped[flipped.size() - 100] ^= 0x10;
  EXPECT_THROW_WITH(resume_from(flipped), std::invalid_argument, "checksum");
  EXPECT_THROW_WITH(resume_from(bytes.substr(0, bytes.size() - 8)), std::invalid_argument, "truncated");
  EXPECT_THROW_WITH(resume_from(bytes.substr(0, 5)), std::invalid_argument, "bad.safetensors");

  o.resume = good;
  o.model.n_embd = 32;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "holds a model of --layers 2 --heads 2 --width 16");
  o = testing::tiny_run(2, 2);
  o.steps = 6;
  o.resume = good;
  o.batch = 12;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "was trained with --batch 24");
  o.batch = 24;
  o.steps = 2;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "is at step 3, past --steps 2");
  EXPECT_FALSE(std::filesystem::exists(dir / "out/step-00000006.safetensors"));
}

// A save killed mid-write leaves its temporary file; the next run saving
// into the directory removes it, and only what has the writer's name.
TEST(CheckpointTest, StaleTemporariesAreRemovedBeforeSaving) {
  const testing::ScratchDir dir("tinyllm-ckpt-stale");
  std::filesystem::create_directories(dir / "a");
  const std::vector<std::string> stale = {"step-00000003.safetensors.0123456789abcdef.tmp"};
  const std::vector<std::string> kept = {"step-00000003.safetensors.0123456789abcdeg.tmp", "notes.0123456789abcdef.tmp",
                                         "step-00000003.safetensors.tmp", "step-00000001.safetensors"};
  for (const auto& names : {stale, kept}) {
    for (const std::string& name : names) std::ofstream(dir / ("a/" + name)) << "x";
  }
  TrainOptions o = saving_run(dir, "a", 1, 0);
  o.steps = 3;
  o.overwrite = true;  // over the planted step-00000001.safetensors
  train(o);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "a")) left.push_back(entry.path().filename());
  std::sort(left.begin(), left.end());
  std::vector<std::string> expected = kept;
  expected.push_back("step-00000003.safetensors");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(left, expected);
}

// Whether the lock file is held now, and by whom: what a second run would
// see (a flock of another open file, even in this process, conflicts).
std::string lock_holder(const std::string& dir) {
  const int fd = ::open((std::filesystem::path(dir) / ".tinyllm.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "no lock file";
  std::string holder = "free";
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    std::array<char, 32> text{};
    holder = "pid " + std::string(text.data(), std::max<ssize_t>(::pread(fd, text.data(), text.size() - 1, 0), 0));
  }
  ::close(fd);
  return holder;
}

// Two runs saving into one directory at once would interleave their
// checkpoints: the second refuses, naming the first's pid, and writes nothing.
TEST(CheckpointTest, ASecondRunRefusesASaveDirectoryInUse) {
  const testing::ScratchDir dir("tinyllm-ckpt-lock");
  TrainOptions o = saving_run(dir, "a", 1, 0);
  std::filesystem::create_directories(o.save_dir);
  const int fd = ::open((dir / "a/.tinyllm.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  ASSERT_EQ(::pwrite(fd, "4242", 4, 0), 4);
  // The holder's save in progress: a temporary that only its own run may remove.
  const std::string saving = dir / "a/step-00000003.safetensors.0123456789abcdef.tmp";
  std::ofstream(saving) << "x";
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    "--save directory '" + o.save_dir + "' is in use by another tinyllm run (pid 4242)");
  ::close(fd);
  EXPECT_TRUE(std::filesystem::exists(saving));
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(o.save_dir, 3)));

  // A run holds the lock, with its pid, from before its first step to its end.
  const std::string self = "pid " + std::to_string(::getpid());
  std::vector<std::string> seen;
  train(o, [&](const StepReport&) { seen.push_back(lock_holder(o.save_dir)); });
  EXPECT_EQ(seen, std::vector<std::string>(o.steps, self));
  EXPECT_EQ(lock_holder(o.save_dir), "no lock file");

  // Under procs the parent holds it, and the forked ranks save as before.
  o = saving_run(dir, "procs", 2, 1);
  o.backend = Backend::Procs;
  train(o);
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(o.save_dir, 6)));
  EXPECT_EQ(lock_holder(o.save_dir), "no lock file");
}

// A new run would replace another run's checkpoints one by one, and
// --resume DIR would then take whichever was written last.
TEST(CheckpointTest, RefusesAnotherRunsCheckpointsUnlessResumingOrOverwriting) {
  const testing::ScratchDir dir("tinyllm-ckpt-other");
  TrainOptions o = saving_run(dir, "a", 1, 0);
  train(o);
  const std::string last = bytes_of(checkpoint_path(o.save_dir, 6));
  o.seed = 7;
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    "--save directory '" + o.save_dir +
                        "' already holds checkpoints of another run (step-00000006.safetensors); pass --resume " +
                        o.save_dir + " to continue it, or --overwrite to replace them");
  EXPECT_EQ(bytes_of(checkpoint_path(o.save_dir, 6)), last);

  o = saving_run(dir, "a", 1, 0);
  o.resume = checkpoint_path(o.save_dir, 3);  // a file in the directory
  train(o);
  EXPECT_EQ(bytes_of(checkpoint_path(o.save_dir, 6)), last);
  o.resume = o.save_dir;
  o.steps = 9;
  train(o);
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(o.save_dir, 9)));

  o = saving_run(dir, "a", 1, 0);
  o.seed = 7;
  o.overwrite = true;
  train(o);
  EXPECT_NE(bytes_of(checkpoint_path(o.save_dir, 6)), last);
}

// A --save directory the user may not write: refused before any step,
// naming it, and the checkpoint already there stays as it was. Root may
// write anyway, so the test needs another user.
TEST(CheckpointTest, RefusesAReadOnlySaveDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a read-only directory";
  const testing::ScratchDir dir("tinyllm-ckpt-readonly");
  TrainOptions o = saving_run(dir, "a", 1, 0);
  train(o);
  const std::string last = bytes_of(checkpoint_path(o.save_dir, 6));
  std::filesystem::permissions(o.save_dir, std::filesystem::perms::owner_write, std::filesystem::perm_options::remove);
  o.resume = o.save_dir;
  o.steps = 9;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "--save directory '" + o.save_dir + "' is not writable");
  std::filesystem::permissions(o.save_dir, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
  EXPECT_EQ(bytes_of(checkpoint_path(o.save_dir, 6)), last);
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(o.save_dir, 9)));
}

// A --save path through a regular file: no user can make it a directory.
TEST(CheckpointTest, RefusesASaveDirectoryUnderARegularFile) {
  const testing::ScratchDir dir("tinyllm-ckpt-under-file");
  std::ofstream(dir / "file") << "x";
  TrainOptions o = saving_run(dir, "file/ckpt", 1, 0);
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    "--save directory '" + o.save_dir + "' is not writable (Not a directory)");
  EXPECT_EQ(bytes_of(dir / "file"), "x");
}

// Metadata whose sizes disagree with the tensors, under a valid checksum
// (written by the writer): refused before a model of those sizes is built,
// which for n_embd 100000 or n_layer 10^8 would take gigabytes, and for
// n_embd 2^64 − 1 overflow.
TEST(CheckpointTest, RefusesSizesTheTensorsDoNotHave) {
  const testing::ScratchDir dir("tinyllm-ckpt-sizes");
  train(saving_run(dir, "a", 1, 0));
  const SafetensorsFile good = SafetensorsFile::open(checkpoint_path(dir / "a", 3));
  const std::vector<double> values = testing::read_all(good.path());
  const std::string path = dir / "edited.safetensors";
  const auto edited = [&](const Metadata& changes) {
    Metadata metadata = good.metadata();
    metadata.erase("checksum");
    for (const auto& [key, value] : changes) metadata[key] = value;
    write_safetensors(path, good.tensors(), metadata, values);
    return SafetensorsFile::open(path);
  };
  const std::string huge = std::to_string(std::numeric_limits<std::uint64_t>::max());
  EXPECT_THROW_WITH(read_checkpoint_info(edited({{"n_embd", "100000"}})), std::invalid_argument,
                    "metadata 'n_embd' is 100000, more than the");
  EXPECT_THROW_WITH(load_gpt(edited({{"n_embd", "100000"}})), std::invalid_argument, "metadata 'n_embd' is 100000");
  EXPECT_THROW_WITH(read_checkpoint_info(edited({{"n_embd", huge}, {"n_head", "1"}})), std::invalid_argument,
                    "metadata 'n_embd' is " + huge);
  EXPECT_THROW_WITH(read_checkpoint_info(edited({{"n_layer", "100000000"}})), std::invalid_argument,
                    "holds 84 tensors, but its metadata's n_layer 100000000 needs 3 × (4 + 12 × 100000000)");
  EXPECT_THROW_WITH(read_checkpoint_info(edited({{"n_embd", "32"}})), std::invalid_argument,
                    "its tensor 0 ('wte.weight') has shape [256, 16], but its metadata's sizes (n_embd 32");
  EXPECT_THROW_WITH(read_checkpoint_info(edited({{"vocab_size", "255"}})), std::invalid_argument, "give [255, 16]");
  EXPECT_NO_THROW(read_checkpoint_info(edited({})));
  TrainOptions o = testing::tiny_run(1, 0);
  o.steps = 6;
  o.resume = path;
  edited({{"n_layer", "100000000"}});
  o.model.n_layer = 100000000;
  EXPECT_THROW_WITH(train(o), std::invalid_argument, "n_layer 100000000 needs");
}

// The warning the run's start carries (RunInfo::warning).
struct WarningObserver final : TrainObserver {
  void on_start(const RunInfo& info) override { warning = info.warning; }
  std::string warning = "none seen";
};

std::string fnv1a_hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

// A resumed run continues the data order on its own corpus: another file,
// or another --val-fraction's cut of the same one, is refused naming both
// fingerprints, and nothing is written, unless --allow-other-data.
TEST(CheckpointTest, RefusesToResumeOnAnotherCorpusUnlessAllowed) {
  const testing::ScratchDir dir("tinyllm-ckpt-fingerprint");
  train(saving_run(dir, "a", 1, 0));
  const std::string from = checkpoint_path(dir / "a", 3);
  const Corpus gpl = Corpus::load(kDefaultCorpus);
  const SafetensorsFile file = SafetensorsFile::open(from);
  EXPECT_EQ(file.metadata().at("data_tokens"), std::to_string(gpl.size()));
  EXPECT_EQ(file.metadata().at("data_fnv1a"), fnv1a_hex(gpl.fnv1a()));
  EXPECT_EQ(file.metadata().at("val_fraction"), "0");
  const std::string trained_on = fmt::format(
      "checkpoint '{}' was trained on {} tokens with FNV-1a {} (the training part "
      "at --val-fraction 0), but --data '",
      from, gpl.size(), fnv1a_hex(gpl.fnv1a()));
  const std::string hint =
      "; pass --data with the run's corpus (and its --val-fraction), or --allow-other-data to continue on it";

  const std::string other = dir / "other.txt";
  std::ofstream(other) << bytes_of(kDefaultCorpus).substr(0, 1000);
  TrainOptions o = saving_run(dir, "b", 1, 0);
  o.resume = from;
  o.data = other;
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    fmt::format("{}{}' at --val-fraction 0 gives 1000 tokens with FNV-1a {}{}", trained_on, other,
                                fnv1a_hex(Corpus::load(other).fnv1a()), hint));
  // The same file cut at another fraction trains on other tokens too.
  o.data = kDefaultCorpus;
  o.val_fraction = 0.25;
  const Corpus cut = gpl.split(0.25, o.model.block_size).first;
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    fmt::format("{}{}' at --val-fraction 0.25 gives {} tokens with FNV-1a {}{}", trained_on,
                                kDefaultCorpus, cut.size(), fnv1a_hex(cut.fnv1a()), hint));
  EXPECT_FALSE(std::filesystem::exists(o.save_dir));

  // Allowed: a warning, and the run's checkpoints record the corpus it now trains on.
  o.data = other;
  o.val_fraction = 0;
  o.allow_other_data = true;
  WarningObserver observer;
  EXPECT_EQ(train(o, observer).steps_run, 3u);
  EXPECT_NE(observer.warning.find(trained_on + other + "' at --val-fraction 0 gives 1000 tokens"), std::string::npos)
      << observer.warning;
  EXPECT_TRUE(observer.warning.ends_with("; continuing on it (--allow-other-data)")) << observer.warning;
  EXPECT_EQ(read_checkpoint_info(SafetensorsFile::open(checkpoint_path(o.save_dir, 6))).data->tokens, 1000u);

  // The run's own corpus: no warning.
  o = saving_run(dir, "c", 1, 0);
  o.resume = from;
  train(o, observer);
  EXPECT_EQ(observer.warning, "");
}

// A checkpoint of a tinyllm before the fingerprint cannot be checked:
// refused, naming what is missing and the flag that accepts it.
TEST(CheckpointTest, AResumeFromACheckpointWithoutAFingerprintNeedsAllowOtherData) {
  const testing::ScratchDir dir("tinyllm-ckpt-no-fingerprint");
  train(saving_run(dir, "a", 1, 0));
  const SafetensorsFile good = SafetensorsFile::open(checkpoint_path(dir / "a", 3));
  Metadata metadata = good.metadata();
  for (const char* key : {"checksum", "data_tokens", "data_fnv1a", "val_fraction"}) metadata.erase(key);
  const std::string old = dir / "old.safetensors";
  write_safetensors(old, good.tensors(), metadata, testing::read_all(good.path()));
  EXPECT_FALSE(read_checkpoint_info(SafetensorsFile::open(old)).data);

  TrainOptions o = saving_run(dir, "b", 1, 0);
  o.resume = old;
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    "checkpoint '" + old +
                        "' holds no fingerprint of the corpus it was trained on (no data_tokens, data_fnv1a: an older "
                        "tinyllm wrote it), so --data '" +
                        kDefaultCorpus + "' at --val-fraction 0 gives ");
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    "cannot be checked against it; pass --allow-other-data to continue on it");
  EXPECT_FALSE(std::filesystem::exists(o.save_dir));
  o.allow_other_data = true;
  WarningObserver observer;
  train(o, observer);
  EXPECT_TRUE(observer.warning.ends_with("; continuing on it (--allow-other-data)")) << observer.warning;
  // It resumed: its step 6 is the uninterrupted run's, but for the fingerprint it now records.
  EXPECT_EQ(testing::read_all(checkpoint_path(o.save_dir, 6)), testing::read_all(checkpoint_path(dir / "a", 6)));

  // One key of the fingerprint without the others is a damaged header, not an old one.
  metadata["data_tokens"] = "12";
  write_safetensors(old, good.tensors(), metadata, testing::read_all(good.path()));
  EXPECT_THROW_WITH(read_checkpoint_info(SafetensorsFile::open(old)), std::invalid_argument, "lacks 'data_fnv1a'");
  metadata["data_fnv1a"] = "xyz";
  write_safetensors(old, good.tensors(), metadata, testing::read_all(good.path()));
  EXPECT_THROW_WITH(read_checkpoint_info(SafetensorsFile::open(old)), std::invalid_argument,
                    "metadata 'data_fnv1a' must be a whole number in hex (got 'xyz')");
}

// A directory holding only best.safetensors (a run stopped before its
// first step file, or one whose step files were removed): another run's
// checkpoint to a new run, and no step to resume from the directory, each
// message naming the file that does continue it.
TEST(CheckpointTest, ADirectoryOfOnlyTheBestStepNamesIt) {
  const testing::ScratchDir dir("tinyllm-ckpt-only-best");
  train(saving_run(dir, "a", 1, 0));
  TrainOptions o = saving_run(dir, "b", 1, 0);
  std::filesystem::create_directories(o.save_dir);
  const std::string best = dir / "b/best.safetensors";
  std::filesystem::copy_file(checkpoint_path(dir / "a", 3), best);
  EXPECT_THROW_WITH(train(o), std::invalid_argument,
                    "--save directory '" + o.save_dir +
                        "' already holds checkpoints of another run (best.safetensors); pass --resume " + best +
                        " to continue it, or --overwrite to replace them");
  o.resume = o.save_dir;
  EXPECT_THROW_WITH(
      train(o), std::invalid_argument,
      "--resume " + o.save_dir +
          ": the directory holds no step-*.safetensors checkpoint (only best.safetensors, the step of the "
          "lowest validation loss; pass --resume " +
          best + " to start from it)");
  EXPECT_THROW_WITH(find_checkpoint(o.save_dir), std::invalid_argument,
                    "'" + o.save_dir +
                        "': the directory holds no step-*.safetensors checkpoint (only best.safetensors, "
                        "the step of the lowest validation loss; name " +
                        best + " to start from it)");
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(o.save_dir, 6)));
  o.resume = best;
  EXPECT_EQ(train(o).steps_run, 3u);
  EXPECT_EQ(bytes_of(checkpoint_path(o.save_dir, 6)), bytes_of(checkpoint_path(dir / "a", 6)));
}

}  // namespace
}  // namespace tinyllm::train

namespace tinyllm::train {
namespace {

// Turns one value of a rank's own chunk into inf after a step: the first
// of its piece of one region (the parameters, or AdamW's exp_avg), as an
// update that overflows would, and remembers the tensor it lies in.
class Poison final : public TrainObserver {
 public:
  Poison(std::size_t step, int rank, Region region) : step_(step), rank_(rank), region_(region) {}

  void after_step(dist::Comm& comm, Replica& replica, std::size_t step, double /*loss*/) override {
    if (step != step_ || comm.rank() != rank_) return;
    const std::size_t begin = static_cast<std::size_t>(region_) * replica.num_parameters();
    for (const Piece& piece : replica.pieces()) {
      if (piece.offset < begin || piece.values.empty()) continue;
      const_cast<double&>(piece.values[0]) = std::numeric_limits<double>::infinity();
      std::size_t offset = piece.offset;
      for (const TensorInfo& t : checkpoint_tensors(replica.model())) {
        if (offset < t.numel()) {
          tensor = t.name;
          break;
        }
        offset -= t.numel();
      }
      return;
    }
  }
  void on_checkpoint(const std::string& path, std::size_t /*step*/) override {
    saved.push_back(path);
    saved_bytes.push_back(bytes_of(path));
  }

  std::string tensor;
  std::vector<std::string> saved, saved_bytes;  // the paths and their bytes as written

 private:
  std::size_t step_;
  int rank_;
  Region region_;
};

// One process, and ZeRO-3 on two ranks with only rank 1's chunk of exp_avg
// poisoned: every rank refuses step 2's checkpoint, and step 1's stays as
// it was.
TEST(CheckpointTest, AStateThatIsNotFiniteIsNeverSaved) {
  const struct {
    int world, zero, rank;
    Region region;
  } cases[] = {{1, 0, 0, Region::Params}, {2, 3, 1, Region::ExpAvg}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "world " << c.world << ", zero " << c.zero);
    const testing::ScratchDir dir("tinyllm-ckpt-finite");
    TrainOptions o = testing::tiny_run(c.world, c.zero);
    o.steps = 3;
    o.save_dir = dir / "run";
    o.save_every = 1;
    const std::string first = checkpoint_path(o.save_dir, 1);
    Poison poison(1, c.rank, c.region);
    try {
      train(o, poison);
      ADD_FAILURE() << "the run saved a state holding inf";
    } catch (const std::runtime_error& e) {
      // Every rank refuses; launch names the one whose failure came first.
      const std::string what = e.what();
      EXPECT_TRUE(what.starts_with("rank ")) << what;
      EXPECT_EQ(what.substr(what.find(": ") + 2),
                fmt::format("step 2's parameters and AdamW state hold 1 value that is not finite (the first in '{}'): "
                            "checkpoint '{}' was not written; the last written is '{}'",
                            poison.tensor, checkpoint_path(o.save_dir, 2), first));
    }
    ASSERT_EQ(poison.saved, std::vector<std::string>{first});
    EXPECT_EQ(bytes_of(first), poison.saved_bytes[0]);
    EXPECT_FALSE(std::filesystem::exists(checkpoint_path(o.save_dir, 2)));
    EXPECT_EQ(find_checkpoint(o.save_dir), first);
    EXPECT_TRUE(c.region == Region::Params ? poison.tensor == "wte.weight" : poison.tensor.ends_with(".exp_avg"))
        << poison.tensor;
  }
}

}  // namespace
}  // namespace tinyllm::train
