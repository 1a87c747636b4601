// AdamW, torch.optim.AdamW's _single_tensor_adamw written as one fused pass
// per parameter: PyTorch's six whole-array ops (mul_, lerp_, mul_, addcmul_,
// sqrt/div/add_, addcdiv_) become one loop that reads p, g, m, v and writes
// p, m, v once, with the same arithmetic in the same order.
#include "tinyllm/optim/adamw.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <string_view>

#include "../support/check.h"
#include "../support/target_clones.h"

namespace tinyllm::optim {

namespace {

void check_options(const AdamWOptions& o) {
  // Written as !(rule) so that NaN is rejected too.
  if (!(o.lr >= 0)) throw std::invalid_argument(fmt::format("AdamW: lr must be >= 0 (got {})", o.lr));
  if (!(o.eps >= 0)) throw std::invalid_argument(fmt::format("AdamW: eps must be >= 0 (got {})", o.eps));
  const auto [beta1, beta2] = o.betas;
  if (!(beta1 >= 0 && beta1 < 1)) {
    throw std::invalid_argument(fmt::format("AdamW: betas.first must be in [0, 1) (got {})", beta1));
  }
  if (!(beta2 >= 0 && beta2 < 1)) {
    throw std::invalid_argument(fmt::format("AdamW: betas.second must be in [0, 1) (got {})", beta2));
  }
  if (!(o.weight_decay >= 0)) {
    throw std::invalid_argument(fmt::format("AdamW: weight_decay must be >= 0 (got {})", o.weight_decay));
  }
}

AdamWOptions checked(AdamWOptions options) {
  check_options(options);
  return options;
}

void check_no_decay(const NoDecay& no_decay, const std::vector<Tensor>& params) {
  if (no_decay.size() > params.size()) {
    throw std::invalid_argument(
        fmt::format("AdamW: no_decay lists {} parameters, but there are {}", no_decay.size(), params.size()));
  }
  for (std::size_t i = 0; i < no_decay.size(); ++i) {
    std::size_t end = 0;
    for (const auto& [first, last] : no_decay[i]) {
      if (!(end <= first && first < last && last <= params[i].numel())) {
        throw std::invalid_argument(fmt::format(
            "AdamW: no_decay range [{}, {}) of parameter {} ({} elements) must be non-empty, ascending and inside it",
            first, last, i, params[i].numel()));
      }
      end = last;
    }
  }
}

// Everything in the update that depends on the step but not on the element.
struct StepConstants {
  double decay;   // 1 − lr·wd
  double weight;  // lerp weight 1 − β1
  double one_minus_weight;
  double beta2;
  double one_minus_beta2;
  double step_size;  // lr / (1 − β1^t)
  double bc2_sqrt;   // sqrt(1 − β2^t)
  double eps;
};

// One element per iteration, 7 doubles moved: read p, g, m, v; write p, m, v.
//   p ·= 1 − lr·wd
//   m = lerp(m, g, 1 − β1)
//   v = β2·v + (1 − β2)·g·g
//   p −= step_size · m / (sqrt(v) / sqrt(1 − β2^t) + eps)
// PyTorch's lerp anchors at the end point when the weight is >= 0.5
// (β1 <= 0.5): g − (g − m)·(1 − w), not m + w·(g − m). The two round
// differently, so the form is a template argument, chosen once per step.
// The division by bc2_sqrt stays a division, as in PyTorch; a hoisted
// reciprocal would change the last bit.
//
// Speed: with baseline x86-64's 2-wide SSE2 the two divisions and the square
// root, not memory, bound this loop (~2.9 ns per element in cache, against
// ~1.7 ns for 56 bytes at one core's bandwidth); an AVX2 clone halves that,
// chosen at load time. Neither clone has FMA, so both give the same bits,
// and every rank of a mixed cluster the same update.
template <bool kLerpFromEnd>
TINYLLM_CLONES void adamw_update(double* __restrict p, const double* __restrict g, double* __restrict m,
                                 double* __restrict v, std::size_t n, StepConstants k) {
  for (std::size_t j = 0; j < n; ++j) {
    const double gj = g[j];
    const double diff = gj - m[j];
    const double mj = kLerpFromEnd ? gj - diff * k.one_minus_weight : m[j] + k.weight * diff;
    const double vj = k.beta2 * v[j] + k.one_minus_beta2 * gj * gj;
    m[j] = mj;
    v[j] = vj;
    p[j] = p[j] * k.decay - k.step_size * mj / (std::sqrt(vj) / k.bc2_sqrt + k.eps);
  }
}

}  // namespace

std::string AdamW::describe() const {
  const AdamWOptions& o = options_;
  return fmt::format("AdamW(lr={}, betas=({}, {}), eps={}, weight_decay={})", o.lr, o.betas.first, o.betas.second,
                     o.eps, o.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options, NoDecay no_decay)
    : Optimizer(std::move(params)), options_(checked(options)), no_decay_(std::move(no_decay)), state_(params_.size()) {
  check_no_decay(no_decay_, params_);
}

OptimizerFactory AdamW::factory(AdamWOptions options, NoDecay no_decay) {
  check_options(options);
  return [options, no_decay](std::vector<Tensor> params) -> std::unique_ptr<Optimizer> {
    return std::make_unique<AdamW>(std::move(params), options, no_decay);
  };
}

void AdamW::step() {
  const auto [beta1, beta2] = options_.betas;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    const std::span<double> grad = param.grad();
    if (grad.empty()) continue;
    TINYLLM_CHECK(grad.size() == param.numel(), "AdamW: parameter ", i, " has ", param.numel(),
                  " elements but its grad has ", grad.size());

    ParamState& s = state_[i];
    if (!s.exp_avg.defined()) {
      s.exp_avg = Tensor::zeros(param.shape());
      s.exp_avg_sq = Tensor::zeros(param.shape());
    }
    s.step += 1;

    StepConstants c{};
    c.decay = 1 - options_.lr * options_.weight_decay;
    c.weight = 1 - beta1;
    c.one_minus_weight = 1 - c.weight;
    c.beta2 = beta2;
    c.one_minus_beta2 = 1 - beta2;
    c.step_size = options_.lr / (1 - std::pow(beta1, s.step));
    c.bc2_sqrt = std::sqrt(1 - std::pow(beta2, s.step));
    c.eps = options_.eps;

    // Runs that decay and runs that do not, alternating.
    const auto update = [&](std::size_t first, std::size_t last, double decay) {
      if (first == last) return;
      StepConstants k = c;
      k.decay = decay;
      double* p = param.data().data() + first;
      double* m = s.exp_avg.data().data() + first;
      double* v = s.exp_avg_sq.data().data() + first;
      if (k.weight < 0.5) {
        adamw_update<false>(p, grad.data() + first, m, v, last - first, k);
      } else {
        adamw_update<true>(p, grad.data() + first, m, v, last - first, k);
      }
    };
    std::size_t done = 0;
    if (i < no_decay_.size()) {
      for (const auto& [first, last] : no_decay_[i]) {
        update(done, first, c.decay);
        update(first, last, 1.0);
        done = last;
      }
    }
    update(done, grad.size(), c.decay);
  }
}

StateDict AdamW::state_dict() const {
  StateDict state;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = state_[i];
    if (!s.exp_avg.defined()) continue;
    state.tensors.emplace_back(fmt::format("{}.exp_avg", i), s.exp_avg);
    state.tensors.emplace_back(fmt::format("{}.exp_avg_sq", i), s.exp_avg_sq);
    state.scalars.emplace_back(fmt::format("{}.step", i), s.step);
  }
  return state;
}

void AdamW::load_state_dict(const StateDict& state) {
  static constexpr std::array<std::string_view, 2> kTensorFields = {"exp_avg", "exp_avg_sq"};
  static constexpr std::array<std::string_view, 1> kScalarFields = {"step"};
  const auto entries = parse_state_dict(state, "AdamW", kTensorFields, kScalarFields);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]) continue;
    const double step = entries[i]->scalars[0];
    if (!(step >= 0 && step <= 0x1p53 && std::floor(step) == step)) {
      throw std::invalid_argument(
          fmt::format("AdamW::load_state_dict: {}.step must be a whole number >= 0 (got {})", i, step));
    }
  }
  // Fresh arrays, so the state never aliases the caller's tensors or itself.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    ParamState& s = state_[i];
    if (entries[i]) {
      s.step = entries[i]->scalars[0];
      s.exp_avg = entries[i]->tensors[0]->clone();
      s.exp_avg_sq = entries[i]->tensors[1]->clone();
    } else {
      s = ParamState{};
    }
  }
}

}  // namespace tinyllm::optim
