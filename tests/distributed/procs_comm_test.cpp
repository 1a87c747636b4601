// The procs backend: the contract, plus what only processes can do: die.
// Each death test checks that the survivors fail fast naming the dead rank,
// and that no child process or shared-memory segment is left behind.
#include "tinyllm/distributed/procs_comm.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/errors.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;
using dist::CommError;
using dist::ReduceOp;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

INSTANTIATE_TEST_SUITE_P(Procs, CommContract, ::testing::ValuesIn(contract_cases(Backend::Procs, {1, 2, 3, 4, 8})),
                         contract_case_name);
INSTANTIATE_TEST_SUITE_P(Procs, CommWorld,
                         ::testing::Values(ContractCase{Backend::Procs, 1, 0}, ContractCase{Backend::Procs, 2, 0},
                                           ContractCase{Backend::Procs, 3, 0}, ContractCase{Backend::Procs, 4, 0},
                                           ContractCase{Backend::Procs, 8, 0}),
                         contract_case_name);

INSTANTIATE_TEST_SUITE_P(ProcsStaged, CommContract, ::testing::ValuesIn(contract_cases(Backend::ProcsStaged, {2, 3})),
                         contract_case_name);
INSTANTIATE_TEST_SUITE_P(ProcsStaged, CommWorld, ::testing::Values(ContractCase{Backend::ProcsStaged, 3, 0}),
                         contract_case_name);

// This process's segments only (they are named for the launcher's pid): a
// second suite running beside this one makes segments of its own.
int tinyllm_segments() {
  const std::string mine = "tinyllm-" + std::to_string(getpid()) + "-";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().starts_with(mine)) ++count;
  }
  return count;
}

// No child of this process is left, running or unreaped.
void expect_no_children() {
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

class RunProcsTest : public ::testing::Test {
 protected:
  void SetUp() override { segments_before_ = tinyllm_segments(); }
  void TearDown() override {
    EXPECT_EQ(tinyllm_segments(), segments_before_) << "a shared-memory segment outlived the run";
    expect_no_children();
  }
  int segments_before_ = 0;
};

TEST_F(RunProcsTest, EachRankIsItsOwnProcess) {
  const pid_t parent = getpid();
  run_ranks(Backend::Procs, 3, [&](Comm& comm) {
    EXPECT_NE(getpid(), parent);
    EXPECT_EQ(getppid(), parent);
    std::vector<double> pid{static_cast<double>(getpid())};
    std::vector<double> pids(3);
    comm.all_gather(pid, pids);
    EXPECT_NE(pids[0], pids[1]);
    EXPECT_NE(pids[1], pids[2]);
  });
}

TEST_F(RunProcsTest, AKilledRankFailsTheOthersNamingIt) {
  const milliseconds timeout(2000);
  const auto start = Clock::now();
  auto body = [&](Comm& comm) {
    if (comm.rank() == 0) raise(SIGKILL);
    std::vector<double> buf(1000, 1.0);
    EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Sum), CommError, "rank 0 died of signal 9");
  };
  EXPECT_THROW_WITH(dist::run_procs(4, body, {.timeout = timeout}), CommError, "rank 0 died of signal 9 (Killed)");
  EXPECT_LT(Clock::now() - start, 2 * timeout);
}

// The rank dies inside a long all_reduce (a thread of its own kills it), so
// the others are mid-round, waiting at a barrier point of the transfer.
TEST_F(RunProcsTest, ARankKilledMidCollectiveFailsTheOthers) {
  const milliseconds timeout(2000);
  const auto start = Clock::now();
  auto body = [&](Comm& comm) {
    std::vector<double> buf(std::size_t{1} << 23, 1.0);
    if (comm.rank() == 2) {
      std::thread([] {
        std::this_thread::sleep_for(milliseconds(5));
        raise(SIGKILL);
      }).detach();
    }
    for (int k = 0; k < 1000; ++k) comm.all_reduce(buf, ReduceOp::Mean);
  };
  EXPECT_THROW_WITH(dist::run_procs(3, body, {.timeout = timeout}), CommError, "rank 2 died of signal 9");
  EXPECT_LT(Clock::now() - start, 2 * timeout + milliseconds(2000));
}

TEST_F(RunProcsTest, AnExitStatusIsReported) {
  auto body = [](Comm& comm) {
    if (comm.rank() == 1) _exit(3);
    comm.barrier();
  };
  EXPECT_THROW_WITH(dist::run_procs(2, body, {.timeout = milliseconds(5000)}), CommError,
                    "rank 1 exited with status 3");
}

// An exit with status 0 is no success when fn had not returned: the rank
// is named whether the others wait for it in a collective or return.
TEST_F(RunProcsTest, AnExitWithStatusZeroBeforeReturningIsNamed) {
  for (const bool collective : {true, false}) {
    SCOPED_TRACE(collective ? "others in a barrier" : "others return");
    auto body = [collective](Comm& comm) {
      if (comm.rank() == 1) _exit(0);
      if (collective) comm.barrier();
    };
    EXPECT_THROW_WITH(dist::run_procs(3, body, {.timeout = milliseconds(30'000)}), CommError,
                      "rank 1 exited with status 0 before returning a result");
  }
}

// A poll that throws stops the children (a loop outside any collective and
// a barrier alike), reaps them all, and its own exception comes back.
TEST_F(RunProcsTest, APollThatThrowsStopsEveryRank) {
  int polls = 0;
  auto body = [](Comm& comm) {
    if (comm.rank() == 0) {
      for (;;) std::this_thread::sleep_for(milliseconds(10));
    }
    comm.barrier();
  };
  auto poll = [&polls] {
    if (++polls == 3) throw std::out_of_range("stop now");
  };
  EXPECT_THROW_WITH(dist::run_procs(2, body, {.timeout = milliseconds(30'000)}, poll), std::out_of_range, "stop now");
  EXPECT_EQ(polls, 3);
}

// A rank stuck outside any collective never sees the failure; the launcher
// kills it once the timeout has passed after the first failure.
TEST_F(RunProcsTest, ARankStuckOutsideCollectivesIsKilled) {
  const milliseconds timeout(500);
  const auto start = Clock::now();
  auto body = [](Comm& comm) {
    if (comm.rank() == 0) throw std::logic_error("broken invariant");
    std::this_thread::sleep_for(std::chrono::hours(1));
  };
  EXPECT_THROW_WITH(dist::run_procs(3, body, {.timeout = timeout}), std::logic_error, "rank 0: broken invariant");
  EXPECT_LT(Clock::now() - start, 2 * timeout + milliseconds(2000));
}

}  // namespace
}  // namespace tinyllm::testing
