// The neural-network ops of a GPT but attention.
// Defined with their backward in src/tensor/nn_ops.cpp; shape errors as
// tinyllm/tensor/ops.h says.
#pragma once

#include <span>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

// Rows of weight [V, C] picked by ids (each in [0, V)) -> [ids_shape..., C].
Tensor embedding(const Tensor& weight, std::span<const int> ids, const Shape& ids_shape);

// Over the last dim, biased variance: x [..., C], weight [C], bias [C].
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// GELU, tanh approximation (GPT-2's).
Tensor gelu(const Tensor& x);

// Mean over rows of -log softmax(logits)[target]: logits [..., V], one
// target in [0, V) per row. Log-softmax is fused in, so it never overflows.
Tensor cross_entropy(const Tensor& logits, std::span<const int> targets);

}  // namespace tinyllm
