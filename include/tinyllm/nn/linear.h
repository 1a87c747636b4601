// Linear: y = x · weightᵀ + bias, torch.nn.Linear's layout (weight [out, in]).
// Weights start as N(0, std) from the caller's generator, biases at zero:
// GPT-2's initialisation, not torch's default (Kaiming uniform).
#pragma once

#include "tinyllm/nn/module.h"
#include "tinyllm/tensor/random.h"

namespace tinyllm::nn {

class Linear : public Module {
 public:
  Linear(std::size_t in_features, std::size_t out_features, Generator& gen, bool bias = true, double std = 0.02);
  Tensor forward(const Tensor& x) const;  // [..., in] -> [..., out]

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], undefined without bias
};

}  // namespace tinyllm::nn
