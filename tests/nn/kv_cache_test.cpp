#include <gtest/gtest.h>
#include <tinyllm/nn/kv_cache.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "support/expect_throw.h"

namespace tinyllm::nn {
namespace {

const GPTConfig kSmall{.vocab_size = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};

// Each token's logits from the cache against the last row of GPT::forward
// on the whole prefix, at every position up to block_size.
TEST(KVCacheTest, GivesTheLogitsOfTheWholeContextsForward) {
  const GPT model(kSmall, 9);
  const std::vector<int> tokens{3, 14, 1, 5, 9, 2, 6, 5};
  KVCache cache(model);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<double> cached = cache.forward(tokens[t]);
    EXPECT_EQ(cache.size(), t + 1);
    const std::vector<double> whole = model.forward(std::span(tokens).first(t + 1), 1, t + 1).to_vector();
    ASSERT_EQ(cached.size(), 16u);
    double worst = 0;
    for (std::size_t v = 0; v < 16; ++v) worst = std::max(worst, std::abs(cached[v] - whole[t * 16 + v]));
    EXPECT_LT(worst, 1e-12) << "position " << t;
  }
}

TEST(KVCacheTest, RefusesATokenPastBlockSize) {
  const GPT model(kSmall);
  KVCache cache(model);
  for (int t = 0; t < 8; ++t) cache.forward(t);
  EXPECT_THROW_WITH(cache.forward(0), std::invalid_argument,
                    "KVCache: the cache is full at the model's block_size of 8 tokens");
}

// Past block_size as well, where generate falls back to whole contexts.
TEST(KVCacheTest, GenerateDrawsTheSameTokensWithAndWithoutIt) {
  const GPT model(kSmall, 4);
  const std::vector<int> prompt{1, 2};
  for (std::size_t top_k : {1u, 3u, 16u}) {
    Generator a(21), b(21);
    EXPECT_EQ(model.generate(prompt, {.max_new_tokens = 20, .top_k = top_k, .use_cache = true}, a),
              model.generate(prompt, {.max_new_tokens = 20, .top_k = top_k, .use_cache = false}, b))
        << "top_k " << top_k;
  }
}

}  // namespace
}  // namespace tinyllm::nn
