// reshape, transpose and slice. Tensors here have no strided views, so each
// returns a new contiguous copy (torch.reshape / torch.transpose /
// Tensor.narrow as if followed by .contiguous()), and each backward adds the
// output's gradient back into the input's layout. Copies move whole runs of
// the contiguous inner block, never one index computation per element.
#include "tinyllm/tensor/shape_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include "tinyllm/tensor/autograd.h"

namespace tinyllm {
namespace {

// `dim` counted from the end when negative, checked against the rank.
std::size_t wrap_dim(const char* op, int dim, const Shape& shape) {
  const int rank = static_cast<int>(shape.size());
  const int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    throw std::invalid_argument(fmt::format("{}: dim {} is out of range for shape {} (must be in [{}, {}))", op, dim,
                                            to_string(shape), -rank, rank));
  }
  return static_cast<std::size_t>(d);
}

std::size_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::size_t n = 1;
  for (std::size_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

// The input of transpose(dim0 < dim1) seen as [outer, A, mid, B, inner]
// (A and B the swapped dims) and its output as [outer, B, mid, A, inner].
struct TransposeBlocks {
  std::size_t outer, a, mid, b, inner;
};

// Calls run(out_offset, in_offset) for every run of `inner` elements, in
// output order, so writes stream and reads jump by whole blocks.
template <class Run>
void for_each_transposed_run(const TransposeBlocks& t, Run&& run) {
  std::size_t out_offset = 0;
  for (std::size_t o = 0; o < t.outer; ++o) {
    for (std::size_t j = 0; j < t.b; ++j) {
      for (std::size_t m = 0; m < t.mid; ++m) {
        for (std::size_t i = 0; i < t.a; ++i) {
          run(out_offset, (((o * t.a + i) * t.mid + m) * t.b + j) * t.inner);
          out_offset += t.inner;
        }
      }
    }
  }
}

// dst[k] += src[k] for k < n.
void add_run(double* dst, const double* src, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) dst[k] += src[k];
}

}  // namespace

Tensor reshape(const Tensor& a, Shape shape) {
  const std::size_t n = a.numel();
  if (numel_of(shape) != n) {
    throw std::invalid_argument(fmt::format("reshape: shape {} has {} elements but the input {} has {}",
                                            to_string(shape), numel_of(shape), to_string(a.shape()), n));
  }
  Tensor out = Tensor::empty(std::move(shape));
  std::copy_n(a.data().data(), n, out.data().data());
  autograd::record(out, {a}, [a, n](const Tensor& y) { add_run(a.mutable_grad().data(), y.grad().data(), n); });
  return out;
}

Tensor transpose(const Tensor& a, int dim0, int dim1) {
  std::size_t d0 = wrap_dim("transpose", dim0, a.shape());
  std::size_t d1 = wrap_dim("transpose", dim1, a.shape());
  if (d0 == d1) return reshape(a, a.shape());
  if (d0 > d1) std::swap(d0, d1);

  const Shape& in_shape = a.shape();
  const TransposeBlocks t{product(in_shape, 0, d0), in_shape[d0], product(in_shape, d0 + 1, d1), in_shape[d1],
                          product(in_shape, d1 + 1, in_shape.size())};
  Shape out_shape = in_shape;
  std::swap(out_shape[d0], out_shape[d1]);
  Tensor out = Tensor::empty(std::move(out_shape));
  const double* x = a.data().data();
  double* dst = out.data().data();
  // Transposing the last dim leaves runs of one element: copy it directly
  // rather than through a memmove call per element.
  if (t.inner == 1) {
    for_each_transposed_run(t, [&](std::size_t o, std::size_t i) { dst[o] = x[i]; });
  } else {
    for_each_transposed_run(t, [&](std::size_t o, std::size_t i) { std::copy_n(x + i, t.inner, dst + o); });
  }
  autograd::record(out, {a}, [a, t](const Tensor& y) {
    const double* dy = y.grad().data();
    double* g = a.mutable_grad().data();
    for_each_transposed_run(t, [&](std::size_t o, std::size_t i) { add_run(g + i, dy + o, t.inner); });
  });
  return out;
}

Tensor slice(const Tensor& a, int dim, std::size_t start, std::size_t end) {
  const std::size_t d = wrap_dim("slice", dim, a.shape());
  const Shape& in_shape = a.shape();
  const std::size_t size = in_shape[d];
  if (start > end || end > size) {
    throw std::invalid_argument(
        fmt::format("slice: start {} and end {} must satisfy start <= end <= {} (the size of dim {} of shape {})",
                    start, end, size, dim, to_string(in_shape)));
  }
  // The input is [outer, size, inner] and the output [outer, end - start,
  // inner]: each outer block contributes one contiguous run.
  const std::size_t outer = product(in_shape, 0, d);
  const std::size_t inner = product(in_shape, d + 1, in_shape.size());
  const std::size_t run = (end - start) * inner;
  Shape out_shape = in_shape;
  out_shape[d] = end - start;
  Tensor out = Tensor::empty(std::move(out_shape));
  const double* x = a.data().data();
  double* dst = out.data().data();
  for (std::size_t o = 0; o < outer; ++o) std::copy_n(x + (o * size + start) * inner, run, dst + o * run);
  autograd::record(out, {a}, [a, outer, size, start, inner, run](const Tensor& y) {
    const double* dy = y.grad().data();
    double* g = a.mutable_grad().data();
    for (std::size_t o = 0; o < outer; ++o) add_run(g + (o * size + start) * inner, dy + o * run, run);
  });
  return out;
}

}  // namespace tinyllm
