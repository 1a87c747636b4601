// Matrix products, through cblas_dgemm.
// Defined with their backward in src/tensor/matmul.cpp; shape errors as
// tinyllm/tensor/ops.h says.
#pragma once

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

// a [..., M, K] x b [K, N] -> [..., M, N]; or a [..., M, K] x b [..., K, N]
// with equal leading (batch) dims.
Tensor matmul(const Tensor& a, const Tensor& b);

// torch.nn.functional.linear: x [..., in] · weightᵀ + bias, weight [out, in],
// bias [out] or undefined (no bias).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace tinyllm
