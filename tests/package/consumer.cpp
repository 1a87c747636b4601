// Uses the public API as docs/DESIGN.md section 2 spells it; exits 0 when a step moves w.
#include <tinyllm/tinyllm.h>

#include <cmath>
#include <cstdio>

int main() {
  using namespace tinyllm;
  Tensor w = Tensor::from(std::vector<double>{0, 1, 2, 3, 4, 5}, {3, 2}, /*requires_grad=*/true);
  Tensor t = Tensor::from(std::vector<double>{1, 1, 1, 1, 1, 1}, {3, 2});
  Tensor loss = ((w - t) * (w - t)).sum() * 0.5;
  loss.backward();
  optim::AdamW opt({w}, {.lr = 0.1, .betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.05});
  opt.step();
  const bool moved = std::abs(w.data()[0] - (0.0 + 0.1)) < 1e-6;
  std::printf("w[0] after one step: %.6f\n", w.data()[0]);
  return moved ? 0 : 1;
}
