#include <gtest/gtest.h>
#include <tinyllm/train/data.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "support/expect_throw.h"
#include "train_testing.h"

namespace tinyllm::train {
namespace {

Corpus counting(std::size_t n) {
  std::vector<int> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return Corpus(tokens);
}

// FNV-1a 64 of the bytes "a" and "foobar": the published test vectors.
TEST(CorpusTest, Fnv1aIsOfTheTokensAsBytes) {
  EXPECT_EQ(Corpus({'a'}).fnv1a(), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Corpus({'f', 'o', 'o', 'b', 'a', 'r'}).fnv1a(), 0x85944171f73967e8ull);
  EXPECT_NE(Corpus({'a', 'b'}).fnv1a(), Corpus({'b', 'a'}).fnv1a());
}

TEST(CorpusTest, WindowsFollowTheDesignOrder) {
  // N = 11, T = 3: W = 3 windows starting at 0, 3, 6.
  Corpus corpus = counting(11);
  EXPECT_EQ(corpus.num_windows(3), 3u);
  // Step 1 with B = 2 uses windows (2, 3 mod 3) = (2, 0).
  Batch b = corpus.batch(1, 2, 3);
  EXPECT_EQ(b.batch, 2u);
  EXPECT_EQ(b.inputs, (std::vector<int>{6, 7, 8, 0, 1, 2}));
  EXPECT_EQ(b.targets, (std::vector<int>{7, 8, 9, 1, 2, 3}));
}

TEST(CorpusTest, RanksTakeConsecutiveRowsOfTheGlobalBatch) {
  Corpus corpus = counting(101);
  const Batch global = corpus.batch(5, 4, 4);
  std::vector<int> joined;
  for (int r = 0; r < 2; ++r) {
    Batch part = corpus.batch(5, 4, 4, r, 2);
    EXPECT_EQ(part.batch, 2u);
    joined.insert(joined.end(), part.inputs.begin(), part.inputs.end());
  }
  EXPECT_EQ(joined, global.inputs);
}

TEST(CorpusTest, SplitKeepsTheFirstPartForTrainingAndTheRestForValidation) {
  // N = 20, F = 0.25: ⌊0.75·20⌋ = 15 training tokens, 5 for validation.
  const auto [train, val] = counting(20).split(0.25, 3);
  EXPECT_EQ(train.size(), 15u);
  EXPECT_EQ(val.size(), 5u);
  // The training part's order is docs/DESIGN.md's (section 4) on its own 15 tokens: W = 4.
  EXPECT_EQ(train.num_windows(3), 4u);
  EXPECT_EQ(train.batch(1, 3, 3).inputs, (std::vector<int>{9, 10, 11, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(val.windows(0, 1, 3).inputs, (std::vector<int>{15, 16, 17}));
  EXPECT_EQ(val.windows(0, 1, 3).targets, (std::vector<int>{16, 17, 18}));
  const auto [whole, none] = counting(20).split(0, 3);
  EXPECT_EQ(whole.size(), 20u);
  EXPECT_EQ(none.size(), 0u);
}

TEST(CorpusTest, WindowsAreConsecutiveAndBounded) {
  const Batch b = counting(11).windows(1, 2, 3);
  EXPECT_EQ(b.batch, 2u);
  EXPECT_EQ(b.inputs, (std::vector<int>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(b.targets, (std::vector<int>{4, 5, 6, 7, 8, 9}));
  EXPECT_THROW_WITH(counting(11).windows(2, 2, 3), std::invalid_argument, "has 3 windows of 3 + 1 tokens, not [2, 4)");
}

TEST(CorpusTest, SplitRejectsAFractionOutOfRangeOrAPartTooShort) {
  for (double bad : {-0.1, 1.0, std::nan("")}) {
    EXPECT_THROW_WITH(counting(20).split(bad, 3), std::invalid_argument, "--val-fraction must be in [0, 1)");
  }
  EXPECT_THROW_WITH(counting(20).split(0.875, 3), std::invalid_argument,
                    "--val-fraction 0.875 leaves 2 training tokens of corpus, too few for one window of 3 + 1 tokens");
  EXPECT_THROW_WITH(counting(20).split(0.1, 3), std::invalid_argument, "leaves 2 validation tokens");
}

TEST(CorpusTest, LoadsBytesAsTokens) {
  const testing::ScratchDir dir("tinyllm-corpus-test");
  const std::string path = dir / "corpus.txt";
  std::ofstream(path, std::ios::binary) << "ab\xff";
  Corpus corpus = Corpus::load(path);
  EXPECT_EQ(corpus.size(), 3u);
  EXPECT_EQ(corpus.batch(0, 1, 2).inputs, (std::vector<int>{'a', 'b'}));
  EXPECT_EQ(corpus.batch(0, 1, 2).targets, (std::vector<int>{'b', 255}));
}

TEST(CorpusTest, RejectsBadInput) {
  EXPECT_THROW_WITH(Corpus::load("/nonexistent/tinyllm.txt"), std::invalid_argument, "cannot be opened");
  const testing::ScratchDir dir("tinyllm-corpus-empty");
  const std::string empty = dir / "empty.txt";
  std::ofstream(empty).close();
  EXPECT_THROW_WITH(Corpus::load(empty), std::invalid_argument, "is empty");
  EXPECT_THROW_WITH(counting(4).batch(0, 1, 4), std::invalid_argument, "4 tokens, too few for one window of 4 + 1");
  EXPECT_THROW_WITH(counting(50).batch(0, 10, 4, 0, 4), std::invalid_argument,
                    "batch of 10 rows does not divide by world size 4");
  EXPECT_THROW_WITH(counting(50).batch(0, 4, 4, 4, 4), std::invalid_argument, "rank 4 is not in a world of 4");
}

}  // namespace
}  // namespace tinyllm::train
