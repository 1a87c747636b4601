// CausalSelfAttention, GPT-2's: c_attn maps x to q, k and v (the three
// C-wide slices of its output, in that order), causal_attention mixes them
// over n_head heads, c_proj maps the merged heads back to C.
#pragma once

#include <memory>

#include "tinyllm/nn/linear.h"

namespace tinyllm::nn {

class CausalSelfAttention : public Module {
 public:
  // c_proj's weights start as N(0, proj_std): GPT-2 scales the projections
  // that feed the residual stream by 1/√(2L).
  CausalSelfAttention(std::size_t n_embd, std::size_t n_head, double proj_std, Generator& gen);
  Tensor forward(const Tensor& x) const;  // [B, T, C] -> [B, T, C]

  std::shared_ptr<Linear> c_attn;  // C -> 3C
  std::shared_ptr<Linear> c_proj;  // C -> C
  std::size_t n_head;
};

}  // namespace tinyllm::nn
