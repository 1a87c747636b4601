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
//
// `poll`, when given, runs on the calling thread about every 50 ms while any
// rank runs, so that a caller can stop the run (Python checks for Ctrl-C and
// its deadline there). If it throws, the group fails as if a rank had (the
// collectives fail fast), every rank is still joined, and poll's exception
// is rethrown instead of any rank's; poll is not called again.
void run_threads(int p, const std::function<void(Comm&)>& fn, CommOptions options = {},
                 const std::function<void()>& poll = {});

}  // namespace tinyllm::dist
