// seconds_per_call: how the distributed benchmarks time a collective call.
// Every rank runs exactly the same number of iterations (an adaptive loop
// per process could not promise that); the time is rank 0's wall time from
// a barrier to a barrier after `iters` back-to-back calls, so it includes
// the slowest rank; the best of three runs is kept, since the machine is
// shared.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

namespace tinyllm::bench {

inline double seconds_per_call(int iters, const std::function<void()>& barrier, const std::function<void()>& call) {
  call();
  call();
  double best = 1e300;
  for (int run = 0; run < 3; ++run) {
    barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < iters; ++k) call();
    barrier();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters);
  }
  return best;
}

}  // namespace tinyllm::bench
