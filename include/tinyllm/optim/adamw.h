// AdamW exactly as torch.optim.AdamW (single-tensor path): decoupled weight
// decay p ·= 1 − lr·wd, bias-corrected moments, eps added after the square
// root. No amsgrad or maximize; in place of parameter groups, ranges of
// elements that weight decay skips (see NoDecay). References: Loshchilov &
// Hutter, "Decoupled Weight Decay Regularization" (2019), Algorithm 2, and
// https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "tinyllm/optim/optimizer.h"

namespace tinyllm::optim {

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Per parameter, the ranges [begin, end) of its elements that weight decay
// skips, ascending and disjoint; a parameter past the list's end decays
// whole. This is PyTorch's second parameter group with weight_decay 0 (the
// same bits: p ·= 1 there), taken down to elements so that a ZeRO chunk,
// one flat parameter across tensors, keeps each element's own rule.
using NoDecay = std::vector<std::vector<std::pair<std::size_t, std::size_t>>>;

class AdamW : public Optimizer {
 public:
  // std::invalid_argument unless lr >= 0, eps >= 0, 0 <= beta < 1 and
  // weight_decay >= 0, and for a no_decay list longer than the parameters
  // or a range that is empty, out of order or past its parameter's end.
  AdamW(std::vector<Tensor> params, AdamWOptions options = {}, NoDecay no_decay = {});
  // Checks the options now, so a bad configuration fails before any rank
  // builds an optimizer.
  static OptimizerFactory factory(AdamWOptions options, NoDecay no_decay = {});

  void step() override;
  // "<i>.exp_avg", "<i>.exp_avg_sq" and the scalar "<i>.step" for each
  // parameter that has had a grad at some step.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  const AdamWOptions& options() const { return options_; }
  double lr() const override { return options_.lr; }
  std::string describe() const override;

 private:
  void apply_lr(double lr) override { options_.lr = lr; }

  struct ParamState {
    double step = 0;    // steps this parameter took (a whole number, kept as PyTorch's float)
    Tensor exp_avg;     // m, undefined until the first step
    Tensor exp_avg_sq;  // v
  };

  AdamWOptions options_;
  NoDecay no_decay_;
  std::vector<ParamState> state_;  // per parameter
};

}  // namespace tinyllm::optim
