// Matrix products: matmul (torch.matmul restricted to rank >= 2, with either a
// shared right operand or equal batch dims, no broadcasting between them) and
// linear (torch.nn.functional.linear). Every product, forward and backward, is
// one cblas_dgemm on row-major buffers read in place; backward adds into the
// inputs' grad buffers through beta = 1, so it allocates nothing.
#include "tinyllm/tensor/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include "blas.h"
#include "tinyllm/tensor/autograd.h"

namespace tinyllm {

using detail::gemm;

// Two forms, told apart by b's rank:
//   shared b:  a [..., M, K] x b [K, N]       -> one product over rows = (prod of a's leading dims)·M
//   batched:   a [..., M, K] x b [..., K, N]  -> one product per batch entry, the leading dims equal
Tensor matmul(const Tensor& a, const Tensor& b) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  if (as.size() < 2 || bs.size() < 2) {
    throw std::invalid_argument(
        fmt::format("matmul: both operands must have rank >= 2 (got a {} and b {})", to_string(as), to_string(bs)));
  }
  const std::size_t M = as[as.size() - 2];
  const std::size_t K = as.back();
  const std::size_t N = bs.back();
  if (bs[bs.size() - 2] != K) {
    throw std::invalid_argument(fmt::format("matmul: inner dims differ: a {} and b {}", to_string(as), to_string(bs)));
  }
  const bool shared_b = bs.size() == 2;
  if (!shared_b && !std::equal(as.begin(), as.end() - 2, bs.begin(), bs.end() - 2)) {
    throw std::invalid_argument(
        fmt::format("matmul: batch dims must be equal (got a {} and b {})", to_string(as), to_string(bs)));
  }
  std::size_t batch = 1;  // prod of a's leading dims
  for (std::size_t i = 0; i + 2 < as.size(); ++i) batch *= as[i];

  Shape out_shape = as;
  out_shape.back() = N;
  Tensor out = Tensor::empty(std::move(out_shape));  // [..., M, N]

  if (shared_b) {
    gemm(false, false, batch * M, N, K, 1.0, a.data().data(), K, b.data().data(), N, 0.0, out.data().data(), N);
    autograd::record(out, {a, b}, [a, b, rows = batch * M, K, N](const Tensor& y) {
      const double* dc = y.grad().data();  // [rows, N]
      if (a.requires_grad()) {             // dA [rows, K] += dC · Bᵀ
        gemm(false, true, rows, K, N, 1.0, dc, N, b.data().data(), N, 1.0, a.mutable_grad().data(), K);
      }
      if (b.requires_grad()) {  // dB [K, N] += Aᵀ · dC, summed over every row at once
        gemm(true, false, K, N, rows, 1.0, a.data().data(), K, dc, N, 1.0, b.mutable_grad().data(), N);
      }
    });
    return out;
  }

  for (std::size_t i = 0; i < batch; ++i) {
    gemm(false, false, M, N, K, 1.0, a.data().data() + i * M * K, K, b.data().data() + i * K * N, N, 0.0,
         out.data().data() + i * M * N, N);
  }
  autograd::record(out, {a, b}, [a, b, batch, M, K, N](const Tensor& y) {
    const double* dc = y.grad().data();  // [batch, M, N]
    if (a.requires_grad()) {             // dA_i [M, K] += dC_i · B_iᵀ
      double* da = a.mutable_grad().data();
      for (std::size_t i = 0; i < batch; ++i) {
        gemm(false, true, M, K, N, 1.0, dc + i * M * N, N, b.data().data() + i * K * N, N, 1.0, da + i * M * K, K);
      }
    }
    if (b.requires_grad()) {  // dB_i [K, N] += A_iᵀ · dC_i
      double* db = b.mutable_grad().data();
      for (std::size_t i = 0; i < batch; ++i) {
        gemm(true, false, K, N, M, 1.0, a.data().data() + i * M * K, K, dc + i * M * N, N, 1.0, db + i * K * N, N);
      }
    }
  });
  return out;
}

// y [rows, out] = x [rows, in] · Wᵀ + bias, with rows the product of x's
// leading dims. The bias goes in first and the product adds onto it (beta = 1),
// so the output is written in one pass after the fill.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Shape& xs = x.shape();
  const Shape& ws = weight.shape();
  if (ws.size() != 2) {
    throw std::invalid_argument(fmt::format("linear: weight must be 2-D [out, in] (got {})", to_string(ws)));
  }
  if (xs.empty()) {
    throw std::invalid_argument(fmt::format("linear: input must have rank >= 1 (got {})", to_string(xs)));
  }
  const std::size_t out_features = ws[0];
  const std::size_t in_features = ws[1];
  if (xs.back() != in_features) {
    throw std::invalid_argument(fmt::format("linear: input width {} does not match weight {} (input {})", xs.back(),
                                            to_string(ws), to_string(xs)));
  }
  if (bias.defined() && bias.shape() != Shape{out_features}) {
    throw std::invalid_argument(fmt::format("linear: bias must be [{}] for weight {} (got {})", out_features,
                                            to_string(ws), to_string(bias.shape())));
  }
  std::size_t rows = 1;
  for (std::size_t i = 0; i + 1 < xs.size(); ++i) rows *= xs[i];

  Shape out_shape = xs;
  out_shape.back() = out_features;
  Tensor out = Tensor::empty(std::move(out_shape));  // [..., out]
  double* out_data = out.data().data();
  if (bias.defined()) {
    const double* b = bias.data().data();
    for (std::size_t r = 0; r < rows; ++r) std::copy(b, b + out_features, out_data + r * out_features);
  }
  gemm(false, true, rows, out_features, in_features, 1.0, x.data().data(), in_features, weight.data().data(),
       in_features, bias.defined() ? 1.0 : 0.0, out_data, out_features);

  auto backward = [x, weight, bias, rows, out_features, in_features](const Tensor& y) {
    const double* dy = y.grad().data();  // [rows, out]
    if (x.requires_grad()) {             // dx [rows, in] += dy · W
      gemm(false, false, rows, in_features, out_features, 1.0, dy, out_features, weight.data().data(), in_features, 1.0,
           x.mutable_grad().data(), in_features);
    }
    if (weight.requires_grad()) {  // dW [out, in] += dyᵀ · x
      gemm(true, false, out_features, in_features, rows, 1.0, dy, out_features, x.data().data(), in_features, 1.0,
           weight.mutable_grad().data(), in_features);
    }
    if (bias.defined() && bias.requires_grad()) {  // db [out] += column sums of dy, row by row
      double* db = bias.mutable_grad().data();
      for (std::size_t r = 0; r < rows; ++r) {
        const double* dy_row = dy + r * out_features;
        for (std::size_t j = 0; j < out_features; ++j) db[j] += dy_row[j];
      }
    }
  };
  // An undefined bias must stay out of the graph's input list: the graph walk
  // asks every input for its grad_fn.
  if (bias.defined()) {
    autograd::record(out, {x, weight, bias}, std::move(backward));
  } else {
    autograd::record(out, {x, weight}, std::move(backward));
  }
  return out;
}

}  // namespace tinyllm
