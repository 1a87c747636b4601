// A stop asked of the runs in this process, for SIGINT and SIGTERM: a
// handler calls request_stop(signal), and a training loop that polls
// stop_requested() ends after the step it is in, once every rank agrees
// (train::train does, saving that step's checkpoint). run_procs forwards
// a request to its forked ranks as the same signal, which reaches them
// through the handler they inherited. The library installs no handler of
// its own: dispositions belong to the program (apps/tinyllm.cpp has one).
#pragma once

namespace tinyllm::dist {

// Async-signal-safe; the first signal asked for is kept.
void request_stop(int signal) noexcept;
// The signal of the stop asked for; 0 when none was.
int stop_requested() noexcept;
// Forgets a request, for a program that goes on to another run.
void clear_stop() noexcept;

}  // namespace tinyllm::dist
