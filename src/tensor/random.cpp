#include "tinyllm/tensor/random.h"

#include <cmath>
#include <numbers>

#include "tinyllm/tensor/deferred_init.h"

namespace tinyllm {

double Generator::uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double Generator::normal(double mean, double std) {
  if (has_spare_) {
    has_spare_ = false;
    return mean + std * spare_;
  }
  // 1 - uniform() lies in (0, 1], so the log is finite.
  const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));
  const double angle = 2.0 * std::numbers::pi * uniform();
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return mean + std * radius * std::cos(angle);
}

void Generator::skip_normals(std::size_t count) {
  if (count == 0) return;
  if (has_spare_) {
    has_spare_ = false;
    --count;
  }
  engine_.discard(2 * (count / 2));  // each pair of normals is two draws
  if (count % 2 == 1) normal();      // and an odd one leaves its pair's spare
}

void normal_(const Tensor& t, Generator& gen, double mean, double std) {
  if (is_deferred(t)) {
    set_deferred_init(t, [start = gen, mean, std](std::size_t begin, std::span<double> out) {
      Generator g = start;
      g.skip_normals(begin);
      for (double& x : out) x = g.normal(mean, std);
    });
    gen.skip_normals(t.numel());
    return;
  }
  for (double& x : t.data()) x = gen.normal(mean, std);
}

Tensor randn(Shape shape, Generator& gen, bool requires_grad) {
  Tensor t = Tensor::empty(std::move(shape));
  normal_(t, gen);
  t.set_requires_grad(requires_grad);
  return t;
}

}  // namespace tinyllm
