// Elementwise arithmetic with NumPy broadcasting (trailing dims align; a
// dim of 1 or a missing leading dim stretches); backward sums over the
// stretched dims.
// Defined with their backward in src/tensor/elementwise.cpp; shape errors as
// tinyllm/tensor/ops.h says.
#pragma once

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double s);

}  // namespace tinyllm
