// run_threads: p ranks as threads of this process, talking through shared
// memory. For tests and the emulation of docs/ZERO.md; the ranks share this
// process's heap, so it shows no per-rank memory (run_procs does).
#pragma once

#include <functional>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist {

// Runs fn(comm) on p threads, one rank each, and joins them all. If any rank
// throws, the others' collectives fail fast, and the first failure is
// rethrown here with "rank r: " in front (a CommError already names its
// rank), keeping std::invalid_argument, std::logic_error, CommError and
// std::runtime_error as they were.
void run_threads(int p, const std::function<void(Comm&)>& fn, CommOptions options = {});

}  // namespace tinyllm::dist
