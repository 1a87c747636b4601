// Replica: one rank's GPT and its AdamW in a data-parallel mode, the step
// the trainer, verify (P ranks against one process) and the checkpoints share. Mode by
// (comm, zero): zero 0 on a one-rank comm (dist::SelfComm) is one process
// alone, the plain AdamW loop every mode must equal; zero 0 on more ranks is
// DDP with that AdamW; zero 1, 2, 3 are ZeRO's stages (dist::ZeroOptimizer
// over an inner AdamW), on any number of ranks.
//
// Its state, as a checkpoint stores it, is three flat vectors of n values
// in parameters() order: the parameters, exp_avg and exp_avg_sq, end to end
// ("regions" 0, 1, 2 of the checkpoint's data). A rank owns the chunk
// chunk_bounds(n, p, r) of each; under ZeRO that is exactly what it holds.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "tinyllm/distributed/comm.h"
#include "tinyllm/distributed/ddp.h"
#include "tinyllm/distributed/exact_sum.h"
#include "tinyllm/distributed/flat_layout.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/safetensors.h"

namespace tinyllm::train {

class Replica {
 public:
  // Collective (DDP and ZeRO broadcast rank 0's parameters); comm must
  // outlive the Replica. overlap: dist::BucketOptions::overlap. Weight decay takes
  // the tensors of two or more dimensions only, the matrices and the
  // embeddings (GPT-2's and nanoGPT's rule: not the biases and LayerNorm
  // gains), or every parameter with decay_all. bitwise: dist::BucketOptions::bitwise,
  // one leaf per window, so that the step is the same bits at any world size
  // (docs/BITWISE.md); zero 0 then runs DDP even on one rank. std::invalid_argument for a
  // zero outside 0..3.
  Replica(std::shared_ptr<nn::GPT> model, const optim::AdamWOptions& adamw, dist::Comm& comm, int zero,
          bool overlap = false, bool decay_all = false, bool bitwise = false);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Collective. This rank's backward of its rows of a step: grad_accum
  // micro-batches of equal rows, each one's mean loss scaled by
  // 1/grad_accum. In bitwise mode, one backward per row instead (each its
  // own micro-batch; grad_accum changes nothing). Returns the step's loss,
  // the mean over the rows of every rank (which must hold as many rows as
  // this one), the same bits on every rank.
  double backward(const Batch& batch, std::size_t grad_accum);
  // The mean loss of the batch's rows under no-grad, touching no gradient:
  // for evaluation between steps. Collective in stage 3 (each block is
  // gathered for its forward and freed after it).
  double eval_loss(const Batch& batch);

  // Before a step's first backward: the full parameters (stage 3's gather)
  // and no gradients.
  void zero_grad();
  // After the step's last backward: reduce (DDP, ZeRO), clip to a global
  // norm of clip when clip > 0, update. Returns the gradient norm before
  // clipping when clipping, else 0.
  double step(double clip);
  // The learning rate of the next step(): the AdamW of one process and DDP,
  // ZeRO's inner AdamW over the chunk. std::invalid_argument unless finite and >= 0.
  void set_lr(double lr);
  double lr() const;

  // The model-state bytes this rank holds now (ZeRO's memory_bytes(); for
  // DDP and one process the parameters, every gradient buffer, AdamW's state).
  dist::MemoryBytes memory_bytes() const;
  // The most it held at once since the reset, within a step (ZeRO's
  // peak_memory_bytes(); for DDP and one process, memory_bytes(), whose
  // buffers live for the whole run).
  dist::MemoryBytes peak_memory_bytes() const;
  void reset_peak_memory_bytes();

  // Collective under ZeRO. The whole region on every rank: stage 3 gathers
  // the parameters, the optimizer's chunks are all-gathered.
  std::vector<double> full(Region region);
  // This rank's chunk of every region, as pieces of the checkpoint's data
  // region (the flat offset counts from the start of region 0).
  std::vector<Piece> pieces() const;
  // Loads every region's values for this rank from a checkpoint whose data
  // region is laid out as pieces() describes, with AdamW at `adam_step`.
  // The parameters must already hold the checkpoint's values (they are
  // loaded into the model before the Replica is built); this loads the
  // optimizer state.
  void load_optimizer_state(const SafetensorsFile& file, double adam_step);

  nn::GPT& model() const { return *model_; }
  std::size_t num_parameters() const { return layout_.numel(); }
  int zero() const { return zero_; }
  bool bitwise() const { return bitwise_; }
  // Whether the collectives run on a communication thread beside backward:
  // overlap asked for, where there are collectives (not DDP's one rank)
  // and the Comm allows it (dist::DDP::overlapping, ZeroOptimizer's).
  bool overlapping() const;
  // This rank's chunk [a, b) of the flat vectors.
  std::pair<std::size_t, std::size_t> chunk() const { return {a_, b_}; }

 private:
  // The region's values for each parameter (one process, DDP) or for the
  // chunk (ZeRO), empty where the optimizer holds no state yet.
  std::vector<std::span<const double>> segments(Region region) const;
  // The AdamW that steps this rank's values.
  optim::Optimizer& optimizer() const;
  // backward() in bitwise mode: this rank's sum of its rows' losses, exact.
  dist::ExactSum backward_leaves(const Batch& batch);

  std::shared_ptr<nn::GPT> model_;
  std::vector<Tensor> params_;
  dist::Comm& comm_;
  int zero_;
  bool bitwise_;
  dist::FlatLayout layout_;  // of params_: the checkpoint regions' order
  std::size_t a_ = 0, b_ = 0;
  std::unique_ptr<dist::DDP> ddp_;
  std::unique_ptr<optim::AdamW> adamw_;  // one process and DDP
  std::unique_ptr<dist::ZeroOptimizer> zero_optimizer_;
  // The optimizer state before AdamW's first step, made when first asked for.
  std::span<const double> zeros(std::size_t count) const;
  mutable std::vector<double> zeros_;
};

}  // namespace tinyllm::train
