// Reductions over every element, to a scalar of shape [].
// Defined with their backward in src/tensor/reduction.cpp; shape errors as
// tinyllm/tensor/ops.h says.
#pragma once

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

Tensor sum(const Tensor& a);
Tensor mean(const Tensor& a);

}  // namespace tinyllm
