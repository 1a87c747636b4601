// sum and mean over every element, to a scalar of shape [] (torch.sum and
// torch.mean without a dim). Not per-dim reductions. Unlike PyTorch, which
// gives NaN, mean of no elements is an error; sum of no elements is 0.
#include "tinyllm/tensor/reduction.h"

#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>

#include "tinyllm/tensor/autograd.h"

namespace tinyllm {
namespace {

// Four interleaved partial sums: independent chains hide the latency of
// each add, and the order is fixed, so one input gives the same bits on
// every run.
double sum_of(const double* x, std::size_t n) {
  double lane[4] = {0.0, 0.0, 0.0, 0.0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (std::size_t k = 0; k < 4; ++k) lane[k] += x[i + k];
  }
  for (; i < n; ++i) lane[0] += x[i];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// (Σ a) / divisor; d/da_i = 1 / divisor, so every element of a's grad gets
// dy / divisor. Dividing (not multiplying by 1/divisor) rounds as torch.mean.
Tensor divided_sum(const Tensor& a, double divisor) {
  const std::size_t n = a.numel();
  Tensor out = Tensor::empty({});
  out.data()[0] = sum_of(a.data().data(), n) / divisor;
  autograd::record(out, {a}, [a, n, divisor](const Tensor& y) {
    const double share = y.grad()[0] / divisor;
    double* g = a.mutable_grad().data();
    for (std::size_t i = 0; i < n; ++i) g[i] += share;
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& a) { return divided_sum(a, 1.0); }

Tensor mean(const Tensor& a) {
  if (a.numel() == 0) {
    throw std::invalid_argument(
        fmt::format("mean: input must have at least one element (got shape {})", to_string(a.shape())));
  }
  return divided_sum(a, static_cast<double>(a.numel()));
}

}  // namespace tinyllm
