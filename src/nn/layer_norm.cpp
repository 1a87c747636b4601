#include "tinyllm/nn/layer_norm.h"

#include "tinyllm/tensor/ops.h"

namespace tinyllm::nn {

LayerNorm::LayerNorm(std::size_t normalized_size, double eps) : eps(eps) {
  weight = register_parameter("weight", Tensor::full({normalized_size}, 1.0));
  bias = register_parameter("bias", Tensor::zeros({normalized_size}));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return hooked([&] { return layer_norm(x, weight, bias, eps); });
}

}  // namespace tinyllm::nn
