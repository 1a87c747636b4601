// Shape ops, each returning a new contiguous tensor.
// Defined with their backward in src/tensor/shape_ops.cpp; shape errors as
// tinyllm/tensor/ops.h says.
#pragma once

#include <cstddef>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

Tensor reshape(const Tensor& a, Shape shape);
Tensor transpose(const Tensor& a, int dim0, int dim1);
Tensor slice(const Tensor& a, int dim, std::size_t start, std::size_t end);  // [start, end)

}  // namespace tinyllm
