// Optimizer: the interface SGD and AdamW share, and StateDict, every array an
// optimizer holds, by name. It is not a parameter-group system: one set of
// hyperparameters covers all parameters (AdamW's NoDecay ranges stand in
// for the one group the trainer needs). Reference: torch.optim.Optimizer and libtorch's
// torch::optim::Optimizer (step, zero_grad, state_dict, load_state_dict).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm::optim {

// Names are "<parameter index>.<PyTorch's state name>": "0.exp_avg",
// "0.exp_avg_sq", "1.momentum_buffer", and scalars such as "0.step". Only
// parameters that have state appear (state is created at their first step).
struct StateDict {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<std::pair<std::string, double>> scalars;

  // 8 × elements of all tensors: the bytes a ZeRO rank counts as optimizer state.
  std::size_t bytes() const;
};

class Optimizer {
 public:
  // std::invalid_argument on an empty list, an undefined tensor, a non-leaf or
  // a tensor listed twice (it would be updated twice per step).
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Parameters whose grad is empty are skipped, as PyTorch skips p.grad is None.
  virtual void step() = 0;
  // Drops every parameter's grad buffer (set_to_none, PyTorch's default).
  void zero_grad();

  // The tensors share the optimizer's arrays (libtorch-like), no copies.
  virtual StateDict state_dict() const = 0;
  // Copies the values in and replaces the whole state, as PyTorch does: a
  // parameter absent from `state` starts afresh. Missing names (a parameter
  // with some of its state but not all), unknown or duplicate names and wrong
  // shapes throw std::invalid_argument naming them, leaving the state as it was.
  virtual void load_state_dict(const StateDict& state) = 0;

  const std::vector<Tensor>& parameters() const { return params_; }

  // The learning rate the next step() uses, kept in the subclass's options.
  // A schedule sets it between steps, as libtorch's LRScheduler sets each
  // parameter group's options().lr().
  virtual double lr() const = 0;
  // std::invalid_argument unless lr is finite and >= 0.
  void set_lr(double lr);
  // The class and its hyperparameters, as torch prints an optimizer's
  // defaults: "SGD(lr=0.1, momentum=0, ...)", each value in the shortest
  // form that reads back to the same double, so that equal strings mean
  // equal hyperparameters (ZeroOptimizer checks its ranks by them).
  virtual std::string describe() const = 0;

 protected:
  // One parameter's entries in a StateDict, in the order of the field lists
  // given to parse_state_dict.
  struct ParamEntries {
    std::vector<const Tensor*> tensors;
    std::vector<double> scalars;
  };

  // Checks `state` against the fields this optimizer keeps per parameter and
  // sorts its entries by parameter; nullopt for a parameter without state.
  // Throws std::invalid_argument listing every problem, prefixed by `who`.
  std::vector<std::optional<ParamEntries>> parse_state_dict(const StateDict& state, std::string_view who,
                                                            std::span<const std::string_view> tensor_fields,
                                                            std::span<const std::string_view> scalar_fields) const;

  std::vector<Tensor> params_;

 private:
  // Stores an lr that set_lr has checked.
  virtual void apply_lr(double lr) = 0;
};

// Builds an optimizer, hyperparameters included, over any parameters: the
// `opt_cls, **kw` of docs/ZERO.md, which ZeroOptimizer calls on its flat chunk.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor> params)>;

}  // namespace tinyllm::optim
