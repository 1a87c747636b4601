// Generator: a seeded source of random numbers that gives the same values on
// every platform and standard library (std::normal_distribution does not),
// so a seed fixes a model's initial weights everywhere.
#pragma once

#include <cstdint>
#include <random>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : engine_(seed) {}

  double uniform();                                    // [0, 1), 53 random bits
  double normal(double mean = 0.0, double std = 1.0);  // Box–Muller

 private:
  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// torch::nn::init::normal_: fills t in place, in row-major order.
void normal_(const Tensor& t, Generator& gen, double mean = 0.0, double std = 1.0);
Tensor randn(Shape shape, Generator& gen, bool requires_grad = false);

}  // namespace tinyllm
