#include "tinyllm/distributed/threads_comm.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shm_comm.h"

namespace tinyllm::dist {
namespace {

constexpr auto kPollEvery = std::chrono::milliseconds(50);

}  // namespace

void run_threads(int p, const std::function<void(Comm&)>& fn, CommOptions options, const std::function<void()>& poll) {
  if (p < 1 || p > kMaxSharedMemoryWorld) {
    throw std::invalid_argument("run_threads: world size must be from 1 to " + std::to_string(kMaxSharedMemoryWorld) +
                                " (got " + std::to_string(p) + ")");
  }
  check_options(options, "run_threads");
  const std::size_t bytes = detail::ShmGroup::bytes_needed(p, detail::ShmGroup::kDefaultSlotDoubles);
  std::unique_ptr<void, decltype(&std::free)> memory(std::aligned_alloc(4096, bytes), &std::free);
  if (!memory) throw std::bad_alloc();
  detail::ShmGroup& group =
      *detail::ShmGroup::create(memory.get(), p, detail::ShmGroup::kDefaultSlotDoubles,
                                detail::choose_peer_reads(p, options.single_copy, detail::PeerReads::SameProcess));

  // Which ranks still run, for the poll loop to wait on and to name.
  std::mutex mutex;
  std::condition_variable ended;
  std::vector<bool> running(static_cast<std::size_t>(p), true);
  int left = p;

  std::vector<std::thread> ranks;
  auto run_rank = [&](int r) {
    detail::ShmComm comm(group, r, options);
    try {
      fn(comm);
    } catch (...) {
      auto [kind, message] = detail::current_failure();
      group.fail(r, kind, message);
    }
    std::lock_guard lock(mutex);
    running[static_cast<std::size_t>(r)] = false;
    --left;
    ended.notify_all();
  };
  try {
    for (int r = 0; r < p; ++r) ranks.emplace_back(run_rank, r);
  } catch (...) {
    // The ranks already started would wait for this one until the timeout.
    group.fail(static_cast<int>(ranks.size()), detail::FailureKind::Runtime, "its thread could not start");
    for (std::thread& rank : ranks) rank.join();
    throw;
  }
  // A stop from poll is recorded as the failure of the lowest rank still
  // running, so that the collectives waiting anywhere fail fast.
  std::exception_ptr stopped;
  if (poll) {
    std::unique_lock lock(mutex);
    while (!ended.wait_for(lock, kPollEvery, [&] { return left == 0; })) {
      lock.unlock();
      try {
        poll();
      } catch (...) {
        stopped = std::current_exception();
        auto [kind, message] = detail::current_failure();
        lock.lock();
        const auto first = std::find(running.begin(), running.end(), true);
        if (first != running.end()) {
          group.fail(static_cast<int>(first - running.begin()), kind, "the run was stopped: " + message);
        }
        break;
      }
      lock.lock();
    }
  }
  for (std::thread& rank : ranks) rank.join();
  if (stopped) std::rethrow_exception(stopped);
  if (group.failed()) detail::throw_failure(group.failed_rank(), group.failure_kind(), group.failure_message());
}

}  // namespace tinyllm::dist
