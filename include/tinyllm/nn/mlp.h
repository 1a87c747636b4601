// MLP, GPT-2's feed-forward: c_fc to 4C, GELU (tanh form), c_proj back to C.
#pragma once

#include <memory>

#include "tinyllm/nn/linear.h"

namespace tinyllm::nn {

class MLP : public Module {
 public:
  MLP(std::size_t n_embd, double proj_std, Generator& gen);
  Tensor forward(const Tensor& x) const;  // [..., C] -> [..., C]

  std::shared_ptr<Linear> c_fc;    // C -> 4C
  std::shared_ptr<Linear> c_proj;  // 4C -> C
};

}  // namespace tinyllm::nn
