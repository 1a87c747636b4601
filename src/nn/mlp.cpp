#include "tinyllm/nn/mlp.h"

#include "tinyllm/tensor/ops.h"

namespace tinyllm::nn {

MLP::MLP(std::size_t n_embd, double proj_std, Generator& gen) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(n_embd, 4 * n_embd, gen));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * n_embd, n_embd, gen, true, proj_std));
}

Tensor MLP::forward(const Tensor& x) const {
  return hooked([&] { return c_proj->forward(gelu(c_fc->forward(x))); });
}

}  // namespace tinyllm::nn
