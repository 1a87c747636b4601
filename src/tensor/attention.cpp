// Causal scaled dot-product attention over n_head heads, fused: the scores,
// mask, softmax and weighted sum of each (batch, head) pair in one pass, as
// torch's scaled_dot_product_attention(is_causal=True) after nanoGPT's head
// split. It is not flash attention: each pair's T×T probabilities are formed
// whole and, when grad is needed, kept for backward.
//
// Head h of a [B, T, C] tensor is the [T, D] block of columns [h·D, (h+1)·D)
// of each batch entry, a matrix with leading dim C, so dgemm reads and writes
// the heads in place: no split, no transposes, and the output comes out with
// the heads already merged.
#include "tinyllm/tensor/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "blas.h"
#include "tinyllm/tensor/autograd.h"
#include "vec_math.h"

namespace tinyllm {

using detail::gemm;
namespace {

// Row t of the T×T scores s (already scaled) becomes softmax over columns
// 0..t; the masked columns t+1.. become exactly 0. The max is subtracted first
// so exp never overflows. The exps are a loop of their own so that it
// vectorises; the sum stays a running sum in index order, as cheap as any
// (T is small) and without the last-bit changes of a reordered one.
TINYLLM_CLONES void causal_softmax(double* s, std::size_t T) {
  for (std::size_t t = 0; t < T; ++t) {
    double* row = s + t * T;
    const double max = *std::max_element(row, row + t + 1);
    for (std::size_t j = 0; j <= t; ++j) row[j] = detail::vexp(row[j] - max);
    double total = 0.0;
    for (std::size_t j = 0; j <= t; ++j) total += row[j];
    const double inv = 1.0 / total;
    for (std::size_t j = 0; j <= t; ++j) row[j] *= inv;
    std::fill(row + t + 1, row + T, 0.0);
  }
}

}  // namespace

// Names used below, per (batch b, head h), each [T, D] with leading dim C
// unless said otherwise:
//   Q, K, V   the head's slices of q, k, v
//   S, P      scores scale·Q·Kᵀ and probabilities softmax(mask(S)), [T, T] with leading dim T
//   Y         P·V, written into the output's columns of head h
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t n_head) {
  if (q.dim() != 3) {
    throw std::invalid_argument(
        fmt::format("causal_attention: q must be 3-D [B, T, C] (got {})", to_string(q.shape())));
  }
  if (k.shape() != q.shape() || v.shape() != q.shape()) {
    throw std::invalid_argument(
        fmt::format("causal_attention: q, k and v must have equal shapes (got q {}, k {}, v {})", to_string(q.shape()),
                    to_string(k.shape()), to_string(v.shape())));
  }
  const std::size_t B = q.shape()[0];
  const std::size_t T = q.shape()[1];
  const std::size_t C = q.shape()[2];
  if (n_head == 0) throw std::invalid_argument("causal_attention: n_head must be >= 1 (got 0)");
  if (C % n_head != 0) {
    throw std::invalid_argument(fmt::format("causal_attention: width {} is not divisible by {} heads", C, n_head));
  }
  const std::size_t H = n_head;
  const std::size_t D = C / H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));

  Tensor out = Tensor::empty(q.shape());  // [B, T, C]
  // Backward needs every P, so they are saved whole; without grad one T×T
  // buffer serves every pair in turn.
  const bool save = autograd::needs_grad(q, k, v);
  Tensor probs = save ? Tensor::empty({B, H, T, T}) : Tensor::empty({T, T});

  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t head = b * T * C + h * D;  // offset of the head's first element
      double* P = probs.data().data() + (save ? (b * H + h) * T * T : 0);
      gemm(false, true, T, T, D, scale, q.data().data() + head, C, k.data().data() + head, C, 0.0, P, T);
      causal_softmax(P, T);
      gemm(false, false, T, D, T, 1.0, P, T, v.data().data() + head, C, 0.0, out.data().data() + head, C);
    }
  }
  if (!save) return out;

  // Backward per pair, with dY the head's slice of y.grad():
  //   dP = dY·Vᵀ            dV += Pᵀ·dY
  //   dS = P ⊙ (dP − rowsum(dP ⊙ P))   (softmax's Jacobian; masked entries have P = 0)
  //   dQ += scale·dS·K      dK += scale·dSᵀ·Q
  // dS overwrites dP in one T×T scratch shared by all pairs.
  autograd::record(out, {q, k, v}, [q, k, v, probs, B, T, C, H, D, scale](const Tensor& y) {
    double* dq = q.requires_grad() ? q.mutable_grad().data() : nullptr;  // [B, T, C], as are dk, dv, dy
    double* dk = k.requires_grad() ? k.mutable_grad().data() : nullptr;
    double* dv = v.requires_grad() ? v.mutable_grad().data() : nullptr;
    const double* dy = y.grad().data();
    Tensor scratch = (dq || dk) ? Tensor::empty({T, T}) : Tensor();
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t head = b * T * C + h * D;
        const double* P = probs.data().data() + (b * H + h) * T * T;
        if (dv) gemm(true, false, T, D, T, 1.0, P, T, dy + head, C, 1.0, dv + head, C);
        if (!dq && !dk) continue;
        double* dS = scratch.data().data();
        gemm(false, true, T, T, D, 1.0, dy + head, C, v.data().data() + head, C, 0.0, dS, T);
        for (std::size_t t = 0; t < T; ++t) {
          const double* p_row = P + t * T;
          double* row = dS + t * T;
          double dot = 0.0;
          for (std::size_t j = 0; j <= t; ++j) dot += row[j] * p_row[j];
          for (std::size_t j = 0; j <= t; ++j) row[j] = p_row[j] * (row[j] - dot);
          std::fill(row + t + 1, row + T, 0.0);
        }
        if (dq) gemm(false, false, T, D, T, scale, dS, T, k.data().data() + head, C, 1.0, dq + head, C);
        if (dk) gemm(true, false, T, D, T, scale, dS, T, q.data().data() + head, C, 1.0, dk + head, C);
      }
    }
  });
  return out;
}

}  // namespace tinyllm
