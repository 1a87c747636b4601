#include "tinyllm/optim/clip_grad.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tinyllm::optim {

double clip_coefficient(double total_norm, double max_norm) {
  if (!(max_norm > 0))
    throw std::invalid_argument(fmt::format("clip_grad_norm: max_norm must be > 0 (got {})", max_norm));
  // PyTorch adds 1e-6 so that a zero gradient gives a finite factor.
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  double squares = 0;
  for (const Tensor& p : params)
    for (double g : p.grad()) squares += g * g;
  const double total_norm = std::sqrt(squares);
  const double coefficient = clip_coefficient(total_norm, max_norm);
  for (const Tensor& p : params)
    for (double& g : p.grad()) g *= coefficient;
  return total_norm;
}

}  // namespace tinyllm::optim
