// ZeroOptimizer: ZeRO's sharded data parallelism as docs/ZERO.md defines it.
// Each rank updates only its chunk of the flat parameter vector, with the
// unchanged optimizer (SGD, AdamW) over that chunk alone; since both are
// elementwise, the chunked update equals one process's, entry by entry.
// Reference: Rajbhandari et al., ZeRO (SC 2020).
//
// Glossary (paper → docs/ZERO.md → here):
//   Ψ    → n → layout_.numel(), the length of the flat vector: every parameter end to end,
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
// that logs gradient norms wants them; they are views of one flat vector,
// all-reduced in place bucket by bucket.
//
// During backward the gradients are reduced bucket by bucket as each fills
// (BucketOptions; DeepSpeed's bucketed reduce-scatter): stage 1
// all-reduces, stages 2 and 3 reduce-scatter each bucket into this rank's
// part of the chunk's gradient and drop the bucket's .grad arrays at once,
// so no rank holds every gradient: at most its chunk's, the bucket being
// reduced and the gradients backward has not finished.
//
// Stage 3 with units (ZeroOptions::units, e.g. each transformer block; the
// idea of PyTorch FSDP2 and DeepSpeed ZeRO-3): a unit's parameters are
// all-gathered just before its forward and freed right after it,
// re-gathered when backward reaches its output, and freed again once its
// gradients are reduce-scattered. The next `prefetch` units (in the order
// of the pass) are gathered with it. Parameters outside every unit (a
// GPT's embeddings and final LayerNorm) are gathered by gather() and freed
// by step(). Without units, gather() gathers every parameter, as docs/ZERO.md's
// stage 3 does.
//
// With BucketOptions::overlap, these collectives (the buckets'
// reductions, stage 3's gathers and prefetches) run on a communication
// thread, in the order the synchronous code issues them: a bucket's
// reduction while backward computes the next, the prefetched units'
// gathers while the current unit computes; a unit waits for its own
// gather only when the pass reaches it.
//
// A training step on each rank (docs/ZERO.md):
//   zo.gather(); zo.zero_grad(); loss(slice).backward(); zo.step();
// Gradient accumulation: step() once after every micro-batch's backward.
// Stages 2 and 3 reduce each micro-batch's gradient as backward produces it
// and add it into the chunk's; stage 1 likewise, unless the micro-batches
// before the last run inside no_sync(), which sends nothing and
// accumulates locally (in stages 2 and 3 that holds full gradients).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "tinyllm/distributed/buckets.h"
#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/comm.h"
#include "tinyllm/distributed/ddp.h"
#include "tinyllm/distributed/flat_layout.h"
#include "tinyllm/distributed/memory_bytes.h"
#include "tinyllm/distributed/threads_comm.h"
#include "tinyllm/nn/module.h"
#include "tinyllm/optim/optimizer.h"

namespace tinyllm::dist {

struct ZeroOptions {
  BucketOptions buckets;
  // Stage 3 only: modules whose parameters form a contiguous run of the
  // parameter list, gathered and freed one at a time.
  std::vector<std::shared_ptr<nn::Module>> units;
  // Units gathered ahead of the one the pass needs (0: none).
  int prefetch = 1;
};

class CommStream;
class FlatParams;
class Reducer;

class ZeroOptimizer {
 public:
  // Collective. Broadcasts rank 0's parameters (replicas start equal, as
  // under DDP), copies this rank's chunk into the master chunk and builds
  // the inner optimizer over it with make_inner (which carries the user's
  // hyperparameters), which must be the same on every rank. Frozen
  // parameters (requires_grad false) are broadcast, then left whole and
  // untouched on every rank, as an optimizer skips a parameter that never
  // gets a grad. Stage 3 then releases the full parameters: call
  // gather() before the first forward. std::invalid_argument, on every rank
  // and before any large collective, for a stage other than 1, 2 or 3, an
  // empty parameter list, ranks disagreeing on the stage or on the
  // parameters' count or shapes, a bucket size of 0, a negative prefetch,
  // units below stage 3, or a unit whose parameters are not a run of the
  // list or belong to another unit.
  ZeroOptimizer(optim::OptimizerFactory make_inner, std::vector<Tensor> params, Comm& comm, int stage,
                ZeroOptions options = {});
  // Parameters and grads still viewing its flat vectors become their own copies.
  ~ZeroOptimizer();

  // Collective in stage 3: all-gathers the chunks into full parameters for
  // the forward pass (a no-op when they are already there); with units,
  // only the parameters outside them. A no-op in stages 1 and 2, whose
  // parameters are always full.
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
  // While the guard lives, backward sends nothing.
  NoSyncGuard no_sync();
  // Bitwise mode only (BucketOptions::bitwise): after each leaf's backward,
  // ends the leaf, whose gradients backward has added bucket by bucket into
  // the step's exact sum (zeroing stage 1's .grad, dropping stages 2 and
  // 3's). step() and clip_grad_norm() then reduce the sums into the chunk's
  // gradient, the mean over the leaves of every rank; stage 1's .grad
  // stays zero. std::logic_error outside bitwise mode.
  void add_leaf();

  // Collective; call after the last backward and before step(). Clips the
  // gradient to a global 2-norm of max_norm, exactly as clip_grad_norm on
  // one process: reduces the gradients (step() then does not reduce again),
  // all-reduces the squared norms of the chunks and scales each chunk (in
  // stage 1 also the full .grad arrays). Returns the total norm before
  // clipping, the same bits on every rank. std::logic_error before any
  // backward (or after zero_grad), as DDP's.
  double clip_grad_norm(double max_norm);

  // What this rank holds now, from the buffers that exist (see the table).
  MemoryBytes memory_bytes() const;
  // The most of each part it held since the last reset, within a step:
  // stage 3's gathered units, stages 2 and 3's bucket in flight. Noted
  // where a buffer is taken (a gather, a bucket's reduction).
  MemoryBytes peak_memory_bytes() const { return peak_; }
  void reset_peak_memory_bytes() { peak_ = memory_bytes(); }

  int stage() const { return stage_; }
  // Stages 2 and 3: the staging slots a rank keeps for buckets in flight,
  // one, or with the stream overlapping two (so the next bucket is taken
  // while one is reduced), never more than there are buckets.
  static std::size_t slots_for(bool overlapping, std::size_t buckets) {
    return overlapping ? std::min<std::size_t>(2, buckets) : 1;
  }
  // Whether the collectives run beside the compute (BucketOptions::overlap, where the Comm allows it).
  bool overlapping() const;
  std::pair<std::size_t, std::size_t> chunk() const { return {a_, b_}; }  // [a, b) of the flat vector
  const Tensor& master_chunk() const { return master_chunk_; }
  optim::Optimizer& inner() const { return *inner_; }

 private:
  // A run of parameters [first, last) whose values are gathered and
  // released together: a unit, a run outside the units, or (without units)
  // every parameter. Its values are the flat vector's [begin, end).
  struct Group {
    std::size_t first = 0, last = 0;
    std::size_t begin = 0, end = 0;
    std::unique_ptr<FlatParams> values;
    bool gathered = true;
    std::uint64_t filled = 0;  // the CommStream ticket of the all_gather into values
  };
  // Stages 2 and 3: a bucket's gradients, end to end, while it is reduced,
  // and this rank's part of their mean, to add; one slot per bucket in
  // flight.
  struct Slot {
    Storage staging;
    Storage part;
    std::uint64_t busy = 0;  // the ticket of the slot's last reduction
  };

  void make_groups(const std::vector<std::pair<std::size_t, std::size_t>>& units);
  void hook_units(const std::vector<std::shared_ptr<nn::Module>>& units);
  // Steps 1 and 2 of step(): the reductions backward has not done, once per step.
  void reduce_grads();
  void reduce_scatter_bucket(const Bucket& bucket);
  void release_unit_of(const Bucket& bucket);
  // Group g's values on their way: its all-gather (fill_group) enqueued
  // on the stream unless they are there; a reader waits for group.filled.
  void request_group(std::size_t g);
  // The all-gather itself, on the calling thread: the chunks into the
  // group's flat vector, which the parameters view.
  void fill_group(std::size_t g);
  // Stage 3: the values go back to the storage cache.
  void release_group(std::size_t g);
  // Group g and the `prefetch_` after it in the direction of the pass.
  void gather_with_prefetch(std::size_t g, int direction);
  void note_peak();

  std::vector<Tensor> params_;
  Comm& comm_;
  int stage_;
  FlatLayout layout_;  // of params_ (the frozen left out)
  std::size_t a_ = 0, b_ = 0;
  std::vector<Group> groups_;             // in parameter order
  std::vector<std::size_t> unit_groups_;  // the groups that are units, in unit order
  int prefetch_ = 1;
  std::vector<Slot> slots_;  // stages 2, 3: two when overlapping, else one
  std::size_t next_slot_ = 0;
  std::vector<char> summed_;          // by a bucket's first parameter: its mean is in the chunk's grad
  std::unique_ptr<Reducer> reducer_;  // the buckets, stage 1's flat gradients, bitwise mode's sums
  Tensor master_chunk_;               // w[a, b), the inner optimizer's one parameter
  std::unique_ptr<optim::Optimizer> inner_;
  std::vector<RemovableHandle> unit_hooks_;
  MemoryBytes peak_;
  bool reduced_ = false;  // this step's gradients are all in master_chunk_'s grad
  // Last, so it is destroyed first: no collective outlives the buffers it uses.
  std::unique_ptr<CommStream> stream_;
};

}  // namespace tinyllm::dist
