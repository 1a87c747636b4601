// Float64 central-difference check of an op's backward. The op's output is
// projected on a fixed random tensor R, so the scalar <f(x), R> depends on
// every output element; its analytic gradient comes from backward(R) and its
// numeric one from (F(x + eps) - F(x - eps)) / 2eps, element by element.
#pragma once

#include <tinyllm/tensor/tensor.h>

#include <functional>
#include <vector>

namespace tinyllm::testing {

struct GradcheckOptions {
  double eps = 1e-6;  // central difference: truncation error ~eps², rounding ~1e-16/eps
  double atol = 1e-7;
  double rtol = 1e-6;  // |analytic - numeric| <= atol + rtol·|numeric|
};

using OpUnderTest = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks every element of every input that requires grad.
void expect_gradients_match(const OpUnderTest& f, const std::vector<Tensor>& inputs, GradcheckOptions options = {});

// A copy of t's grad (empty when it has none), for EXPECT_EQ on whole arrays.
inline std::vector<double> grad_of(const Tensor& t) { return {t.grad().begin(), t.grad().end()}; }

// A leaf of the given shape with N(0, 1) values from `seed`, requiring grad.
Tensor random_leaf(const Shape& shape, unsigned seed);

}  // namespace tinyllm::testing
