// add, sub and mul with NumPy broadcasting, each backward beside its forward:
// a stretched operand's gradient is the output gradient summed over the dims
// it was stretched along. Not in-place and float64 only (no type promotion).
// Reference: numpy.org/doc/stable/user/basics.broadcasting.html; torch.add,
// torch.sub, torch.mul.
#include "tinyllm/tensor/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "../support/check.h"
#include "tinyllm/tensor/autograd.h"

namespace tinyllm {
namespace {

// How each output element maps to an element of a and of b, in the fewest
// dims. Both shapes are padded with leading 1s to the output's rank, and an
// operand's stride along a dim is 0 where it is stretched. Output dims of
// size 1 are dropped, and neighbouring dims are merged wherever each operand
// either steps through both contiguously or repeats both, so the hot cases
// become short loop nests:
//   equal shapes               -> [n],      a (1),    b (1):    one flat loop
//   x [B,T,C] + bias [C]       -> [B·T, C], a (C, 1), b (0, 1): outer blocks of contiguous rows
//   x [B,T,C] + wpe [T,C]      -> [B, T·C], a (TC, 1), b (0, 1)
//   [3,1] + [1,4]              -> [3, 4],   a (1, 0), b (0, 1)
// The last merged dim is the row: contiguous in the output, and in each
// operand either contiguous (stride 1) or one repeated element (stride 0),
// never both stretched (the output would have size 1 there).
struct BroadcastPlan {
  Shape out_shape;
  std::vector<std::size_t> dims;      // merged, outermost first; never empty
  std::vector<std::size_t> stride_a;  // in elements of a, 0 where a is stretched
  std::vector<std::size_t> stride_b;
};

BroadcastPlan make_plan(const char* op, const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  const auto padded = [rank](const Shape& s) {
    Shape p(rank - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const Shape pa = padded(a);
  const Shape pb = padded(b);

  BroadcastPlan plan;
  plan.out_shape.resize(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    if (pa[d] == pb[d] || pb[d] == 1) {
      plan.out_shape[d] = pa[d];
    } else if (pa[d] == 1) {
      plan.out_shape[d] = pb[d];
    } else {
      throw std::invalid_argument(fmt::format("{}: shapes {} and {} do not broadcast", op, to_string(a), to_string(b)));
    }
  }

  // From the innermost dim outwards, so each operand's contiguous stride is
  // the product of its sizes seen so far; built reversed, flipped at the end.
  std::size_t step_a = 1;
  std::size_t step_b = 1;
  for (std::size_t d = rank; d-- > 0;) {
    const std::size_t size = plan.out_shape[d];
    const std::size_t sa = pa[d] == 1 ? 0 : step_a;
    const std::size_t sb = pb[d] == 1 ? 0 : step_b;
    step_a *= pa[d];
    step_b *= pb[d];
    if (size == 1) continue;
    if (!plan.dims.empty() && sa == plan.stride_a.back() * plan.dims.back() &&
        sb == plan.stride_b.back() * plan.dims.back()) {
      plan.dims.back() *= size;  // the merged dim keeps the inner dim's strides
      continue;
    }
    plan.dims.push_back(size);
    plan.stride_a.push_back(sa);
    plan.stride_b.push_back(sb);
  }
  if (plan.dims.empty()) {  // one element: both operands have exactly one too
    plan.dims = {1};
    plan.stride_a = {1};
    plan.stride_b = {1};
  }
  std::reverse(plan.dims.begin(), plan.dims.end());
  std::reverse(plan.stride_a.begin(), plan.stride_a.end());
  std::reverse(plan.stride_b.begin(), plan.stride_b.end());
  return plan;
}

// Calls row(out_offset, a_offset, b_offset) for each row of the plan, in
// output order. Rank 1 is the flat loop and rank 2 the outer-block loop;
// beyond that an index counter over the outer dims moves each operand's
// offset by its strides and rewinds it when a dim wraps.
template <class Row>
void for_each_row(const BroadcastPlan& plan, Row&& row) {
  const std::size_t rank = plan.dims.size();
  const std::size_t n = plan.dims.back();
  if (rank == 1) {
    row(std::size_t{0}, std::size_t{0}, std::size_t{0});
    return;
  }
  if (rank == 2) {
    for (std::size_t o = 0; o < plan.dims[0]; ++o) row(o * n, o * plan.stride_a[0], o * plan.stride_b[0]);
    return;
  }
  std::size_t rows = 1;
  for (std::size_t d = 0; d + 1 < rank; ++d) rows *= plan.dims[d];
  std::vector<std::size_t> index(rank - 1, 0);
  std::size_t ia = 0;
  std::size_t ib = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    row(r * n, ia, ib);
    for (std::size_t d = rank - 1; d-- > 0;) {
      ia += plan.stride_a[d];
      ib += plan.stride_b[d];
      if (++index[d] < plan.dims[d]) break;
      index[d] = 0;
      ia -= plan.stride_a[d] * plan.dims[d];
      ib -= plan.stride_b[d] * plan.dims[d];
    }
  }
}

using One = std::integral_constant<std::size_t, 1>;
using Zero = std::integral_constant<std::size_t, 0>;

// Calls kernel(sa, sb) with the row strides as compile-time constants, so
// each row loop is a plain contiguous (or broadcast-scalar) loop the
// compiler vectorises.
template <class Kernel>
void with_row_strides(const BroadcastPlan& plan, Kernel&& kernel) {
  const bool a_runs = plan.stride_a.back() == 1;
  const bool b_runs = plan.stride_b.back() == 1;
  TINYLLM_CHECK(a_runs || b_runs, "both operands stretched along the row of ", to_string(plan.out_shape));
  if (a_runs && b_runs) {
    kernel(One{}, One{});
  } else if (a_runs) {
    kernel(One{}, Zero{});
  } else {
    kernel(Zero{}, One{});
  }
}

template <class Op>
Tensor broadcast_forward(const BroadcastPlan& plan, const Tensor& a, const Tensor& b, Op op) {
  Tensor out = Tensor::empty(plan.out_shape);
  const double* x = a.data().data();
  const double* z = b.data().data();
  double* y = out.data().data();
  const std::size_t n = plan.dims.back();
  with_row_strides(plan, [&](auto sa, auto sb) {
    for_each_row(plan, [&](std::size_t o, std::size_t ia, std::size_t ib) {
      for (std::size_t j = 0; j < n; ++j) y[o + j] = op(x[ia + j * sa], z[ib + j * sb]);
    });
  });
  return out;
}

// g[j·kG] += term(dy[j], other[j·kO]) for j < n: with kG = 0 the row is one
// element of a stretched operand, so the row is summed first and added once.
template <class G, class O, class Term>
void accumulate_row(double* g, const double* dy, const double* other, std::size_t n, G, O, Term term) {
  if constexpr (G::value == 0) {
    double total = 0.0;
    for (std::size_t j = 0; j < n; ++j) total += term(dy[j], other[j * O::value]);
    g[0] += total;
  } else {
    for (std::size_t j = 0; j < n; ++j) g[j] += term(dy[j], other[j * O::value]);
  }
}

// Adds term(dy_i, other_i) for every output element i into the grad of a
// (kIntoA) or of b at the element that produced i; `other` is the opposite
// operand's data. Rows are visited in output order, so the sums over
// stretched dims run in a fixed order.
template <bool kIntoA, class Term>
void accumulate_grad(const BroadcastPlan& plan, const double* dy, const double* other, double* g, Term term) {
  const std::size_t n = plan.dims.back();
  with_row_strides(plan, [&](auto sa, auto sb) {
    for_each_row(plan, [&](std::size_t o, std::size_t ia, std::size_t ib) {
      if constexpr (kIntoA) {
        accumulate_row(g + ia, dy + o, other + ib, n, sa, sb, term);
      } else {
        accumulate_row(g + ib, dy + o, other + ia, n, sb, sa, term);
      }
    });
  });
}

// add and sub: dy flows to a unchanged and to b times `b_sign`.
Tensor add_or_sub(const char* op, const Tensor& a, const Tensor& b, double b_sign) {
  BroadcastPlan plan = make_plan(op, a.shape(), b.shape());
  Tensor out = b_sign > 0 ? broadcast_forward(plan, a, b, [](double x, double z) { return x + z; })
                          : broadcast_forward(plan, a, b, [](double x, double z) { return x - z; });
  autograd::record(out, {a, b}, [a, b, b_sign, plan = std::move(plan)](const Tensor& y) {
    const double* dy = y.grad().data();
    if (a.requires_grad()) {
      accumulate_grad<true>(plan, dy, b.data().data(), a.mutable_grad().data(), [](double d, double) { return d; });
    }
    if (b.requires_grad()) {
      accumulate_grad<false>(plan, dy, a.data().data(), b.mutable_grad().data(),
                             [b_sign](double d, double) { return b_sign * d; });
    }
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return add_or_sub("add", a, b, 1.0); }

Tensor sub(const Tensor& a, const Tensor& b) { return add_or_sub("sub", a, b, -1.0); }

Tensor mul(const Tensor& a, const Tensor& b) {
  BroadcastPlan plan = make_plan("mul", a.shape(), b.shape());
  Tensor out = broadcast_forward(plan, a, b, [](double x, double z) { return x * z; });
  // The inputs' values are the saved state: d(a·b)/da = b and d(a·b)/db = a.
  autograd::record(out, {a, b}, [a, b, plan = std::move(plan)](const Tensor& y) {
    const double* dy = y.grad().data();
    const auto times = [](double d, double other) { return d * other; };
    if (a.requires_grad()) accumulate_grad<true>(plan, dy, b.data().data(), a.mutable_grad().data(), times);
    if (b.requires_grad()) accumulate_grad<false>(plan, dy, a.data().data(), b.mutable_grad().data(), times);
  });
  return out;
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = Tensor::empty(a.shape());
  const double* x = a.data().data();
  double* dst = out.data().data();
  const std::size_t n = a.numel();
  for (std::size_t i = 0; i < n; ++i) dst[i] = x[i] * s;
  autograd::record(out, {a}, [a, s, n](const Tensor& y) {
    const double* dy = y.grad().data();
    double* g = a.mutable_grad().data();
    for (std::size_t i = 0; i < n; ++i) g[i] += s * dy[i];
  });
  return out;
}

}  // namespace tinyllm
