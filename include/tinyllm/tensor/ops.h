// The differentiable ops a GPT needs, each with its backward beside its
// forward in src/tensor/<family>.cpp. All take and return contiguous float64
// tensors; shapes are checked and a mismatch throws std::invalid_argument
// naming both shapes. Dims may be negative, counting from the end.
#pragma once

#include <cstddef>
#include <span>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

// elementwise.cpp: NumPy broadcasting (trailing dims align; a dim of 1 or a
// missing leading dim stretches); backward sums over the stretched dims.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double s);

// reduction.cpp: over every element, to a scalar of shape [].
Tensor sum(const Tensor& a);
Tensor mean(const Tensor& a);

// shape_ops.cpp: each returns a new contiguous tensor.
Tensor reshape(const Tensor& a, Shape shape);
Tensor transpose(const Tensor& a, int dim0, int dim1);
Tensor slice(const Tensor& a, int dim, std::size_t start, std::size_t end);  // [start, end)

// matmul.cpp, through cblas_dgemm.
// a [..., M, K] x b [K, N] -> [..., M, N]; or a [..., M, K] x b [..., K, N]
// with equal leading (batch) dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// torch.nn.functional.linear: x [..., in] · weightᵀ + bias, weight [out, in],
// bias [out] or undefined (no bias).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// nn_ops.cpp
// Rows of weight [V, C] picked by ids (each in [0, V)) -> [ids_shape..., C].
Tensor embedding(const Tensor& weight, std::span<const int> ids, const Shape& ids_shape);
// Over the last dim, biased variance: x [..., C], weight [C], bias [C].
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// GELU, tanh approximation (GPT-2's).
Tensor gelu(const Tensor& x);
// Mean over rows of -log softmax(logits)[target]: logits [..., V], one
// target in [0, V) per row. Log-softmax is fused in, so it never overflows.
Tensor cross_entropy(const Tensor& logits, std::span<const int> targets);

// attention.cpp: causal scaled dot-product attention with n_head heads.
// q, k, v [B, T, C]; head h uses columns [h·D, (h+1)·D), D = C / n_head;
// scores scaled by 1/√D, position t attends to positions 0..t; the heads'
// outputs come back merged as [B, T, C].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t n_head);

}  // namespace tinyllm
