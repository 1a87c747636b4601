// ZeroOptimizer: ZeRO's sharded data parallelism as the seed defines it.
// Each rank updates only its chunk of the flat parameter vector, with the
// unchanged optimizer (SGD, AdamW) over that chunk alone; since both are
// elementwise, the chunked update equals one process's, entry by entry.
// References: Rajbhandari et al., ZeRO (SC 2020); seed sections 2 to 4.
//
// Glossary (paper → seed → here):
//   Ψ    → n → n_, the length of the flat vector: every parameter end to end,
//                 in parameters() order
//   N_d  → p → comm.size(); rank r → comm.rank()
//   c_r = [a_r, b_r) → chunk_bounds(n, p, r) → [a_, b_), this rank's chunk
//   P_os, P_os+g, P_os+g+p → stage 1, 2, 3: shard the optimizer state;
//                 also the gradients; also the parameters
//
// What a rank holds after a step (memory_bytes(); K = 2 for AdamW):
//   stage  parameters  gradients   optimizer state
//   1      n           n + n/p     K·n/p + n/p (the master chunk)
//   2      n           n/p         K·n/p + n/p
//   3      n/p         n/p         K·n/p        (the chunk is the parameters)
// The full gradients of stage 1 stay in .grad until zero_grad(), as a loop
// that logs gradient norms wants them. The gradients are views of one flat
// vector, so backward adds straight into it and the collective needs no
// copy; stages 2 and 3 give it back to the storage cache after the
// reduce-scatter and take it again at zero_grad(), while stage 1 keeps it
// (it counts after zero_grad() too). The parameters are views of a flat
// vector as well, so the all_gather writes straight into them; stage 3
// releases it between steps.
//
// A training step on each rank (the seed's):
//   zo.gather(); zo.zero_grad(); loss(slice).backward(); zo.step();
// Gradient accumulation: run every micro-batch's backward, then step()
// once; nothing is sent before it.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "tinyllm/dist/chunk.h"
#include "tinyllm/dist/comm.h"
#include "tinyllm/dist/ddp.h"
#include "tinyllm/dist/threads_comm.h"
#include "tinyllm/optim/optimizer.h"

namespace tinyllm::dist {

struct MemoryBytes {
  std::size_t params = 0;
  std::size_t grads = 0;
  std::size_t optimizer = 0;
  std::size_t total() const { return params + grads + optimizer; }
};

class FlatGrads;
class FlatParams;

class ZeroOptimizer {
 public:
  // Collective. Broadcasts rank 0's parameters (replicas start equal, as
  // under DDP), copies this rank's chunk into the master chunk and builds
  // the inner optimizer over it with make_inner (which carries the user's
  // hyperparameters). Stage 3 then releases the full parameters: call
  // gather() before the first forward. std::invalid_argument, on every rank
  // and before any large collective, for a stage other than 1, 2 or 3, an
  // empty parameter list, or ranks disagreeing on the stage or on the
  // parameters' count or shapes.
  ZeroOptimizer(optim::OptimizerFactory make_inner, std::vector<Tensor> params, Comm& comm, int stage);
  // Parameters and grads still viewing its flat vectors become their own copies.
  ~ZeroOptimizer();

  // Collective in stage 3: all-gathers the chunks into full parameters for
  // the forward pass (a no-op when they are already there). A no-op in
  // stages 1 and 2, whose parameters are always full.
  void gather();
  // Collective. Reduces the gradients (stage 1 all_reduce(Mean), stages 2
  // and 3 reduce_scatter(Mean) and drop the full .grad arrays), steps the
  // inner optimizer on this rank's chunk, then all-gathers the updated
  // chunks into the parameters (stages 1 and 2) or releases them (stage 3).
  // A parameter without a grad on some rank counts as a zero gradient there.
  // std::invalid_argument on every rank when a rank has no gradient at all.
  void step();
  // Drops the gradients: the parameters' and the chunk's.
  void zero_grad();

  // Collective; call after the last backward and before step(). Clips the
  // gradient to a global 2-norm of max_norm, exactly as clip_grad_norm on
  // one process: reduces the gradients (step() then does not reduce again),
  // all-reduces the squared norms of the chunks and scales each chunk (in
  // stage 1 also the full .grad arrays). Returns the total norm before
  // clipping, the same bits on every rank.
  double clip_grad_norm(double max_norm);

  // What this rank holds now, from the buffers that exist (see the table).
  MemoryBytes memory_bytes() const;

  int stage() const { return stage_; }
  std::pair<std::size_t, std::size_t> chunk() const { return {a_, b_}; }  // [a, b) of the flat vector
  const Tensor& master_chunk() const { return master_chunk_; }
  optim::Optimizer& inner() const { return *inner_; }

 private:
  // Steps 1 and 2 of step(): flatten the grads and reduce them into the
  // master chunk's grad, once per step.
  void reduce_grads();
  void all_gather_params();
  void release_params();

  std::vector<Tensor> params_;
  Comm& comm_;
  int stage_;
  std::size_t n_ = 0;
  std::size_t a_ = 0, b_ = 0;
  std::unique_ptr<FlatParams> values_;  // every parameter's values (released in stage 3 between steps)
  std::unique_ptr<FlatGrads> grads_;    // every .grad (released in stages 2 and 3 after each reduce-scatter)
  Tensor master_chunk_;                 // w[a, b), the inner optimizer's one parameter
  std::unique_ptr<optim::Optimizer> inner_;
  bool reduced_ = false;  // this step's gradients are already in master_chunk_'s grad
  bool gathered_ = true;  // the parameters hold their values (always, below stage 3)
};

}  // namespace tinyllm::dist
