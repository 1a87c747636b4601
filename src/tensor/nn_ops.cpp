// The GPT-specific ops: embedding lookup, layer norm, GELU and fused
// cross-entropy, each a forward with its backward beside it. Not modules
// (those are nn::Embedding, nn::LayerNorm), only the arithmetic. Reference:
// torch.nn.functional.{embedding, layer_norm, gelu(approximate="tanh"),
// cross_entropy}; the loops follow llm.c's train_gpt2.c.
#include "tinyllm/tensor/nn_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "tinyllm/tensor/autograd.h"
#include "vec_math.h"

namespace tinyllm {

using detail::vexp;
namespace {

// Σ term(i) for i in [0, n), in four interleaved running sums. One running
// sum waits the full add latency per element and the compiler may not
// reassociate it; four independent ones pipeline (and pair into vectors).
// The order is fixed, so the result is the same on every run.
template <class Term>
double sum_of(std::size_t n, Term term) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += term(i);
    s1 += term(i + 1);
    s2 += term(i + 2);
    s3 += term(i + 3);
  }
  for (; i < n; ++i) s0 += term(i);
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

// ---------------------------------------------------------------------------
// embedding: out[p, :] = weight[ids[p], :]

Tensor embedding(const Tensor& weight, std::span<const int> ids, const Shape& ids_shape) {
  if (weight.dim() != 2) {
    throw std::invalid_argument(
        fmt::format("embedding: weight must be rank 2 [V, C] (got {})", to_string(weight.shape())));
  }
  if (ids.size() != numel_of(ids_shape)) {
    throw std::invalid_argument(fmt::format("embedding: ids must fill ids_shape {} ({} ids) (got {} ids)",
                                            to_string(ids_shape), numel_of(ids_shape), ids.size()));
  }
  const std::size_t V = weight.shape()[0];
  const std::size_t C = weight.shape()[1];
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (ids[p] < 0 || static_cast<std::size_t>(ids[p]) >= V) {
      throw std::invalid_argument(
          fmt::format("embedding: token id {} at position {} is outside the vocabulary [0, {})", ids[p], p, V));
    }
  }

  Shape out_shape = ids_shape;
  out_shape.push_back(C);
  Tensor out = Tensor::empty(std::move(out_shape));  // [ids_shape..., C]
  const double* w = weight.data().data();
  double* o = out.data().data();
  for (std::size_t p = 0; p < ids.size(); ++p) {
    const double* row = w + static_cast<std::size_t>(ids[p]) * C;
    std::copy(row, row + C, o + p * C);
  }

  if (!autograd::needs_grad(weight)) return out;
  // The caller's span may not outlive this call, so the backward keeps a copy.
  autograd::record(out, {weight}, [weight, ids = std::vector<int>(ids.begin(), ids.end()), C](const Tensor& y) {
    double* dw = weight.mutable_grad().data();
    const double* dy = y.grad().data();
    // In position order, so a row picked twice sums its grads the same way every run.
    for (std::size_t p = 0; p < ids.size(); ++p) {
      double* dst = dw + static_cast<std::size_t>(ids[p]) * C;
      const double* src = dy + p * C;
      for (std::size_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  });
  return out;
}

// ---------------------------------------------------------------------------
// layer_norm: per row of C, x̂ = (x − mean) · rstd with rstd = 1/√(var + eps)
// (biased var), out = x̂ ⊙ weight + bias.

namespace {

// C, the width layer_norm normalises over, once the arguments are checked.
std::size_t layer_norm_width(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!x.defined() || !weight.defined() || !bias.defined()) {
    throw std::invalid_argument(fmt::format(
        "layer_norm: x, weight and bias must all be defined (got {}, {}, {})", x.defined() ? "defined" : "undefined",
        weight.defined() ? "defined" : "undefined", bias.defined() ? "defined" : "undefined"));
  }
  if (x.dim() == 0) {
    throw std::invalid_argument(
        fmt::format("layer_norm: x must have a last dim [..., C] (got {})", to_string(x.shape())));
  }
  const std::size_t C = x.shape().back();
  if (weight.shape() != Shape{C}) {
    throw std::invalid_argument(fmt::format("layer_norm: weight must be [{}] for x {} (got {})", C,
                                            to_string(x.shape()), to_string(weight.shape())));
  }
  if (bias.shape() != Shape{C}) {
    throw std::invalid_argument(fmt::format("layer_norm: bias must be [{}] for x {} (got {})", C, to_string(x.shape()),
                                            to_string(bias.shape())));
  }
  return C;
}

// The gradients of layer_norm's y (whose grad is dy) into x, weight and
// bias, from the rows' saved mean and rstd.
void layer_norm_backward(const Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& saved_mean, const Tensor& saved_rstd, std::size_t N, std::size_t C) {
  // Per row, with dŷ = dy ⊙ weight:
  //   pass 1: the row means of dŷ and dŷ ⊙ x̂; dweight += dy ⊙ x̂, dbias += dy;
  //   pass 2: dx += rstd · (dŷ − mean(dŷ) − x̂ · mean(dŷ ⊙ x̂)).
  // The row is in cache by then, so each is one pass over memory.
  // Rows add into dweight and dbias in row order, so the sums are deterministic.
  const double* xs = x.data().data();
  const double* w = weight.data().data();
  const double* dy = y.grad().data();
  const double* means = saved_mean.data().data();
  const double* rstds = saved_rstd.data().data();
  double* dx = x.requires_grad() ? x.mutable_grad().data() : nullptr;
  double* dw = weight.requires_grad() ? weight.mutable_grad().data() : nullptr;
  double* db = bias.requires_grad() ? bias.mutable_grad().data() : nullptr;
  const auto Cd = static_cast<double>(C);
  for (std::size_t n = 0; n < N; ++n) {
    const double* xr = xs + n * C;
    const double* dyr = dy + n * C;
    const double mean = means[n];
    const double rstd = rstds[n];
    const double sum_dxhat = sum_of(C, [dyr, w](std::size_t c) { return dyr[c] * w[c]; });
    const double sum_dxhat_xhat =
        sum_of(C, [dyr, w, xr, mean](std::size_t c) { return dyr[c] * w[c] * (xr[c] - mean); }) * rstd;
    if (dw) {
      for (std::size_t c = 0; c < C; ++c) dw[c] += dyr[c] * ((xr[c] - mean) * rstd);
    }
    if (db) {
      for (std::size_t c = 0; c < C; ++c) db[c] += dyr[c];
    }
    if (dx) {
      const double mean_dxhat = sum_dxhat / Cd;
      const double mean_dxhat_xhat = sum_dxhat_xhat / Cd;
      double* dxr = dx + n * C;
      for (std::size_t c = 0; c < C; ++c) {
        const double xhat = (xr[c] - mean) * rstd;
        dxr[c] += rstd * (dyr[c] * w[c] - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  }
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const std::size_t C = layer_norm_width(x, weight, bias);
  const std::size_t N = C == 0 ? 0 : x.numel() / C;

  Tensor out = Tensor::empty(x.shape());  // [..., C]
  const bool grad = autograd::needs_grad(x, weight, bias);
  // Per-row statistics, kept only for the backward.
  Tensor saved_mean = grad ? Tensor::empty({N}) : Tensor();  // [N]
  Tensor saved_rstd = grad ? Tensor::empty({N}) : Tensor();  // [N]

  const double* xs = x.data().data();
  const double* w = weight.data().data();
  const double* b = bias.data().data();
  double* o = out.data().data();
  double* mean_out = grad ? saved_mean.data().data() : nullptr;
  double* rstd_out = grad ? saved_rstd.data().data() : nullptr;
  const auto Cd = static_cast<double>(C);
  for (std::size_t n = 0; n < N; ++n) {
    const double* xr = xs + n * C;
    double* orow = o + n * C;
    const double mean = sum_of(C, [xr](std::size_t c) { return xr[c]; }) / Cd;
    // Two passes (mean, then squared deviations) rather than E[x²] − E[x]²,
    // which cancels catastrophically when |mean| ≫ std.
    const double sq = sum_of(C, [xr, mean](std::size_t c) { return (xr[c] - mean) * (xr[c] - mean); });
    const double rstd = 1.0 / std::sqrt(sq / Cd + eps);
    for (std::size_t c = 0; c < C; ++c) orow[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    if (grad) {
      mean_out[n] = mean;
      rstd_out[n] = rstd;
    }
  }

  if (!grad) return out;
  autograd::record(out, {x, weight, bias}, [x, weight, bias, saved_mean, saved_rstd, N, C](const Tensor& y) {
    layer_norm_backward(y, x, weight, bias, saved_mean, saved_rstd, N, C);
  });
  return out;
}

// ---------------------------------------------------------------------------
// gelu, GPT-2's tanh approximation:
//   y = ½·x·(1 + tanh u),  u = k·(x + a·x³),  k = √(2/π),  a = 0.044715.
// Since ½·(1 + tanh u) = σ(2u) = 1 / (1 + exp(−2u)), it is computed as
//   y = x·s,  s = σ(2u),  dy/dx = s + 2·x·s·(1 − s)·k·(1 + 3a·x²),
// the same function and its exact derivative, with one exp instead of a tanh
// (~1.6x faster here) and without the cancellation in 1 + tanh u for u ≪ 0,
// which loses every digit of y in the negative tail.

namespace {
constexpr double kGeluA = 0.044715;
constexpr double kGeluK = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // √(2/π)

// The loops are functions of their own so that they can be cloned for AVX2
// (see vec_math.h); both clones vectorise, since vexp is inline arithmetic.
inline double gelu_s(double v) { return 1.0 / (1.0 + vexp(-2.0 * kGeluK * (v + kGeluA * v * v * v))); }

// y = x / (1 + exp(−2u)).
TINYLLM_CLONES void gelu_forward(const double* __restrict x, double* __restrict y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = v / (1.0 + vexp(-2.0 * kGeluK * (v + kGeluA * v * v * v)));
  }
}

TINYLLM_CLONES void gelu_backward(const double* __restrict x, const double* __restrict dy, double* __restrict dx,
                                  std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i], s = gelu_s(v);
    dx[i] += dy[i] * (s + 2.0 * v * s * (1.0 - s) * kGeluK * (1.0 + 3.0 * kGeluA * v * v));
  }
}
}  // namespace

Tensor gelu(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape());
  gelu_forward(x.data().data(), out.data().data(), x.numel());
  if (!autograd::needs_grad(x)) return out;
  // s is recomputed in the backward rather than saved: an [n] buffer per
  // MLP, kept from forward to backward, is 4·C values per token per layer
  // (a sixth of what a block keeps), against ~1 ms more backward per
  // [1024, 512] here (1.9 ms instead of 0.8).
  autograd::record(out, {x}, [x](const Tensor& y) {
    gelu_backward(x.data().data(), y.grad().data(), x.mutable_grad().data(), x.numel());
  });
  return out;
}

// ---------------------------------------------------------------------------
// cross_entropy: rows of V logits; per row, lse = m + log Σ exp(x − m) with
// m the row max (so exp never overflows), loss_n = lse − x[target].
// Backward: dx = (softmax − onehot(target)) · dL / N, softmax = exp(x − lse).

namespace {
// e[v] = exp(row[v] − shift). Apart from the sum that follows it, so that it
// vectorises: a running sum in the same loop would hold it to one element at
// a time, and summing in a new order would change the loss's last bits.
TINYLLM_CLONES void exp_shifted(const double* __restrict row, double shift, double* __restrict e, std::size_t n) {
  for (std::size_t v = 0; v < n; ++v) e[v] = vexp(row[v] - shift);
}

// drow[v] += exp(row[v] − shift) · scale
TINYLLM_CLONES void add_exp_shifted(const double* __restrict row, double shift, double scale, double* __restrict drow,
                                    std::size_t n) {
  for (std::size_t v = 0; v < n; ++v) drow[v] += vexp(row[v] - shift) * scale;
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, std::span<const int> targets) {
  if (logits.dim() == 0) {
    throw std::invalid_argument(
        fmt::format("cross_entropy: logits must have a last dim [..., V] (got {})", to_string(logits.shape())));
  }
  const std::size_t V = logits.shape().back();
  if (V == 0) {
    throw std::invalid_argument(
        fmt::format("cross_entropy: vocabulary size V must be positive (got logits {})", to_string(logits.shape())));
  }
  const std::size_t N = logits.numel() / V;
  if (targets.size() != N) {
    throw std::invalid_argument(
        fmt::format("cross_entropy: targets must have one per row of logits {} ({} rows) (got {})",
                    to_string(logits.shape()), N, targets.size()));
  }
  if (N == 0) {
    // The mean over no rows is 0/0; say so rather than hand back a NaN loss.
    throw std::invalid_argument(
        fmt::format("cross_entropy: logits must have at least one row (got {})", to_string(logits.shape())));
  }
  for (std::size_t n = 0; n < N; ++n) {
    if (targets[n] < 0 || static_cast<std::size_t>(targets[n]) >= V) {
      throw std::invalid_argument(
          fmt::format("cross_entropy: target {} in row {} is outside the vocabulary [0, {})", targets[n], n, V));
    }
  }

  const bool grad = autograd::needs_grad(logits);
  Tensor saved_lse = grad ? Tensor::empty({N}) : Tensor();  // [N]
  const double* xs = logits.data().data();
  Tensor exps = Tensor::empty({V});  // [V], one row's exp(x − m) at a time
  double* e = exps.data().data();
  double total = 0.0;
  for (std::size_t n = 0; n < N; ++n) {
    const double* row = xs + n * V;
    double m = row[0];
    for (std::size_t v = 1; v < V; ++v) m = std::max(m, row[v]);
    exp_shifted(row, m, e, V);
    double s = 0.0;
    for (std::size_t v = 0; v < V; ++v) s += e[v];
    const double log_s = std::log(s);
    // (m − x[t]) + log s, not lse − x[t]: at logits of 1e4 the latter would
    // subtract two numbers near 1e4 and keep only ~12 digits of a small loss.
    total += (m - row[targets[n]]) + log_s;
    if (grad) saved_lse.data()[n] = m + log_s;
  }
  Tensor out = Tensor::empty({});  // []
  out.data()[0] = total / static_cast<double>(N);

  if (!grad) return out;
  autograd::record(
      out, {logits},
      [logits, saved_lse, targets = std::vector<int>(targets.begin(), targets.end()), N, V](const Tensor& y) {
        const double scale = y.grad()[0] / static_cast<double>(N);
        const double* xs = logits.data().data();
        const double* lse = saved_lse.data().data();
        double* dx = logits.mutable_grad().data();
        for (std::size_t n = 0; n < N; ++n) {
          const double* row = xs + n * V;
          double* drow = dx + n * V;
          add_exp_shifted(row, lse[n], scale, drow, V);
          drow[targets[n]] -= scale;
        }
      });
  return out;
}

}  // namespace tinyllm
