#include <gtest/gtest.h>
#include <tinyllm/train/launch.h>

#include <atomic>

#include "support/expect_throw.h"

namespace tinyllm::train {
namespace {

TEST(LaunchTest, BackendNamesRoundTripAndOthersAreRefused) {
  for (Backend b : {Backend::Auto, Backend::Threads, Backend::Procs, Backend::Mpi}) {
    EXPECT_EQ(parse_backend(backend_name(b)), b);
  }
  EXPECT_THROW_WITH(parse_backend("gloo"), std::invalid_argument,
                    "backend must be auto, threads, procs or mpi (got 'gloo')");
}

TEST(LaunchTest, AutoForksOnlyForMoreThanOneRankOutsideMpirun) {
  EXPECT_EQ(resolve_backend(Backend::Auto, 1), Backend::Threads);
  EXPECT_EQ(resolve_backend(Backend::Auto, 4), Backend::Procs);
  EXPECT_EQ(resolve_backend(Backend::Threads, 4), Backend::Threads);
}

TEST(LaunchTest, RunsEveryRankOnThreadsAndProcesses) {
  std::atomic<int> ranks = 0;
  launch(Backend::Threads, 3, [&](dist::Comm& comm) {
    EXPECT_EQ(comm.size(), 3);
    ++ranks;
  });
  EXPECT_EQ(ranks, 3);
  launch(Backend::Procs, 2, [&](dist::Comm& comm) {
    double x = comm.rank() + 1;
    comm.all_reduce({&x, 1}, dist::ReduceOp::Sum);
    if (x != 3) throw std::runtime_error("the processes did not talk");
  });
}

TEST(LaunchTest, RefusesAWorldBelowOneAndMpiOutsideMpirun) {
  const auto nothing = [](dist::Comm&) {};
  EXPECT_THROW_WITH(launch(Backend::Threads, 0, nothing), std::invalid_argument,
                    "world size must be at least 1 (got 0)");
  EXPECT_THROW_WITH(launch(Backend::Procs, -2, nothing), std::invalid_argument, "(got -2)");
  EXPECT_THROW(launch(Backend::Mpi, 2, nothing), std::invalid_argument);  // not started by mpirun here
}

}  // namespace
}  // namespace tinyllm::train
