// clip_grad_norm: torch.nn.utils.clip_grad_norm_ with the 2-norm. The total
// norm is taken over every gradient together, as if they were one vector,
// and every gradient is scaled by PyTorch's coefficient
// min(1, max_norm / (total + 1e-6)), even when that is exactly 1.
// Reference: https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html
#pragma once

#include <vector>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm::optim {

// Scales every parameter's grad in place (parameters without a grad are
// skipped); returns the total norm before clipping. std::invalid_argument
// unless max_norm > 0.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// The factor clip_grad_norm applies for a given total norm, for code that
// sums the squares itself, shard by shard (ZeroOptimizer::clip_grad_norm).
double clip_coefficient(double total_norm, double max_norm);

}  // namespace tinyllm::optim
