// Metrics: what the trainer reports besides the loss. The model-state bytes
// each mode holds per rank, in theory (what `tinyllm memory` prints, exact
// for this program: the trainer's memory_bytes() must equal it), the bytes
// each rank's collectives send per step in theory, the peak resident set,
// and the JSON lines --metrics writes per step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tinyllm/distributed/memory_bytes.h"
#include "tinyllm/nn/gpt.h"

namespace tinyllm::train {

struct StepReport;

// Rank r of p's model state with AdamW over n parameter values, in bytes
// (zero 0: DDP), after a step: zero.h's table.
dist::MemoryBytes state_bytes(int zero, std::size_t n, int p, int r);
// The most of each part that rank r holds within a step of the trainer's
// GPT (the default buckets, stage 3's units the blocks, prefetch 1): for
// stages 2 and 3 the gradients of the bucket in flight beside the chunk's,
// for stage 3 the gathered blocks beside the chunk; with overlap, the
// second bucket in flight (dist::BucketOptions::overlap). What
// ZeroOptimizer::peak_memory_bytes() reports. bitwise adds its limbs (3n,
// and under ZeRO 3 chunks; dist::BucketOptions::bitwise).
dist::MemoryBytes peak_bytes(int zero, const nn::GPTConfig& config, int p, int r, std::size_t grad_accum = 1,
                             bool overlap = false, bool bitwise = false);

// The bytes the activations of one forward and backward of `rows` windows
// hold at their peak: every tensor the autograd graph keeps until backward
// ends and the gradients backward holds at once, replayed op by op through
// the storage cache (which reuses a block only for its exact length), each
// block rounded to its pages. What bench/memory.sh measures
// (docs/PERFORMANCE.md).
std::size_t activation_bytes(const nn::GPTConfig& config, std::size_t rows);

// An upper bound of one rank's memory at its peak within a step, in parts.
struct RankMemory {
  std::size_t state = 0;        // the model state after a step (state_bytes)
  std::size_t in_step = 0;      // what the step holds beside it (peak_bytes less state_bytes)
  std::size_t activations = 0;  // activation_bytes of one micro-batch (one window under bitwise), and validation's
  std::size_t base = 0;         // the runtime: a thread's stack, its malloc arena, BLAS's buffers
  std::size_t margin = 0;       // what the model cannot see: allocator rounding and fragmentation
  std::size_t total() const { return state + in_step + activations + base + margin; }
  // Address space beside total() that is never touched: the 2 MiB
  // alignment ahead of each huge block. Counts against ulimit -v only.
  std::size_t unmapped = 0;
};
// Rank r of p in a run of `batch` windows per step; `evaluates`: with
// validation forwards between the steps.
RankMemory predict_rank_memory(int zero, const nn::GPTConfig& config, int p, int r, std::size_t batch,
                               std::size_t grad_accum = 1, bool overlap = false, bool bitwise = false,
                               bool evaluates = false);

// The bytes rank r's collectives send in one step of the GPT, as
// dist::Comm counts them: DDP one all_reduce; stage 1 an all_reduce and an
// all_gather; stage 2 a reduce_scatter per micro-batch and an all_gather;
// stage 3 a reduce_scatter per micro-batch, the all_gather of the
// embeddings and ln_f once and of every block twice per micro-batch (its
// forward, and again its backward: the ZeRO paper's 1.5x of DDP). In bitwise
// mode (bitwise_leaves: the rank's windows per step, else 0) the reductions
// carry three limbs per value, once per step, and stage 3 gathers every
// block twice per window (docs/BITWISE.md). (The loss, the gradient norm and
// the leaf count add a few bytes of their own.)
std::uint64_t theory_bytes_sent(int zero, const nn::GPTConfig& config, int p, int r, std::size_t grad_accum = 1,
                                std::size_t bitwise_leaves = 0);

// This process's peak resident set so far, in bytes.
std::size_t peak_rss_bytes();

// {"step":…,"loss":…,"lr":…,"seconds":…,"tokens_per_second":…,"grad_norm":… (with clipping only),
//  "ranks":[{"rank":0,"params_bytes":…,"grads_bytes":…,"optimizer_bytes":…,
//  "peak_state_bytes":…,"peak_rss_bytes":…,"bytes_sent":…,"theory_bytes_sent":…},…]}
std::string metrics_line(const StepReport& report);
// {"step":…,"val_loss":…}: the validation loss after step's update, its own
// line after the step's.
std::string val_metrics_line(std::size_t step, double val_loss);

}  // namespace tinyllm::train
