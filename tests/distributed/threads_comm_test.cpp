#include "tinyllm/distributed/threads_comm.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/errors.h"
#include "tinyllm/distributed/procs_comm.h"

namespace tinyllm::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Threads, CommContract, ::testing::ValuesIn(contract_cases(Backend::Threads, {1, 2, 3, 4, 8})),
                         contract_case_name);
INSTANTIATE_TEST_SUITE_P(Threads, CommWorld,
                         ::testing::Values(ContractCase{Backend::Threads, 1, 0}, ContractCase{Backend::Threads, 2, 0},
                                           ContractCase{Backend::Threads, 3, 0}, ContractCase{Backend::Threads, 4, 0},
                                           ContractCase{Backend::Threads, 8, 0}),
                         contract_case_name);

INSTANTIATE_TEST_SUITE_P(ThreadsStaged, CommContract,
                         ::testing::ValuesIn(contract_cases(Backend::ThreadsStaged, {2, 3})), contract_case_name);
INSTANTIATE_TEST_SUITE_P(ThreadsStaged, CommWorld, ::testing::Values(ContractCase{Backend::ThreadsStaged, 3, 0}),
                         contract_case_name);

TEST(RunThreadsTest, RunsEveryRankOnceWithItsOwnRank) {
  std::atomic<int> ranks_seen{0};
  dist::run_threads(5, [&](dist::Comm& comm) {
    EXPECT_EQ(comm.size(), 5);
    ranks_seen.fetch_or(1 << comm.rank());
  });
  EXPECT_EQ(ranks_seen.load(), 0b11111);
}

TEST(RunThreadsTest, RethrowsTheFailureWithItsRankAndType) {
  auto body = [](dist::Comm& comm) {
    if (comm.rank() == 2) throw std::invalid_argument("bad value 7");
  };
  EXPECT_THROW_WITH(dist::run_threads(3, body), std::invalid_argument, "rank 2: bad value 7");
}

// A poll that throws stops the run: rank 0, waiting in a barrier rank 1
// never joins, fails fast with the stop's message, and poll's own
// exception comes back, poll not called again.
TEST(RunThreadsTest, APollThatThrowsStopsTheRankWaitingInACollective) {
  std::atomic<int> polls{0};
  std::atomic<bool> stopped{false};
  auto body = [&](dist::Comm& comm) {
    if (comm.rank() == 0) {
      EXPECT_THROW_WITH(comm.barrier(), dist::CommError, "the run was stopped: enough");
    } else {  // until the stop; the deadline only ends a failing test
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!stopped && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  };
  auto poll = [&] {
    if (++polls == 2) {
      stopped = true;
      throw std::out_of_range("enough");
    }
  };
  EXPECT_THROW_WITH(dist::run_threads(2, body, {}, poll), std::out_of_range, "enough");
  EXPECT_EQ(polls.load(), 2);
}

TEST(RunThreadsTest, RejectsAWorldOutsideItsRange) {
  EXPECT_THROW_WITH(dist::run_threads(0, [](dist::Comm&) {}), std::invalid_argument,
                    "world size must be from 1 to 65536 (got 0)");
  EXPECT_THROW_WITH(dist::run_threads(dist::kMaxSharedMemoryWorld + 1, [](dist::Comm&) {}), std::invalid_argument,
                    "run_threads: world size must be from 1 to 65536 (got 65537)");
  EXPECT_THROW_WITH(dist::run_procs(dist::kMaxSharedMemoryWorld + 1, [](dist::Comm&) {}), std::invalid_argument,
                    "run_procs: world size must be from 1 to 65536 (got 65537)");
}

// Every backend checks CommOptions::timeout before it starts a rank.
TEST(RunThreadsTest, RejectsATimeoutOutOfRange) {
  const auto none = [](dist::Comm&) {};
  EXPECT_THROW_WITH(dist::run_threads(2, none, {.timeout = std::chrono::milliseconds(0)}), std::invalid_argument,
                    "run_threads: timeout must be in [1, 1000000000000] ms (got 0 ms)");
  EXPECT_THROW_WITH(dist::run_procs(2, none, {.timeout = dist::kMaxTimeout + std::chrono::milliseconds(1)}),
                    std::invalid_argument,
                    "run_procs: timeout must be in [1, 1000000000000] ms (got 1000000000001 ms)");
}

// Runs in a forked child. Root ignores RLIMIT_NPROC, so the child becomes
// `nobody` first; the lowest soft limit at which one thread starts lets
// rank 0's thread start and refuses rank 1's. Returns what rank 0 was told,
// or "skip: why" where the machine does not allow the experiment.
std::string what_rank0_hears_when_rank1_cannot_start() {
  constexpr uid_t kNobody = 65534;
  if (setgid(kNobody) != 0 || setuid(kNobody) != 0) return "skip: cannot become nobody";
  rlimit limit{};
  getrlimit(RLIMIT_NPROC, &limit);
  auto one_thread_starts = [] {
    try {
      std::thread([] {}).join();
      return true;
    } catch (const std::system_error&) {
      return false;
    }
  };
  for (limit.rlim_cur = 1; limit.rlim_cur < 4096; ++limit.rlim_cur) {
    if (setrlimit(RLIMIT_NPROC, &limit) != 0) return "skip: cannot set RLIMIT_NPROC";
    if (one_thread_starts()) break;
  }
  if (limit.rlim_cur == 4096) return "skip: no thread limit found";

  std::string heard = "nothing";
  dist::CommOptions options;
  options.timeout = std::chrono::seconds(10);  // a hang would end as a timeout, heard as such
  try {
    dist::run_threads(
        3,
        [&](dist::Comm& comm) {
          std::vector<double> x{1.0};
          try {
            comm.all_reduce(x, dist::ReduceOp::Sum);
          } catch (const std::exception& e) {
            if (comm.rank() == 0) heard = e.what();
            throw;
          }
        },
        options);
  } catch (const std::system_error&) {
    return heard;
  }
  return "run_threads returned although a thread could not start";
}

TEST(ThreadStartTest, ARankWhoseThreadCannotStartStopsTheRanksAlreadyRunning) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as nobody under a thread limit";
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    close(pipe_fds[0]);
    const std::string heard = what_rank0_hears_when_rank1_cannot_start();
    const bool written = write(pipe_fds[1], heard.data(), heard.size()) == static_cast<ssize_t>(heard.size());
    _exit(written ? 0 : 1);
  }
  close(pipe_fds[1]);
  std::string heard;
  char buffer[256];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    heard.append(buffer, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  if (heard.starts_with("skip: ")) GTEST_SKIP() << heard;
  EXPECT_NE(heard.find("rank 1 failed: its thread could not start"), std::string::npos) << heard;
}

}  // namespace
}  // namespace tinyllm::testing
