// SGD exactly as torch.optim.SGD (single-tensor path): L2 weight decay added
// to the gradient, a momentum buffer that starts as a copy of the first
// (decayed) gradient, optional dampening and Nesterov. No maximize, no
// parameter groups. Reference: https://pytorch.org/docs/stable/generated/torch.optim.SGD.html
#pragma once

#include <string>
#include <vector>

#include "tinyllm/optim/optimizer.h"

namespace tinyllm::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  // std::invalid_argument when lr, momentum or weight_decay is negative, or
  // nesterov is asked for without momentum or with dampening.
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  // Checks the options now, so a bad configuration fails before any rank
  // builds an optimizer.
  static OptimizerFactory factory(SGDOptions options);

  void step() override;
  // "<i>.momentum_buffer" for each parameter that has one (momentum != 0 and
  // at least one step with a grad).
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  const SGDOptions& options() const { return options_; }
  double lr() const override { return options_.lr; }
  std::string describe() const override;

 private:
  void apply_lr(double lr) override { options_.lr = lr; }

  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;  // per parameter; undefined until its first step
};

}  // namespace tinyllm::optim
