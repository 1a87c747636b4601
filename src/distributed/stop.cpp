#include "tinyllm/distributed/stop.h"

#include <atomic>

namespace tinyllm::dist {
namespace {

// A signal handler may touch only lock-free atomics.
std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free);

}  // namespace

void request_stop(int signal) noexcept {
  int none = 0;
  requested.compare_exchange_strong(none, signal);
}

int stop_requested() noexcept { return requested.load(); }

void clear_stop() noexcept { requested.store(0); }

}  // namespace tinyllm::dist
