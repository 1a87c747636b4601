// LRSchedule: the learning rate as a function of the step, nanoGPT's get_lr
// (train.py): a linear warmup, a cosine decay to min_lr, then min_lr; or a
// constant lr. A function of the absolute step only, so a run resumed at
// step s continues the schedule exactly. It is not a stateful
// torch.optim.lr_scheduler: the caller sets each step's lr with
// Optimizer::set_lr. Cosine annealing: Loshchilov & Hutter, "SGDR:
// Stochastic Gradient Descent with Warm Restarts" (2017), without restarts.
#pragma once

#include <cstddef>
#include <string_view>

namespace tinyllm::optim {

enum class LRScheduleKind { Cosine, Constant };

// "cosine" or "constant".
const char* lr_schedule_name(LRScheduleKind kind);
// std::invalid_argument naming the name for any other.
LRScheduleKind parse_lr_schedule(std::string_view name);

struct LRScheduleOptions {
  LRScheduleKind kind = LRScheduleKind::Cosine;
  // Cosine only (constant ignores them, as nanoGPT's decay_lr = False does):
  std::size_t warmup_steps = 0;  // steps 0 .. warmup_steps - 1 ramp up to lr
  std::size_t decay_steps = 1;   // the step at which the cosine reaches min_lr
  double min_lr = 0;
};

class LRSchedule {
 public:
  // lr is the peak (the optimizer's configured lr). std::invalid_argument
  // unless lr is finite and >= 0, 0 <= min_lr <= lr and, for cosine,
  // warmup_steps < decay_steps (the cosine needs a step to decay over).
  LRSchedule(double lr, LRScheduleOptions options = {});

  // For step s from 0, cosine with warmup w, decay d:
  //   s < w:       lr·(s + 1)/(w + 1)
  //   s > d:       min_lr
  //   otherwise:   min_lr + ½(1 + cos(π(s − w)/(d − w)))·(lr − min_lr)
  double get_lr(std::size_t step) const;

  double lr() const { return lr_; }
  const LRScheduleOptions& options() const { return options_; }

 private:
  double lr_;
  LRScheduleOptions options_;
};

}  // namespace tinyllm::optim
