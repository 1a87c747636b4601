#include "tinyllm/dist/threads_comm.h"

#include <atomic>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/dist/errors.h"

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

TEST(RunThreadsTest, RejectsAWorldBelowOne) {
  EXPECT_THROW_WITH(dist::run_threads(0, [](dist::Comm&) {}), std::invalid_argument,
                    "world size must be at least 1 (got 0)");
}

}  // namespace
}  // namespace tinyllm::testing
