// The validation loss: the mean, over the validation windows, of each
// window's mean loss, on the parameters as they are (after a step's
// update), under no-grad, with the windows shared among the ranks.
#pragma once

#include <cstddef>

#include "tinyllm/distributed/comm.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/replica.h"

namespace tinyllm::train {

// The windows are the first eval_batches·batch of `val` (every one when
// eval_batches is 0, or when there are fewer). Rank r of p takes the run
// chunk_bounds(E, p, r) of the E windows and evaluates it batch/p rows at
// a time. Collective: every rank runs as many forwards (stage 3 gathers in
// them), a rank out of windows repeating a row it does not count. The same
// bits on every rank.
// How many windows evaluate() takes: E above.
std::size_t num_eval_windows(const Corpus& val, std::size_t batch, std::size_t seq, std::size_t eval_batches);

double evaluate(dist::Comm& comm, Replica& replica, const Corpus& val, std::size_t batch, std::size_t seq,
                std::size_t eval_batches);

}  // namespace tinyllm::train
