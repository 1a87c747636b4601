// LayerNorm over the last dim (torch.nn.LayerNorm(C)): biased variance,
// eps 1e-5, weight starting at 1 and bias at 0.
#pragma once

#include "tinyllm/nn/module.h"

namespace tinyllm::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::size_t normalized_size, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;  // [..., C] -> [..., C]

  Tensor weight;  // [C]
  Tensor bias;    // [C]
  double eps;
};

}  // namespace tinyllm::nn
