// KVCache: every block's keys and values for the tokens a sequence has so
// far, so that one more token runs the model on that token alone, its query
// attending over the cached keys, instead of on the whole context again
// (Pope et al., "Efficiently Scaling Transformer Inference", 2022). The same
// logits as GPT::forward on the whole context, up to rounding. It holds
// positions 0..block_size-1 only: once a context slides, every token's
// position changes and so does every key.
#pragma once

#include <vector>

#include "tinyllm/nn/gpt.h"

namespace tinyllm::nn {

class KVCache {
 public:
  explicit KVCache(const GPT& model);

  // Appends `token` at position size() and returns the next token's logits
  // [V], under no-grad. std::invalid_argument once block_size tokens are held.
  std::vector<double> forward(int token);
  std::size_t size() const { return size_; }

 private:
  const GPT& model_;
  std::size_t size_ = 0;
  std::vector<std::vector<double>> k_, v_;  // per block: [size(), C], row-major
};

}  // namespace tinyllm::nn
