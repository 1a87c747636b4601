// verify: P ranks against one process, as a command. Trains the options on
// their ranks and, in lockstep on rank 0, the same run on one process
// alone (a Replica on a one-rank dist::SelfComm: the plain AdamW loop on
// the whole global batch), and compares after every step: the loss, every parameter, AdamW's
// exp_avg and exp_avg_sq, and whether every rank holds the same bits.
#pragma once

#include <cstddef>
#include <functional>

#include "tinyllm/train/trainer.h"

namespace tinyllm::train {

inline constexpr double kVerifyTolerance = 1e-10;

struct VerifyStep {
  std::size_t step = 0;
  double loss = 0;         // the ranks' (global batch mean)
  double loss_diff = 0;    // |loss − one process's|
  double params_diff = 0;  // largest over the parameters
  double exp_avg_diff = 0;
  double exp_avg_sq_diff = 0;
  bool same_bits = true;  // every rank's parameters and optimizer state bit-identical
  // The loss, parameters and optimizer state bit-identical to one process's
  // (what TrainOptions::bitwise promises, and all verify then accepts).
  bool one_process_bits = false;
  double worst() const;  // the largest of the four, NaN when any is (so `worst() <= tolerance` fails)
};

// Runs the check; on_start runs on rank 0 before the first step, on_step
// on rank 0 after each (the app prints there). Throws std::runtime_error on every rank, after the last step,
// when any step differed by more than `tolerance` (under options.bitwise:
// in any bit from one process) or any rank's bits differed, naming the
// first such step. Bad options as train().
void verify(const TrainOptions& options, const std::function<void(const RunInfo&)>& on_start,
            const std::function<void(const VerifyStep&)>& on_step, double tolerance = kVerifyTolerance);

}  // namespace tinyllm::train
