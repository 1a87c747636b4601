#include "tinyllm/distributed/threads_comm.h"

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shm_comm.h"

namespace tinyllm::dist {

void run_threads(int p, const std::function<void(Comm&)>& fn, CommOptions options) {
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

  std::vector<std::thread> ranks;
  auto run_rank = [&](int r) {
    detail::ShmComm comm(group, r, options);
    try {
      fn(comm);
    } catch (...) {
      auto [kind, message] = detail::current_failure();
      group.fail(r, kind, message);
    }
  };
  try {
    for (int r = 0; r < p; ++r) ranks.emplace_back(run_rank, r);
  } catch (...) {
    // The ranks already started would wait for this one until the timeout.
    group.fail(static_cast<int>(ranks.size()), detail::FailureKind::Runtime, "its thread could not start");
    for (std::thread& rank : ranks) rank.join();
    throw;
  }
  for (std::thread& rank : ranks) rank.join();
  if (group.failed()) detail::throw_failure(group.failed_rank(), group.failure_kind(), group.failure_message());
}

}  // namespace tinyllm::dist
