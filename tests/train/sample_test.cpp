#include <gtest/gtest.h>
#include <tinyllm/train/checkpoint.h>

#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "support/expect_throw.h"
#include "train_testing.h"

namespace tinyllm::train {
namespace {

const std::string kPhrase = "tinyllm samples! ";  // no 8 bytes twice, so 8 bytes of context fix the next one

std::vector<int> bytes(const std::string& text) { return {text.begin(), text.end()}; }

// The same run on one process and on two ranks at ZeRO-3, trained on the
// phrase over and over until it has learnt it, and saved.
class LoadGptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScratchDir("tinyllm-sample");
    std::ofstream corpus(*dir_ / "corpus.txt", std::ios::binary);
    for (int i = 0; i < 100; ++i) corpus << kPhrase;
    corpus.close();
    for (const auto& [name, world, zero] : {std::tuple{"one", 1, 0}, std::tuple{"zero3", 2, 3}}) {
      TrainOptions o = testing::tiny_run(world, zero);
      o.data = *dir_ / "corpus.txt";
      o.steps = 150;
      o.save_dir = *dir_ / name;
      train(o);
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::unique_ptr<nn::GPT> load(const std::string& name) {
    return load_gpt(SafetensorsFile::open(find_checkpoint(*dir_ / name)));
  }

  static testing::ScratchDir* dir_;
};

testing::ScratchDir* LoadGptTest::dir_ = nullptr;

std::vector<int> generate(const nn::GPT& model, const std::vector<int>& prompt, const nn::GenerateOptions& options,
                          std::uint64_t seed = 1) {
  Generator gen(seed);
  return model.generate(prompt, options, gen);
}

TEST_F(LoadGptTest, BuildsTheCheckpointsModel) {
  const std::unique_ptr<nn::GPT> model = load("zero3");
  EXPECT_EQ(model->config().block_size, 8u);
  EXPECT_EQ(model->config().n_embd, 16u);
  const SafetensorsFile file = SafetensorsFile::open(find_checkpoint(*dir_ / "zero3"));
  std::vector<double> wte(256 * 16);
  file.read(0, wte);
  EXPECT_EQ(model->wte->weight.to_vector(), wte);
}

TEST_F(LoadGptTest, AModelTrainedOnARepeatedPhraseContinuesItGreedily) {
  const std::unique_ptr<nn::GPT> model = load("one");
  const std::string expected = kPhrase + kPhrase + kPhrase;
  const std::vector<int> out = generate(*model, bytes("tinyllm "), {.max_new_tokens = expected.size() - 8, .top_k = 1});
  EXPECT_EQ(std::string(out.begin(), out.end()), expected);
}

// The two runs agree to rounding, not bit for bit, so a draw could differ
// only where the uniform falls within ~1e-10 of a boundary of the CDF.
TEST_F(LoadGptTest, CheckpointsOfOneProcessAndZero3OnTwoRanksSampleTheSameTokens) {
  const std::unique_ptr<nn::GPT> one = load("one");
  const std::unique_ptr<nn::GPT> zero3 = load("zero3");
  for (const nn::GenerateOptions& options : {nn::GenerateOptions{.max_new_tokens = 40, .top_k = 1},
                                             nn::GenerateOptions{.max_new_tokens = 40, .temperature = 2.0}}) {
    EXPECT_EQ(generate(*zero3, bytes("\n"), options, 5), generate(*one, bytes("\n"), options, 5));
  }
}

TEST(LoadGptErrorTest, RefusesAFileThatIsNotAModelCheckpoint) {
  const testing::ScratchDir dir("tinyllm-sample-refuse");
  const std::string plain = dir / "plain.safetensors";
  write_safetensors(plain, {{"x", {2}}}, {}, std::vector<double>{1, 2});
  EXPECT_THROW_WITH(load_gpt(SafetensorsFile::open(plain)), std::invalid_argument,
                    "'" + plain + "' is a safetensors file but not a tinyllm checkpoint");

  const std::string other = dir / "other.safetensors";
  const Metadata metadata = {{"format", "tinyllm-checkpoint-1"},
                             {"vocab_size", "256"},
                             {"block_size", "8"},
                             {"n_layer", "1"},
                             {"n_head", "1"},
                             {"n_embd", "4"},
                             {"step", "0"},
                             {"batch", "1"},
                             {"seed", "0"},
                             {"world", "1"},
                             {"zero", "0"}};
  write_safetensors(other, {{"x", {2}}}, metadata, std::vector<double>{1, 2});
  // Refused by its tensors' count, before a model of its sizes is built.
  EXPECT_THROW_WITH(load_gpt(SafetensorsFile::open(other)), std::invalid_argument,
                    "checkpoint '" + other + "' holds 1 tensors, but its metadata's n_layer 1 needs 3 × (4 + 12 × 1)");
}

}  // namespace
}  // namespace tinyllm::train
