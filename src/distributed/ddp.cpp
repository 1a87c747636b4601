#include "tinyllm/distributed/ddp.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "bitwise_grads.h"
#include "comm_stream.h"
#include "flat.h"
#include "grad_buckets.h"
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
  grads_ = std::make_unique<FlatGrads>(params_);
  stream_ = std::make_unique<CommStream>(comm_, buckets.overlap);
  buckets_ = std::make_unique<GradBuckets>(params_, make_buckets(params_, buckets, "DDP"), *stream_,
                                           [this](const Bucket& b) { reduce_bucket(b); });
  if (buckets.bitwise) bitwise_ = std::make_unique<BitwiseGrads>(params_, 0, /*drop_grads=*/false);
}

// During backward, once the bucket's gradients are final: averaged in place
// on the stream, or in bitwise mode added into the exact sum.
void DDP::reduce_bucket(const Bucket& bucket) {
  if (bitwise_) {
    bitwise_->add(bucket.first, bucket.last);
    return;
  }
  const std::span<double> grads = grads_->adopt(bucket.first, bucket.last);
  stream_->enqueue([this, grads] { comm_.all_reduce(grads, ReduceOp::Mean); });
}

DDP::~DDP() = default;

bool DDP::overlapping() const { return stream_->overlapping(); }

void DDP::sync_grads() {
  stream_->synchronize();
  if (bitwise_) {
    if (buckets_->touched()) add_leaf();  // a backward since the last add_leaf()
    bitwise_->all_reduce_mean(comm_, grads_->adopt(), "DDP::sync_grads");
    return;
  }
  check_every_rank_has_grads(comm_, params_, buckets_->touched(), "DDP::sync_grads");
  buckets_->flush();
}

NoSyncGuard DDP::no_sync() { return NoSyncGuard(*buckets_); }

void DDP::add_leaf() {
  if (!bitwise_) throw std::logic_error("DDP::add_leaf: only in bitwise mode (BucketOptions::bitwise)");
  bitwise_->end_leaf(*buckets_, "DDP::add_leaf");
}

double DDP::clip_grad_norm(double max_norm) {
  // Called before any backward (or after zero_grad) it would return a norm
  // of 0 as if clipping had happened. Every replica is in the same state, so
  // every rank throws, before any collective.
  if (std::all_of(params_.begin(), params_.end(), [](const Tensor& p) { return p.grad().empty(); })) {
    throw std::logic_error("DDP::clip_grad_norm: no gradients yet: call backward() first");
  }
  if (!bitwise_) return optim::clip_grad_norm(params_, max_norm);
  const std::span<double> grads = grads_->adopt();
  // Every rank holds the same gradient: each squares its chunk of it.
  const auto [a, b] = chunk_bounds(grads.size(), comm_.size(), comm_.rank());
  const double total_norm = exact_norm(comm_, grads.subspan(a, b - a));
  const double coefficient = optim::clip_coefficient(total_norm, max_norm);
  for (double& g : grads) g *= coefficient;
  return total_norm;
}

std::size_t DDP::grad_bytes() const { return (grads_->held() + (bitwise_ ? bitwise_->held() : 0)) * sizeof(double); }

}  // namespace tinyllm::dist
