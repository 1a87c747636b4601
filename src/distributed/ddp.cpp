#include "tinyllm/distributed/ddp.h"

#include <stdexcept>

#include "comm_stream.h"
#include "flat.h"
#include "grad_buckets.h"
#include "tinyllm/tensor/deferred_init.h"

namespace tinyllm::dist {

DDP::DDP(std::shared_ptr<nn::Module> model, Comm& comm, const BucketOptions& buckets)
    : module_(std::move(model)), comm_(comm) {
  if (!module_) throw std::invalid_argument("DDP: model must not be null");
  register_module("module", module_);
  params_ = module_->parameters();
  check_same_parameters(comm_, params_, "DDP", /*stage=*/0);
  materialize(params_);  // a deferred model: every replica holds all of it anyway
  broadcast_params(comm_, params_);
  grads_ = std::make_unique<FlatGrads>(params_);
  stream_ = std::make_unique<CommStream>(comm_, buckets.overlap);
  buckets_ = std::make_unique<GradBuckets>(params_, make_buckets(params_, buckets, "DDP"), *stream_,
                                           [this](const Bucket& b) {
                                             const std::span<double> grads = grads_->adopt(b.first, b.last);
                                             stream_->enqueue([this, grads] { comm_.all_reduce(grads, ReduceOp::Mean); });
                                           });
}

DDP::~DDP() = default;

bool DDP::overlapping() const { return stream_->overlapping(); }

void DDP::sync_grads() {
  stream_->synchronize();
  check_every_rank_has_grads(comm_, params_, buckets_->touched(), "DDP::sync_grads");
  buckets_->flush();
}

NoSyncGuard DDP::no_sync() { return NoSyncGuard(*buckets_); }

std::size_t DDP::grad_bytes() const { return grads_->held() * sizeof(double); }

}  // namespace tinyllm::dist
