// What the command prints: stdout flushed with its errors checked, the
// update's and the overlap's one-line descriptions, and the observer that
// prints a training run on rank 0.
#pragma once

#include <memory>
#include <string>

#include "tinyllm/train/trainer.h"

namespace tinyllm::app {

// Flushes what was printed; a write that failed (a full disk, a closed
// pipe) ends the command with an error rather than exit status 0.
void flush_stdout();

// The update's settings: "lr 0.001 cosine (warmup 25 steps, down to 0.0001
// at step 500), clip 1".
std::string describe_update(const train::TrainOptions& o);

// "overlap on" or "overlap off", with the reason where --overlap asked for
// it: DDP on one rank has no collectives, and an MPI below
// MPI_THREAD_SERIALIZED allows no second thread to call it.
std::string describe_overlap(const train::TrainOptions& o, const train::RunInfo& info);

// Prints on rank 0: a live line on a terminal, plain lines when piped.
std::unique_ptr<train::TrainObserver> make_printer(const train::TrainOptions& o);

}  // namespace tinyllm::app
