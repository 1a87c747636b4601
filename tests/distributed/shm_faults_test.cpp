// Faults on the shared-memory backends (threads and procs): a rank that
// throws, stops answering or (procs) dies makes every other rank fail fast
// with a CommError that names it, never hang.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/errors.h"
#include "tinyllm/distributed/procs_comm.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;
using dist::CommError;
using dist::ReduceOp;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

class ShmFaults : public ::testing::TestWithParam<ContractCase> {};

TEST_P(ShmFaults, ARankThatThrowsFailsTheOthersAtOnce) {
  const auto [backend, p, n] = GetParam();
  const auto start = Clock::now();
  auto body = [&](Comm& comm) {
    if (comm.rank() == 1) throw std::runtime_error("boom");
    std::vector<double> buf(1000, 1.0);
    EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Sum), CommError, "all_reduce #0 aborted: rank 1 failed: boom");
    throw CommError("rank " + std::to_string(comm.rank()) + " gave up");
  };
  EXPECT_THROW_WITH(run_ranks(backend, p, body, {.timeout = milliseconds(30'000)}), std::runtime_error, "rank 1: boom");
  EXPECT_LT(Clock::now() - start, milliseconds(10'000)) << "the others waited for the timeout instead";
}

TEST_P(ShmFaults, ARankThatStopsAnsweringIsNamedWithinTheTimeout) {
  const auto [backend, p, n] = GetParam();
  const milliseconds timeout(500);
  const auto start = Clock::now();
  auto body = [&](Comm& comm) {
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(4 * timeout);
      return;
    }
    std::vector<double> buf(10, 1.0);
    EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Sum), CommError, "waiting for rank 0");
  };
  EXPECT_THROW_WITH(run_ranks(backend, p, body, {.timeout = timeout}), CommError,
                    "all_reduce #0 timed out after 500 ms waiting for rank 0");
  EXPECT_LT(Clock::now() - start, 4 * timeout + milliseconds(3000));
}

// A hung rank: under threads one that never enters all_reduce #1, under
// procs one stopped by SIGSTOP. The others fail within the timeout plus a
// 3 s margin, naming the collective and the rank; under procs the launcher
// kills the stopped rank 1 s after that (procs_comm.cpp's kGrace). Measured
// at 1.0 s and 2.0 s (procs) beside a second suite, half the bounds or less.
TEST_P(ShmFaults, AHungRankFailsTheOthersWithinTheTimeout) {
  const auto [backend, p, n] = GetParam();
  const milliseconds timeout(1000), margin(3000), grace(backend == Backend::Procs ? 1000 : 0);
  std::atomic<int> gave_up{0};  // threads: the stand-in returns once the others have failed
  const auto start = Clock::now();
  auto body = [&](Comm& comm) {
    std::vector<double> buf(10, 1.0);
    comm.all_reduce(buf, ReduceOp::Sum);
    if (comm.rank() == p - 1) {
      if (backend == Backend::Procs) raise(SIGSTOP);
      while (gave_up < p - 1) std::this_thread::sleep_for(milliseconds(5));
      return;
    }
    const auto before = Clock::now();
    EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Sum), CommError,
                      fmt::format("all_reduce #1 timed out after 1000 ms waiting for rank {}", p - 1));
    EXPECT_LT(Clock::now() - before, timeout + margin);
    ++gave_up;
  };
  EXPECT_THROW_WITH(run_ranks(backend, p, body, {.timeout = timeout}), CommError,
                    fmt::format("all_reduce #1 timed out after 1000 ms waiting for rank {}", p - 1));
  EXPECT_LT(Clock::now() - start, timeout + grace + margin);
}

TEST_P(ShmFaults, AFailedCollectiveRefusesTheNextOne) {
  const auto [backend, p, n] = GetParam();
  auto body = [&](Comm& comm) {
    if (comm.rank() == 0) throw std::runtime_error("gone");
    std::vector<double> buf(3, 1.0);
    EXPECT_THROW(comm.all_reduce(buf, ReduceOp::Sum), CommError);
    EXPECT_THROW_WITH(comm.barrier(), CommError, "barrier #1 refused: an earlier collective failed");
  };
  EXPECT_THROW_WITH(run_ranks(backend, p, body), std::runtime_error, "rank 0: gone");
}

// The failure travels in a fixed buffer in shared memory: a longer message
// is cut to fit it, terminator included, and the rest of it is lost.
TEST_P(ShmFaults, AMessageLongerThanTheFailureBufferIsCutToFit) {
  const auto [backend, p, n] = GetParam();
  constexpr std::size_t kKept = 2047;
  auto body = [&](Comm& comm) {
    if (comm.rank() == 1) throw std::runtime_error(std::string(kKept, 'x') + std::string(3000, 'y'));
    std::vector<double> buf(3, 1.0);
    comm.all_reduce(buf, ReduceOp::Sum);
  };
  try {
    run_ranks(backend, p, body);
    ADD_FAILURE() << "no rank failed";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 1: " + std::string(kKept, 'x'));
  }
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmFaults,
                         ::testing::Values(ContractCase{Backend::Threads, 2, 0}, ContractCase{Backend::Threads, 4, 0},
                                           ContractCase{Backend::Procs, 2, 0}, ContractCase{Backend::Procs, 4, 0}),
                         contract_case_name);

}  // namespace
}  // namespace tinyllm::testing
