// Block, GPT-2's pre-norm transformer layer:
// x += attn(ln_1(x)); x += mlp(ln_2(x)).
#pragma once

#include <memory>

#include "tinyllm/nn/attention.h"
#include "tinyllm/nn/layer_norm.h"
#include "tinyllm/nn/mlp.h"

namespace tinyllm::nn {

class Block : public Module {
 public:
  Block(std::size_t n_embd, std::size_t n_head, double proj_std, Generator& gen);
  Tensor forward(const Tensor& x) const;  // [B, T, C] -> [B, T, C]

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

}  // namespace tinyllm::nn
