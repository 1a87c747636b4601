// The inputs tools/optim_reference.py gives PyTorch, shared by the SGD and
// AdamW reference tests: small integers over 8, exact in any language.
// p0 [2, 3] has a grad at every step, p1 [4] at even steps only.
#pragma once

#include <tinyllm/optim/optimizer.h>

#include <vector>

namespace tinyllm::testing {

inline void set_grad(const Tensor& w, const std::vector<double>& g) {
  w.zero_grad();
  std::span<double> grad = w.mutable_grad();
  ASSERT_EQ(grad.size(), g.size());
  std::copy(g.begin(), g.end(), grad.begin());
}

inline void expect_all_near(std::span<const double> actual, const std::vector<double>& expected, double tol,
                            const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t j = 0; j < expected.size(); ++j) {
    EXPECT_NEAR(actual[j], expected[j], tol) << what << "[" << j << "]";
  }
}

inline double reference_initial(int index, int j) { return ((5 * j + 3 * index) % 7 - 3) / 8.0; }
inline double reference_gradient(int index, int k, int j) {
  return ((37 * j + 101 * k + 17 * index + 11) % 29 - 14) / 8.0;
}

inline std::vector<Tensor> reference_params() {
  Tensor p0 = Tensor::empty({2, 3});
  Tensor p1 = Tensor::empty({4});
  for (int j = 0; j < 6; ++j) p0.data()[j] = reference_initial(0, j);
  for (int j = 0; j < 4; ++j) p1.data()[j] = reference_initial(1, j);
  p0.set_requires_grad(true);
  p1.set_requires_grad(true);
  return {p0, p1};
}

// The five steps the script takes.
inline void run_reference_steps(optim::Optimizer& opt, const std::vector<Tensor>& params) {
  for (int k = 0; k < 5; ++k) {
    opt.zero_grad();
    for (int j = 0; j < 6; ++j) params[0].mutable_grad()[j] = reference_gradient(0, k, j);
    if (k % 2 == 0)
      for (int j = 0; j < 4; ++j) params[1].mutable_grad()[j] = reference_gradient(1, k, j);
    opt.step();
  }
}

}  // namespace tinyllm::testing
