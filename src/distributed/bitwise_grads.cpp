#include "bitwise_grads.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "flat.h"

namespace tinyllm::dist {

BitwiseGrads::BitwiseGrads(std::vector<Tensor> params, std::size_t chunk, bool drop_grads)
    : params_(std::move(params)),
      layout_(params_),
      drop_grads_(drop_grads),
      sum_(layout_.numel()),
      chunk_limbs_(ExactSum::kLimbs * chunk) {}

void BitwiseGrads::add(std::size_t first, std::size_t last) {
  for (std::size_t i = first; i < last; ++i) {
    const std::span<double> grad = params_[i].grad();
    if (grad.empty()) continue;
    if (drop_grads_) {
      sum_.add_part(layout_.begin(i), grad);
      params_[i].zero_grad();
    } else {
      sum_.take_part(layout_.begin(i), grad);
    }
  }
}

void BitwiseGrads::end_leaf(GradBuckets& buckets, const char* who) {
  if (!buckets.touched()) {
    throw std::logic_error(
        fmt::format("{}: no backward since the last add_leaf() (each leaf's backward is followed by exactly one "
                    "add_leaf(); another would count an empty leaf and shrink the mean)",
                    who));
  }
  buckets.flush();
  sum_.end_term();
}

namespace {

// Out of the exact range, ExactSum's limbs turn an element into NaN: the
// step must not hand that to the optimizer as a parameter update.
void check_finite(Comm& comm, std::span<const double> mean, bool same_everywhere, const char* who) {
  const auto bad = std::find_if(mean.begin(), mean.end(), [](double g) { return !std::isfinite(g); });
  double any = bad != mean.end() ? 1.0 : 0.0;
  if (!same_everywhere) comm.all_reduce({&any, 1}, ReduceOp::Sum);
  if (any == 0) return;
  throw std::range_error(fmt::format(
      "{}: bitwise mode: the mean gradient is not finite{}: a gradient was NaN, infinite or beyond bitwise mode's "
      "exact range, |g| < 2^20 (docs/BITWISE.md); lower the learning rate, or train without bitwise mode",
      who, bad != mean.end() ? fmt::format(" (element {} of {} is {})", bad - mean.begin(), mean.size(), *bad) : ""));
}

}  // namespace

double BitwiseGrads::leaves(Comm& comm, const char* who) {
  // Counts below 2^53 sum exactly in any order.
  double count = static_cast<double>(sum_.terms());
  comm.all_reduce({&count, 1}, ReduceOp::Sum);
  if (count == 0) {
    throw std::invalid_argument(
        fmt::format("{}: bitwise mode, but no rank added a leaf (call add_leaf() after each leaf's backward)", who));
  }
  return count;
}

void BitwiseGrads::all_reduce_mean(Comm& comm, std::span<double> flat, const char* who) {
  const double count = leaves(comm, who);
  comm.all_reduce(sum_.limbs(), ReduceOp::Sum);
  sum_.result(flat);
  for (double& g : flat) g /= count;
  sum_.clear();
  check_finite(comm, flat, true, who);
}

void BitwiseGrads::reduce_scatter_mean(Comm& comm, std::span<double> chunk, const char* who) {
  const double count = leaves(comm, who);
  const std::span<double> s(chunk_limbs_);
  const std::size_t m = chunk.size();
  for (std::size_t k = 0; k < ExactSum::kLimbs; ++k)
    comm.reduce_scatter(sum_.limb(k), s.subspan(k * m, m), ReduceOp::Sum);
  exact_sum_value(s.first(m), s.subspan(m, m), s.subspan(2 * m), chunk);
  for (double& g : chunk) g /= count;
  sum_.clear();
  check_finite(comm, chunk, false, who);
}

double exact_norm(Comm& comm, std::span<const double> x) {
  std::array<double, kSquareLimbs> limbs = exact_sum_of_squares(x);
  comm.all_reduce(limbs, ReduceOp::Sum);
  return std::sqrt(exact_sum_of_squares_value(limbs));
}

}  // namespace tinyllm::dist
