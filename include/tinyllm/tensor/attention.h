// Causal scaled dot-product attention with n_head heads. q, k, v
// [B, T, C]; head h uses columns [h·D, (h+1)·D), D = C / n_head; scores
// scaled by 1/√D, position t attends to positions 0..t; the heads' outputs
// come back merged as [B, T, C].
// Defined with their backward in src/tensor/attention.cpp; shape errors as
// tinyllm/tensor/ops.h says.
#pragma once

#include <cstddef>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t n_head);

}  // namespace tinyllm
