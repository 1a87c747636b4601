#include "zero_testing.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tinyllm/optim/clip_grad.h"
#include "tinyllm/tensor/ops.h"

namespace tinyllm::testing {
namespace {

constexpr std::size_t kIn = 5, kOut = 4;

double input(int step, std::size_t row, std::size_t col) {
  return static_cast<double>(static_cast<int>((row * 13 + col * 7 + static_cast<std::size_t>(step) * 5) % 11) - 5) /
         4.0;
}
double target(int step, std::size_t row, std::size_t col) {
  return static_cast<double>(static_cast<int>((row * 3 + col * 5 + static_cast<std::size_t>(step)) % 7) - 3) / 3.0;
}

// One step's gradients, over this process's rows [first, first + count) of
// the global batch, in `accum` micro-batches each scaled by 1/accum.
void backward_micro_batches(const TinyNet& net, int step, std::size_t first, std::size_t count, int accum) {
  const std::size_t micro = count / static_cast<std::size_t>(accum);
  for (int m = 0; m < accum; ++m) {
    (tiny_loss(net, step, first + static_cast<std::size_t>(m) * micro, micro) * (1.0 / accum)).backward();
  }
}

}  // namespace

TinyNet::TinyNet(std::uint64_t seed, std::size_t in, std::size_t hidden, std::size_t out) {
  Generator gen(seed);
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden, gen, true, 0.5));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out, gen, true, 0.5));
  for (Tensor bias : {fc1->bias, fc2->bias}) normal_(bias, gen, 0.0, 0.1);
}

Tensor TinyNet::forward(const Tensor& x) const { return fc2->forward(gelu(fc1->forward(x))); }

Tensor tiny_loss(const TinyNet& net, int step, std::size_t first, std::size_t count) {
  // Micro-batches are rows of the batch: with accumulation, a step's rows
  // are [first, first + count) of a batch whose every row is a formula.
  Tensor x = Tensor::empty({count, kIn}), t = Tensor::empty({count, kOut});
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t j = 0; j < kIn; ++j) x.data()[i * kIn + j] = input(step, first + i, j);
    for (std::size_t j = 0; j < kOut; ++j) t.data()[i * kOut + j] = target(step, first + i, j);
  }
  Tensor diff = net.forward(x) - t;
  return (diff * diff).mean();
}

std::string mode_name(Mode mode) {
  switch (mode) {
    case Mode::Ddp:
      return "Ddp";
    case Mode::Zero1:
      return "Zero1";
    case Mode::Zero2:
      return "Zero2";
    case Mode::Zero3:
      return "Zero3";
  }
  return "?";
}

std::vector<double> train_mode(dist::Comm& comm, Mode mode, const std::shared_ptr<nn::Module>& model,
                               const optim::OptimizerFactory& make_optimizer, int steps, double clip,
                               const std::function<void(int step)>& backward_step) {
  if (mode == Mode::Ddp) {
    dist::DDP ddp(model, comm);
    const std::vector<Tensor> params = ddp.parameters();
    std::unique_ptr<optim::Optimizer> opt = make_optimizer(params);
    for (int step = 0; step < steps; ++step) {
      opt->zero_grad();
      backward_step(step);
      ddp.sync_grads();
      if (clip > 0) optim::clip_grad_norm(params, clip);
      opt->step();
    }
    return flat_values(params);
  }
  dist::ZeroOptimizer zo(make_optimizer, model->parameters(), comm, static_cast<int>(mode));
  for (int step = 0; step < steps; ++step) {
    zo.gather();
    zo.zero_grad();
    backward_step(step);
    if (clip > 0) zo.clip_grad_norm(clip);
    zo.step();
  }
  zo.gather();
  return flat_values(model->parameters());
}

std::vector<double> train_alone(nn::Module& model, const optim::OptimizerFactory& make_optimizer, int steps,
                                double clip, const std::function<void(int step)>& backward_step) {
  const std::vector<Tensor> params = model.parameters();
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(params);
  for (int step = 0; step < steps; ++step) {
    opt->zero_grad();
    backward_step(step);
    if (clip > 0) optim::clip_grad_norm(params, clip);
    opt->step();
  }
  return flat_values(params);
}

std::vector<double> train_one_process(const TrainSetup& setup) {
  TinyNet net(setup.seed);
  // Micro-batch m of one process is the union of every rank's micro-batch m.
  return train_alone(net, setup.make_optimizer, setup.steps, setup.clip,
                     [&](int step) { backward_micro_batches(net, step, 0, setup.rows, setup.accum); });
}

std::vector<double> train_ranks(dist::Comm& comm, const TrainSetup& setup) {
  const std::size_t p = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  auto net = std::make_shared<TinyNet>(setup.seed + (setup.seed_by_rank ? r : 0));
  // Micro-batch m of rank r is rows [m·M + r·M/p, m·M + (r+1)·M/p) with
  // M = rows/accum, so that the ranks' micro-batches m together are one
  // process's.
  const std::size_t micro_rows = setup.rows / static_cast<std::size_t>(setup.accum);
  return train_mode(comm, setup.mode, net, setup.make_optimizer, setup.steps, setup.clip, [&](int step) {
    for (int m = 0; m < setup.accum; ++m) {
      const std::size_t first = static_cast<std::size_t>(m) * micro_rows + r * (micro_rows / p);
      (tiny_loss(*net, step, first, micro_rows / p) * (1.0 / setup.accum)).backward();
    }
  });
}

std::vector<double> flat_values(const std::vector<Tensor>& params) {
  std::vector<double> out;
  for (const Tensor& p : params) out.insert(out.end(), p.data().begin(), p.data().end());
  return out;
}

std::vector<double> flat_grads(const std::vector<Tensor>& params) {
  std::vector<double> out;
  for (const Tensor& p : params) {
    if (p.grad().empty()) {
      out.insert(out.end(), p.numel(), 0.0);
    } else {
      out.insert(out.end(), p.grad().begin(), p.grad().end());
    }
  }
  return out;
}

void expect_same_bits_on_every_rank(dist::Comm& comm, const std::vector<double>& values, const std::string& what) {
  std::vector<double> rank0 = values;
  comm.broadcast(rank0, 0);
  EXPECT_EQ(std::memcmp(rank0.data(), values.data(), values.size() * sizeof(double)), 0)
      << what << ": rank " << comm.rank() << " differs from rank 0 in its bits";
}

void expect_all_within(const std::vector<double>& actual, const std::vector<double>& expected, double tol,
                       const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double d = std::abs(actual[i] - expected[i]);
    if (!(d <= worst)) worst = d, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": largest difference at index " << at << " (" << actual[at] << " against "
                        << expected[at] << ")";
}

}  // namespace tinyllm::testing
