#include "tinyllm/nn/linear.h"

#include "tinyllm/tensor/ops.h"

namespace tinyllm::nn {

Linear::Linear(std::size_t in_features, std::size_t out_features, Generator& gen, bool bias, double std) {
  weight = register_parameter("weight", Tensor::empty({out_features, in_features}));
  normal_(weight, gen, 0.0, std);
  if (bias) this->bias = register_parameter("bias", Tensor::zeros({out_features}));
}

Tensor Linear::forward(const Tensor& x) const {
  return hooked([&] { return linear(x, weight, bias); });
}

}  // namespace tinyllm::nn
