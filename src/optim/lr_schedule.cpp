// LRSchedule, nanoGPT's get_lr line for line: the same operations in the
// same order, so a schedule computed here and one computed in Python give
// the same bits.
#include "tinyllm/optim/lr_schedule.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace tinyllm::optim {

const char* lr_schedule_name(LRScheduleKind kind) { return kind == LRScheduleKind::Cosine ? "cosine" : "constant"; }

LRScheduleKind parse_lr_schedule(std::string_view name) {
  for (LRScheduleKind kind : {LRScheduleKind::Cosine, LRScheduleKind::Constant}) {
    if (name == lr_schedule_name(kind)) return kind;
  }
  throw std::invalid_argument(fmt::format("schedule must be cosine or constant (got '{}')", name));
}

LRSchedule::LRSchedule(double lr, LRScheduleOptions options) : lr_(lr), options_(options) {
  const LRScheduleOptions& o = options_;
  // Written as !(rule) so that NaN is rejected too.
  if (!(std::isfinite(lr) && lr >= 0)) {
    throw std::invalid_argument(fmt::format("LRSchedule: lr must be finite and >= 0 (got {})", lr));
  }
  if (!(o.min_lr >= 0)) throw std::invalid_argument(fmt::format("LRSchedule: min_lr must be >= 0 (got {})", o.min_lr));
  if (!(o.min_lr <= lr)) {
    throw std::invalid_argument(
        fmt::format("LRSchedule: min_lr must not be above lr (got min_lr {}, lr {})", o.min_lr, lr));
  }
  if (o.kind == LRScheduleKind::Cosine && o.warmup_steps >= o.decay_steps) {
    throw std::invalid_argument(
        fmt::format("LRSchedule: warmup_steps must be below decay_steps (got warmup_steps {}, decay_steps {})",
                    o.warmup_steps, o.decay_steps));
  }
}

double LRSchedule::get_lr(std::size_t step) const {
  const LRScheduleOptions& o = options_;
  if (o.kind == LRScheduleKind::Constant) return lr_;
  if (step < o.warmup_steps) {
    return lr_ * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps + 1);
  }
  if (step > o.decay_steps) return o.min_lr;
  const double decay_ratio =
      static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.decay_steps - o.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * decay_ratio));
  return o.min_lr + coeff * (lr_ - o.min_lr);
}

}  // namespace tinyllm::optim
