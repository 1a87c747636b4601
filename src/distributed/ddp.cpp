#include "tinyllm/distributed/ddp.h"

#include <stdexcept>

#include "comm_stream.h"
#include "flat.h"
#include "reducer.h"
#include "tinyllm/distributed/chunk.h"
#include "tinyllm/optim/clip_grad.h"
#include "tinyllm/tensor/deferred_init.h"

namespace tinyllm::dist {

DDP::DDP(std::shared_ptr<nn::Module> model, Comm& comm, const BucketOptions& buckets)
    : module_(std::move(model)), comm_(comm) {
  if (!module_) throw std::invalid_argument("DDP: model must not be null");
  register_module("module", module_);
  params_ = module_->parameters();
  check_same_parameters(comm_, params_, "DDP", /*stage=*/0);
  materialize(params_);              // a deferred model: every replica holds all of it anyway
  broadcast_params(comm_, params_);  // the frozen too: the replicas start equal
  take_frozen(params_);
  stream_ = std::make_unique<CommStream>(comm_, buckets.overlap);
  reducer_ = std::make_unique<Reducer>(params_, comm_, *stream_, buckets, Reducer::Options{.who = "DDP"});
}

DDP::~DDP() = default;

bool DDP::overlapping() const { return stream_->overlapping(); }

void DDP::sync_grads() { reducer_->finish("DDP::sync_grads"); }

NoSyncGuard DDP::no_sync() { return reducer_->no_sync(); }

void DDP::add_leaf() { reducer_->end_leaf(); }

double DDP::clip_grad_norm(double max_norm) {
  // Called before any backward (or after zero_grad) it would return a norm
  // of 0 as if clipping had happened. Every replica is in the same state, so
  // every rank throws, before any collective.
  if (reducer_->nothing_yet()) throw reducer_->no_gradients_yet();
  if (!reducer_->bitwise()) return optim::clip_grad_norm(params_, max_norm);
  const std::span<double> grads = reducer_->adopt_flat();
  // Every rank holds the same gradient: each squares its chunk of it.
  const auto [a, b] = chunk_bounds(grads.size(), comm_.size(), comm_.rank());
  const double total_norm = reducer_->norm_of_parts(grads.subspan(a, b - a));
  const double coefficient = optim::clip_coefficient(total_norm, max_norm);
  for (double& g : grads) g *= coefficient;
  return total_norm;
}

std::size_t DDP::grad_bytes() const { return reducer_->held() * sizeof(double); }

}  // namespace tinyllm::dist
