// SGD, torch.optim.SGD's _single_tensor_sgd written as one pass per
// parameter: each element's decayed gradient, buffer and update are computed
// together instead of as PyTorch's three whole-array ops, with the same
// arithmetic in the same order, so the results carry the same bits.
#include "tinyllm/optim/sgd.h"

#include <fmt/format.h>

#include <array>
#include <stdexcept>
#include <string_view>

#include "../support/check.h"

namespace tinyllm::optim {

namespace {

void check_options(const SGDOptions& o) {
  // Written as !(x >= 0) so that NaN is rejected too.
  if (!(o.lr >= 0)) throw std::invalid_argument(fmt::format("SGD: lr must be >= 0 (got {})", o.lr));
  if (!(o.momentum >= 0)) {
    throw std::invalid_argument(fmt::format("SGD: momentum must be >= 0 (got {})", o.momentum));
  }
  if (!(o.weight_decay >= 0)) {
    throw std::invalid_argument(fmt::format("SGD: weight_decay must be >= 0 (got {})", o.weight_decay));
  }
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    throw std::invalid_argument(fmt::format(
        "SGD: nesterov needs momentum > 0 and dampening 0 (got momentum {}, dampening {})", o.momentum, o.dampening));
  }
}

SGDOptions checked(SGDOptions options) {
  check_options(options);
  return options;
}

}  // namespace

std::string SGD::describe() const {
  const SGDOptions& o = options_;
  return fmt::format("SGD(lr={}, momentum={}, dampening={}, weight_decay={}, nesterov={})", o.lr, o.momentum,
                     o.dampening, o.weight_decay, o.nesterov);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params)), options_(checked(options)), momentum_buffers_(params_.size()) {}

OptimizerFactory SGD::factory(SGDOptions options) {
  check_options(options);
  return [options](std::vector<Tensor> params) -> std::unique_ptr<Optimizer> {
    return std::make_unique<SGD>(std::move(params), options);
  };
}

void SGD::step() {
  const double lr = options_.lr;
  const double momentum = options_.momentum;
  const double keep = 1 - options_.dampening;  // the share of d that enters the buffer
  const double weight_decay = options_.weight_decay;
  // PyTorch adds wd·p only when wd != 0, which matters for non-finite p.
  const bool decay = weight_decay != 0;
  const bool nesterov = options_.nesterov;

  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    const std::span<double> grad = param.grad();
    if (grad.empty()) continue;
    TINYLLM_CHECK(grad.size() == param.numel(), "SGD: parameter ", i, " has ", param.numel(),
                  " elements but its grad has ", grad.size());
    const std::size_t n = grad.size();
    double* p = param.data().data();
    const double* g = grad.data();

    if (momentum == 0) {
      for (std::size_t j = 0; j < n; ++j) {
        const double d = decay ? g[j] + weight_decay * p[j] : g[j];
        p[j] -= lr * d;
      }
      continue;
    }

    // d = g + wd·p; buf = d on the first step, else momentum·buf + (1 − dampening)·d;
    // the step direction is d + momentum·buf (Nesterov) or buf.
    Tensor& buffer = momentum_buffers_[i];
    const bool first = !buffer.defined();
    if (first) buffer = Tensor::empty(param.shape());
    double* b = buffer.data().data();
    for (std::size_t j = 0; j < n; ++j) {
      const double d = decay ? g[j] + weight_decay * p[j] : g[j];
      const double bj = first ? d : momentum * b[j] + keep * d;
      b[j] = bj;
      p[j] -= lr * (nesterov ? d + momentum * bj : bj);
    }
  }
}

StateDict SGD::state_dict() const {
  StateDict state;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (momentum_buffers_[i].defined()) {
      state.tensors.emplace_back(fmt::format("{}.momentum_buffer", i), momentum_buffers_[i]);
    }
  }
  return state;
}

void SGD::load_state_dict(const StateDict& state) {
  // Without momentum SGD keeps nothing, so any buffer is an unexpected name.
  static constexpr std::array<std::string_view, 1> kWithMomentum = {"momentum_buffer"};
  const std::span<const std::string_view> tensor_fields =
      options_.momentum != 0 ? std::span<const std::string_view>(kWithMomentum) : std::span<const std::string_view>();
  const auto entries = parse_state_dict(state, "SGD", tensor_fields, {});
  // Fresh arrays, so the state never aliases the caller's tensors or itself.
  for (std::size_t i = 0; i < params_.size(); ++i) {
    momentum_buffers_[i] = entries[i] ? entries[i]->tensors[0]->clone() : Tensor();
  }
}

}  // namespace tinyllm::optim
