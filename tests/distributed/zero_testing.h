// What the DDP and ZeRO tests share: a 44-parameter network (docs/ZERO.md's
// model for the memory test), a batch whose every value is a formula of
// (step, row, column), and one training loop that runs a mode (DDP or a
// ZeRO stage) on p ranks or the same training on one process. Equality is
// always against the one-process loop, computed in the test's own process.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tinyllm/distributed/zero.h"
#include "tinyllm/nn/linear.h"
#include "tinyllm/optim/optimizer.h"

namespace tinyllm::testing {

// fc2(gelu(fc1(x))): with the defaults 5·4 + 4 + 4·4 + 4 = 44 parameters
// in four tensors of different shapes, so a parameter put in another's
// place shows.
class TinyNet : public nn::Module {
 public:
  explicit TinyNet(std::uint64_t seed, std::size_t in = 5, std::size_t hidden = 4, std::size_t out = 4);
  Tensor forward(const Tensor& x) const;

  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Mean squared error of the net over global rows [first, first + count) of
// step `step`'s batch.
Tensor tiny_loss(const TinyNet& net, int step, std::size_t first, std::size_t count);

enum class Mode { Ddp, Zero1, Zero2, Zero3 };
std::string mode_name(Mode mode);  // "Ddp", "Zero1", ...

struct TrainSetup {
  Mode mode = Mode::Ddp;
  optim::OptimizerFactory make_optimizer;
  int steps = 4;
  std::size_t rows = 24;  // the global batch; divides by p·accum for p in 1..4 and accum 1, 2
  int accum = 1;          // micro-batches per step
  double clip = 0;        // global gradient norm limit; 0: no clipping
  std::uint64_t seed = 7;
  bool seed_by_rank = false;  // rank r builds its net from seed + r
};

// The training loop of a mode on this rank, for any model: each step,
// backward_step(step) computes this rank's gradients (several backward
// calls for accumulation), then DDP or ZeRO reduces, clips (clip > 0) and
// steps. Returns every parameter afterwards (in stage 3, gathered).
std::vector<double> train_mode(dist::Comm& comm, Mode mode, const std::shared_ptr<nn::Module>& model,
                               const optim::OptimizerFactory& make_optimizer, int steps, double clip,
                               const std::function<void(int step)>& backward_step);
// The same loop on one process.
std::vector<double> train_alone(nn::Module& model, const optim::OptimizerFactory& make_optimizer, int steps,
                                double clip, const std::function<void(int step)>& backward_step);

// Every parameter of the net after setup.steps steps of one process on the
// whole batch (the mode is ignored).
std::vector<double> train_one_process(const TrainSetup& setup);
// The same training on this rank's rows: every parameter afterwards (in
// stage 3, gathered).
std::vector<double> train_ranks(dist::Comm& comm, const TrainSetup& setup);

std::vector<double> flat_values(const std::vector<Tensor>& params);
std::vector<double> flat_grads(const std::vector<Tensor>& params);

// Every rank holds exactly rank 0's bits (compared after a broadcast).
void expect_same_bits_on_every_rank(dist::Comm& comm, const std::vector<double>& values, const std::string& what);
void expect_all_within(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                       const std::string& what);

}  // namespace tinyllm::testing
