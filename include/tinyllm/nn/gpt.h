// GPT: GPT-2's architecture at a small size, nanoGPT's layout and names so a
// state dict maps one to one. Byte-level tokens; the output head is tied to
// wte (logits = x · wteᵀ, no bias). Parameters, in order: wte, wpe, h.{i}.*,
// ln_f (docs/DESIGN.md section 3 lists them). Weights start as N(0, 0.02), the c_proj
// weights as N(0, 0.02/√(2L)), biases at 0, LayerNorms at (1, 0), drawn in
// that order from one generator seeded by `seed`.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "tinyllm/nn/block.h"
#include "tinyllm/nn/embedding.h"
#include "tinyllm/nn/layer_norm.h"
#include "tinyllm/nn/module.h"
#include "tinyllm/tensor/random.h"

namespace tinyllm::nn {

struct GPTConfig {
  std::size_t vocab_size = 256;  // V
  std::size_t block_size = 64;   // T, the longest context
  std::size_t n_layer = 4;       // L
  std::size_t n_head = 4;        // H
  std::size_t n_embd = 128;      // C

  // std::invalid_argument naming the value: a size of 0, or heads not dividing the width.
  void check() const;
  // Every parameter's shape, in parameters() order (docs/DESIGN.md section 3), and
  // their elements in all: V·C + T·C + L·(12C² + 13C) + 2C.
  std::vector<Shape> parameter_shapes() const;
  std::size_t num_parameters() const;
  // One block's parameters: 12C² + 13C (its kTensorsPerBlock tensors).
  std::size_t block_parameters() const { return 12 * n_embd * n_embd + 13 * n_embd; }
  // nanoGPT's estimate of a training step's floating-point operations per
  // token (forward and backward, PaLM's appendix B): 6 per parameter but
  // wpe's, which are only looked up, plus attention's 12·L·C·T.
  double flops_per_token() const;
  static constexpr std::size_t kTensorsPerBlock = 12;
};

// nanoGPT's generate() settings.
struct GenerateOptions {
  std::size_t max_new_tokens = 200;
  double temperature = 1.0;  // > 0 and finite: below 1 sharpens the distribution, above 1 flattens it
  // Sample among the top_k most likely tokens (1: greedy); >= 1, and any
  // value from the vocabulary size up keeps every token.
  std::size_t top_k = std::numeric_limits<std::size_t>::max();
  // While the context fits in block_size, run each new token alone against
  // the keys and values kept in a KVCache (nn/kv_cache.h); the same tokens
  // as without, but for rounding.
  bool use_cache = true;

  // std::invalid_argument naming the value: a temperature that is not
  // positive and finite, or a top_k of 0.
  void check() const;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config, std::uint64_t seed = 1337);

  // idx holds batch·seq token ids, row-major [B, T], T <= block_size.
  Tensor forward(std::span<const int> idx, std::size_t batch, std::size_t seq) const;  // logits [B, T, V]
  // Mean cross-entropy over all B·T positions.
  Tensor loss(std::span<const int> idx, std::span<const int> targets, std::size_t batch, std::size_t seq) const;

  // nanoGPT's generate (src/nn/generate.cpp): idx followed by
  // max_new_tokens tokens, each drawn from the last position's logits on
  // the context cropped to its last block_size tokens, under no-grad.
  // std::invalid_argument for an empty idx or a bad temperature or top_k.
  // on_token, where given, sees each new token as it is drawn (a caller
  // that streams the text).
  std::vector<int> generate(std::span<const int> idx, const GenerateOptions& options, Generator& gen,
                            const std::function<void(int)>& on_token = {}) const;

  const GPTConfig& config() const { return config_; }

  std::shared_ptr<Embedding> wte;
  std::shared_ptr<Embedding> wpe;
  std::shared_ptr<ModuleList> h;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  GPTConfig config_;
};

}  // namespace tinyllm::nn
