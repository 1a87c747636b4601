// run_procs: p ranks as processes of this machine, forked from this one and
// talking through a POSIX shared-memory segment. Each rank has its own
// address space, so its memory is really its own (what `tinyllm train
// --world P` uses). The segment is unlinked as soon as it is mapped and the
// children die with their parent, so nothing outlives a run.
#pragma once

#include <functional>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist {

// Forks p children, runs fn(comm) in child r as rank r, and waits for all.
// Call it before this process starts threads of its own where possible
// (fork copies only the calling thread); OpenBLAS restarts its pool in each
// child, with its threads divided among the ranks. A rank that throws or
// dies makes the others fail fast, and one that stops answering makes them
// time out after `options.timeout`; ranks still running 1 s after the first
// failure (stopped, or stuck outside the collectives) are killed. Rethrows
// the first failure like run_threads, or a CommError "rank 2 died of signal
// 9 (Killed)". A child that exits before fn returned or threw (an exit()
// inside fn), with any status, 0 included, fails the group too: "rank 2
// exited with status 0 before returning a result". fn's output goes to the
// inherited stdout and stderr.
//
// `poll`, when given, runs on the calling thread about every 50 ms while any
// child runs, as run_threads' does. If it throws, the group fails, the
// children still running get SIGTERM and, 1 s later, SIGKILL; all are
// reaped, and poll's exception is rethrown instead of any rank's.
void run_procs(int p, const std::function<void(Comm&)>& fn, CommOptions options = {},
               const std::function<void()>& poll = {});

}  // namespace tinyllm::dist
