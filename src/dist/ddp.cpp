#include "tinyllm/dist/ddp.h"

#include <stdexcept>

#include "flat.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm::dist {

DDP::DDP(std::shared_ptr<nn::Module> model, Comm& comm) : module_(std::move(model)), comm_(comm) {
  if (!module_) throw std::invalid_argument("DDP: model must not be null");
  register_module("module", module_);
  params_ = module_->parameters();
  check_same_parameters(comm_, params_, "DDP", /*stage=*/0);
  broadcast_params(comm_, params_);
}

void DDP::sync_grads() {
  check_every_rank_has_grads(comm_, params_, "DDP::sync_grads");
  Storage bucket(flat_length(params_));
  flatten_grads(params_, bucket.span());
  comm_.all_reduce(bucket.span(), ReduceOp::Mean);
  unflatten_grads(bucket.span(), params_);
}

}  // namespace tinyllm::dist
