#include "tinyllm/dist/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "flat.h"
#include "tinyllm/optim/clip_grad.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm::dist {

ZeroOptimizer::ZeroOptimizer(optim::OptimizerFactory make_inner, std::vector<Tensor> params, Comm& comm, int stage)
    : params_(std::move(params)), comm_(comm), stage_(stage) {
  if (stage_ < 1 || stage_ > 3) {
    throw std::invalid_argument(fmt::format("ZeroOptimizer: stage must be 1, 2 or 3 (got {})", stage_));
  }
  if (!make_inner) throw std::invalid_argument("ZeroOptimizer: the optimizer factory must not be empty");
  check_same_parameters(comm_, params_, "ZeroOptimizer", stage_);
  values_ = std::make_unique<FlatParams>(params_);
  comm_.broadcast(values_->span(), 0);  // the replicas start equal, as under DDP
  grads_ = std::make_unique<FlatGrads>(params_);

  n_ = flat_length(params_);
  std::tie(a_, b_) = chunk_bounds(n_, comm_.size(), comm_.rank());
  const std::span<const double> w = values_->span();
  master_chunk_ = Tensor::empty({b_ - a_});
  std::copy(w.begin() + a_, w.begin() + b_, master_chunk_.data().begin());
  inner_ = make_inner({master_chunk_});
  if (stage_ == 3) release_params();
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::gather() {
  if (gathered_) return;
  values_->allocate();
  all_gather_params();
  gathered_ = true;
}

void ZeroOptimizer::step() {
  reduce_grads();  // 1 and 2
  inner_->step();  // 3. The unchanged optimizer, on w[a, b) and its averaged gradient.
  // 4. Stages 1 and 2 all-gather the updated chunks into the parameters;
  // stage 3 keeps only its chunk until gather().
  if (stage_ < 3) {
    all_gather_params();
  } else {
    release_params();
  }
  reduced_ = false;
}

void ZeroOptimizer::reduce_grads() {
  if (reduced_) return;
  check_every_rank_has_grads(comm_, params_, "ZeroOptimizer::step");
  // 1. The grads as one flat vector in parameter order: they are views of
  // it already (backward added into it), or copied in now.
  const std::span<double> flat_grads = grads_->adopt();
  // 2. Average. Stage 1 keeps every averaged gradient in .grad; stages 2 and
  // 3 receive only their chunk's and drop the full arrays.
  const std::span<double> chunk_grad = master_chunk_.mutable_grad();
  if (stage_ == 1) {
    comm_.all_reduce(flat_grads, ReduceOp::Mean);
    std::copy(flat_grads.begin() + a_, flat_grads.begin() + b_, chunk_grad.begin());
  } else {
    comm_.reduce_scatter(flat_grads, chunk_grad, ReduceOp::Mean);
    grads_->release();
  }
  reduced_ = true;
}

// Straight into the parameters, which are views of the flat vector.
void ZeroOptimizer::all_gather_params() { comm_.all_gather(master_chunk_.data(), values_->span()); }

// Stage 3 between steps: the storage goes back to the cache, where the next
// gather() takes it up again without touching fresh pages.
void ZeroOptimizer::release_params() {
  values_->release();
  gathered_ = false;
}

void ZeroOptimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
  master_chunk_.zero_grad();
  grads_->allocate();  // the next backward's home (stages 2 and 3 gave it back)
  reduced_ = false;
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  reduce_grads();
  const std::span<double> chunk_grad = master_chunk_.grad();
  double squares = 0;
  for (double g : chunk_grad) squares += g * g;
  comm_.all_reduce({&squares, 1}, ReduceOp::Sum);
  const double total_norm = std::sqrt(squares);
  const double coefficient = optim::clip_coefficient(total_norm, max_norm);
  for (double& g : chunk_grad) g *= coefficient;
  if (stage_ == 1) {
    for (const Tensor& p : params_)
      for (double& g : p.grad()) g *= coefficient;
  }
  return total_norm;
}

MemoryBytes ZeroOptimizer::memory_bytes() const {
  std::size_t params = 0;
  for (const Tensor& p : params_) params += p.impl().data.size();
  const std::size_t grads = grads_->held() + master_chunk_.grad().size();
  std::size_t optimizer = inner_->state_dict().bytes() / sizeof(double);
  // In stage 3 the master chunk is the rank's share of the parameters; below
  // it, a copy kept beside the full parameters for the optimizer.
  (stage_ == 3 ? params : optimizer) += master_chunk_.numel();
  return {.params = params * sizeof(double), .grads = grads * sizeof(double), .optimizer = optimizer * sizeof(double)};
}

}  // namespace tinyllm::dist
