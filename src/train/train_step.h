// What the trainer's ranks and verify's one-process reference share: how a
// run starts and what one step is, so that the two cannot drift apart.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tinyllm/distributed/comm.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/optim/lr_schedule.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/replica.h"
#include "tinyllm/train/trainer.h"

namespace tinyllm::train {

// What this rank's thread is doing, for the message when it runs out of
// memory: set as each phase begins and never restored, so that it still
// names the phase once the exception has unwound it.
void set_phase(const char* what, std::size_t step = 0);
// "forward and backward, step 3"; "building the model".
std::string current_phase();

struct RunStart {
  std::unique_ptr<Replica> replica;
  std::size_t step = 0;  // the first step to run: the checkpoint's under --resume, else 0
};

// The options' model in the given mode on comm's ranks: docs/ZERO.md's weights
// or --init's or --resume's, and with --resume AdamW's state and step.
// Collective.
RunStart start_run(const TrainOptions& o, dist::Comm& comm, int zero);

struct StepResult {
  double loss = 0;         // the global batch's mean, the same on every rank
  double lr = 0;           // the schedule's, which the update used
  double grad_norm = 0;    // before clipping (Replica::step)
  dist::MemoryBytes peak;  // the most model state held within the step
};

// Step `step` of the run: zero_grad, this rank's rows of the global batch
// in grad_accum micro-batches, the loss's mean over the ranks, then the
// update at the schedule's lr, clipped. std::runtime_error naming the step
// for a loss that is not finite (before the update). Collective.
StepResult train_step(dist::Comm& comm, Replica& replica, const Corpus& train, const TrainOptions& o,
                      const optim::LRSchedule& schedule, std::size_t step);

}  // namespace tinyllm::train
