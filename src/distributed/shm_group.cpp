// Waiting has three gears. A peer is usually microseconds behind, so spin
// first; then keep checking but yield the core at every turn, since with
// more ranks than cores the peer may need this very core; after a
// millisecond, sleep on a futex. The futex is not private: ranks may be
// processes sharing the mapping.
#include "shm_group.h"

#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>

#include "../support/check.h"
#include "tinyllm/distributed/errors.h"

namespace tinyllm::dist::detail {
namespace {

constexpr std::size_t kPage = 4096;
constexpr int kSpins = 100;
constexpr auto kYieldFor = std::chrono::microseconds(1000);

std::size_t round_up(std::size_t bytes, std::size_t to) { return (bytes + to - 1) / to * to; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000),
              .tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Phases wrap around after 2^32 barrier points; compare them as a distance.
bool reached(std::uint32_t phase, std::uint32_t target) { return static_cast<std::int32_t>(phase - target) >= 0; }

}  // namespace

std::size_t ShmGroup::slots_offset(int p) {
  return round_up(sizeof(ShmGroup), 64) + round_up(sizeof(RankState) * static_cast<std::size_t>(p), kPage);
}

std::size_t ShmGroup::bytes_needed(int p, std::size_t slot_doubles) {
  return round_up(slots_offset(p), kPage) +
         static_cast<std::size_t>(p) * round_up(slot_doubles * sizeof(double), kPage);
}

ShmGroup::ShmGroup(int p, std::size_t slot_doubles, PeerReads reads)
    : p_(p), slot_doubles_(slot_doubles), reads_(reads) {
  for (int q = 0; q < p; ++q) new (&ranks()[q]) RankState();
}

ShmGroup* ShmGroup::create(void* memory, int p, std::size_t slot_doubles, PeerReads reads) {
  TINYLLM_CHECK(p >= 1 && slot_doubles >= static_cast<std::size_t>(2 * p), "p ", p, " slot ", slot_doubles);
  TINYLLM_CHECK(reinterpret_cast<std::uintptr_t>(memory) % kPage == 0, "group memory must be page aligned");
  static_assert(std::atomic<std::uint32_t>::is_always_lock_free && std::atomic<std::int32_t>::is_always_lock_free);
  return new (memory) ShmGroup(p, slot_doubles, reads);
}

ShmGroup::RankState* ShmGroup::ranks() {
  return reinterpret_cast<RankState*>(reinterpret_cast<char*>(this) + round_up(sizeof(ShmGroup), 64));
}

double* ShmGroup::slot(int q) {
  char* base = reinterpret_cast<char*>(this) + round_up(slots_offset(p_), kPage);
  return reinterpret_cast<double*>(base +
                                   static_cast<std::size_t>(q) * round_up(slot_doubles_ * sizeof(double), kPage));
}

CollectiveHeader& ShmGroup::header(int q, std::uint64_t seq) { return ranks()[q].headers[seq % 2]; }

const double*& ShmGroup::published(int q, std::uint64_t seq) { return ranks()[q].published[seq % 2]; }

std::int32_t& ShmGroup::pid(int q) { return ranks()[q].pid; }

void ShmGroup::wake_all() {
  // Dekker's pattern with wait_for: bump the epoch, then look for sleepers;
  // a sleeper registers, then sleeps only if the epoch is unchanged.
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(epoch_);
}

void ShmGroup::arrive(int r, std::uint32_t phase) {
  ranks()[r].phase.store(phase, std::memory_order_release);
  wake_all();
}

// Waits until done() holds; throws CommError when the group fails meanwhile
// or `timeout` passes (recording the timeout as rank r's failure).
template <class Done>
void ShmGroup::wait_until(Done done, int r, std::chrono::milliseconds timeout, const std::string& what,
                          const std::string& waiting_for) {
  for (int spin = 0; spin < kSpins; ++spin) {
    if (done()) return;
    cpu_relax();
  }
  const auto yield_until = std::chrono::steady_clock::now() + kYieldFor;
  do {
    for (int turn = 0; turn < 64; ++turn) {
      if (done()) return;
      std::this_thread::yield();
    }
  } while (std::chrono::steady_clock::now() < yield_until && !failed());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const std::uint32_t epoch = epoch_.load(std::memory_order_seq_cst);
    if (done()) return;
    if (failed()) {
      throw CommError(fmt::format("{} aborted: rank {} failed: {}", what, failed_rank(), failure_message()));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string message = fmt::format("{} timed out after {} ms waiting for {}", what, timeout.count(), waiting_for);
      fail(r, FailureKind::Comm, message);
      throw CommError(message);
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    // Every change a waiter can wait for (an arrival, a failure) wakes it
    // (wake_all), so it sleeps until the deadline: a lost wake-up would show
    // as a timeout, not hide as a delay.
    futex_wait(epoch_, epoch, deadline - now);
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ShmGroup::wait_for(int r, int q, std::uint32_t phase, std::chrono::milliseconds timeout, const std::string& what) {
  std::atomic<std::uint32_t>& theirs = ranks()[q].phase;
  wait_until([&] { return reached(theirs.load(std::memory_order_acquire), phase); }, r, timeout, what,
             fmt::format("rank {}", q));
}

void ShmGroup::await_failure(int r, int q, std::chrono::milliseconds timeout, const std::string& what) {
  wait_until([] { return false; }, r, timeout, what, fmt::format("the launcher to report rank {}'s exit", q));
  TINYLLM_CHECK(false, "wait_until returned without its condition");
}

bool ShmGroup::fail(int rank, FailureKind kind, std::string_view message) {
  std::int32_t none = -1;
  if (!failed_rank_.compare_exchange_strong(none, rank, std::memory_order_acq_rel)) return false;
  failure_kind_ = kind;
  const std::size_t length = std::min(message.size(), sizeof(failure_message_) - 1);
  std::memcpy(failure_message_, message.data(), length);
  failure_message_[length] = '\0';
  failure_published_.store(1, std::memory_order_release);
  wake_all();
  return true;
}

std::string ShmGroup::failure_message() const {
  if (!failed()) return {};
  return failure_message_;
}

PeerReads choose_peer_reads(int p, bool single_copy, PeerReads available) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return single_copy && static_cast<unsigned>(p) <= cores ? available : PeerReads::Staged;
}

void throw_failure(int rank, FailureKind kind, const std::string& message) {
  const std::string named = fmt::format("rank {}: {}", rank, message);
  switch (kind) {
    case FailureKind::Comm:
      throw CommError(message.starts_with("rank ") ? message : named);
    case FailureKind::InvalidArgument:
      throw std::invalid_argument(named);
    case FailureKind::Logic:
      throw std::logic_error(named);
    case FailureKind::Runtime:
      throw std::runtime_error(named);
    case FailureKind::Other:
      break;
  }
  throw std::runtime_error(named);
}

std::pair<FailureKind, std::string> current_failure() {
  try {
    throw;
  } catch (const CommError& error) {
    return {FailureKind::Comm, error.what()};
  } catch (const std::invalid_argument& error) {
    return {FailureKind::InvalidArgument, error.what()};
  } catch (const std::logic_error& error) {
    return {FailureKind::Logic, error.what()};
  } catch (const std::runtime_error& error) {
    return {FailureKind::Runtime, error.what()};
  } catch (const std::exception& error) {
    return {FailureKind::Other, error.what()};
  } catch (...) {
    return {FailureKind::Other, "an exception that is not a std::exception"};
  }
}

}  // namespace tinyllm::dist::detail
