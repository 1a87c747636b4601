// DDP: data parallelism as docs/ZERO.md defines it. Every rank holds the whole
// model and computes the gradient of its own slice of the batch; DDP makes
// the replicas start equal (rank 0's parameters, broadcast at construction)
// and averages the gradients (all_reduce(Mean) in buckets), and nothing
// else: the optimizer is the unchanged one-process optimizer. One flat
// vector is the gradients' home: every .grad is a view of its segment, so
// backward adds straight into it and each bucket's all_reduce runs on it in
// place (PyTorch's gradient_as_bucket_view).
// Reference: Li et al., PyTorch Distributed (VLDB 2020).
//
// The bucket is reduced in pieces during backward: buckets of
// BucketOptions::bucket_bytes, in reverse parameter order, each
// all-reduced as soon as backward has finished every gradient in it
// (PyTorch DDP's reducer). The mean is taken element by element in rank
// order, so the pieces give exactly the bits one all_reduce would.
//
// A training step on each rank:
//   opt.zero_grad(); loss(slice).backward(); ddp.sync_grads(); opt.step();
// sync_grads() reduces what backward did not (nothing, when every
// parameter got its gradient). Gradient accumulation: run all but the last
// micro-batch's backward inside no_sync(), which sends nothing; without
// it, each backward reduces again (the same result, more traffic).
// BucketOptions::overlap runs the buckets' all-reduces on a communication
// thread while backward goes on; backward returns once they are done.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tinyllm/distributed/buckets.h"
#include "tinyllm/distributed/comm.h"
#include "tinyllm/nn/module.h"

namespace tinyllm::dist {

class CommStream;
class Reducer;

class DDP : public nn::Module {
 public:
  // Collective. Broadcasts rank 0's parameters into every rank's model. The
  // model is registered as the child "module", so parameters() is the
  // model's, in its order, and names read "module.<name>" as in PyTorch.
  // Frozen parameters (requires_grad false) are broadcast too, then left
  // alone: no bucket, no averaging, as in torch's DDP.
  // std::invalid_argument on every rank for a null model, a model without
  // parameters or with every one frozen, ranks whose models differ in
  // parameter count, shapes or which are frozen, or a bucket size of 0.
  DDP(std::shared_ptr<nn::Module> model, Comm& comm, const BucketOptions& buckets = {});
  // Grads still viewing the bucket become the parameters' own copies.
  ~DDP() override;

  // The wrapped model (PyTorch's ddp.module), as its own type.
  template <class M = nn::Module>
  M& module() const {
    return dynamic_cast<M&>(*module_);
  }
  // model.forward(args...): C++ modules share no forward signature, so the
  // caller names the model's type, ddp.forward<nn::GPT>(idx, B, T).
  template <class M, class... Args>
  decltype(auto) forward(Args&&... args) const {
    return module<M>().forward(std::forward<Args>(args)...);
  }

  // Collective. Every parameter's grad becomes the mean over ranks, the same
  // bits on every rank. A parameter without a grad on some rank counts as a
  // zero gradient there, and after the call every parameter has a grad (the
  // mean, zeros where no rank had one; where one process under PyTorch
  // would skip such a parameter, the optimizer then steps it with a zero
  // gradient). std::invalid_argument on every rank when a rank has no
  // gradient at all.
  void sync_grads();
  // While the guard lives, backward sends nothing.
  NoSyncGuard no_sync();
  // Bitwise mode only (BucketOptions::bitwise): after each leaf's backward,
  // ends the leaf, whose gradients backward has added bucket by bucket into
  // the step's exact sum (and zeroed); sync_grads() then makes every grad the
  // mean over the leaves of every rank (ending a leaf still open).
  // std::logic_error outside bitwise mode.
  void add_leaf();
  // After sync_grads(): optim::clip_grad_norm over the parameters, the same
  // on every rank, as their gradients are. In bitwise mode Σg² is exact,
  // each rank squaring its chunk_bounds: collective. std::logic_error
  // before any backward (or after zero_grad), as ZeroOptimizer's.
  double clip_grad_norm(double max_norm);

  // Gradient bytes this rank holds: the bucket, which lives as long as DDP
  // (the next backward's home), and any grad kept outside it.
  std::size_t grad_bytes() const;
  // Whether the buckets' collectives run beside backward (BucketOptions::overlap, where the Comm allows it).
  bool overlapping() const;

 private:
  std::shared_ptr<nn::Module> module_;
  Comm& comm_;
  std::vector<Tensor> params_;        // module_'s, in parameters() order
  std::unique_ptr<Reducer> reducer_;  // the buckets, the flat gradients, bitwise mode's sums
  // Last, so it is destroyed first: no collective outlives the buffers it uses.
  std::unique_ptr<CommStream> stream_;
};

}  // namespace tinyllm::dist
