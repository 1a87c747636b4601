#include "support/gradcheck.h"

#include <gtest/gtest.h>
#include <tinyllm/tensor/autograd.h>
#include <tinyllm/tensor/random.h>

#include <cmath>

namespace tinyllm::testing {
namespace {

double project(const Tensor& out, const Tensor& r) {
  double total = 0.0;
  for (std::size_t i = 0; i < out.numel(); ++i) total += out.data()[i] * r.data()[i];
  return total;
}

}  // namespace

Tensor random_leaf(const Shape& shape, unsigned seed) {
  Generator gen(seed);
  return randn(shape, gen, /*requires_grad=*/true);
}

void expect_gradients_match(const OpUnderTest& f, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  for (const Tensor& input : inputs) input.zero_grad();
  Tensor out = f(inputs);
  Generator gen(20261202);
  const Tensor r = randn(out.shape(), gen);
  out.backward(r);

  autograd::NoGradGuard no_grad;
  int reported = 0;
  for (std::size_t which = 0; which < inputs.size(); ++which) {
    const Tensor& input = inputs[which];
    if (!input.requires_grad()) continue;
    ASSERT_EQ(input.grad().size(), input.numel()) << "input " << which << " got no gradient";
    for (std::size_t i = 0; i < input.numel(); ++i) {
      double& x = input.data()[i];
      const double saved = x;
      x = saved + options.eps;
      const double plus = project(f(inputs), r);
      x = saved - options.eps;
      const double minus = project(f(inputs), r);
      x = saved;
      const double numeric = (plus - minus) / (2.0 * options.eps);
      const double analytic = input.grad()[i];
      if (std::abs(analytic - numeric) > options.atol + options.rtol * std::abs(numeric) && reported++ < 10) {
        ADD_FAILURE() << "input " << which << " shape " << to_string(input.shape()) << " element " << i << ": analytic "
                      << analytic << " numeric " << numeric;
      }
    }
  }
}

}  // namespace tinyllm::testing
