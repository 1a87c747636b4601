// The differentiable ops a GPT needs, one header per family, each family's
// backward beside its forward in src/tensor/<family>.cpp. All take and
// return contiguous float64 tensors; shapes are checked and a mismatch
// throws std::invalid_argument naming both shapes. Dims may be negative,
// counting from the end.
#pragma once

#include "tinyllm/tensor/attention.h"
#include "tinyllm/tensor/elementwise.h"
#include "tinyllm/tensor/matmul.h"
#include "tinyllm/tensor/nn_ops.h"
#include "tinyllm/tensor/reduction.h"
#include "tinyllm/tensor/shape_ops.h"
