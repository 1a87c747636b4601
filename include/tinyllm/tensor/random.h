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
  // Leaves the generator as `count` calls of normal() would, without the
  // arithmetic: a deferred normal_ skips the draws it does not make.
  void skip_normals(std::size_t count);

 private:
  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// torch::nn::init::normal_: fills t in place, in row-major order. A deferred
// t (tensor/deferred_init.h) keeps a copy of the generator as its recipe
// instead, and the generator moves on as if the values had been drawn.
void normal_(const Tensor& t, Generator& gen, double mean = 0.0, double std = 1.0);
Tensor randn(Shape shape, Generator& gen, bool requires_grad = false);

}  // namespace tinyllm
