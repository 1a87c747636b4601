#include <fmt/format.h>
#include <gtest/gtest.h>
#include <tinyllm/train/launch.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "support/expect_throw.h"
#include "tinyllm/train/trainer.h"
#include "train_testing.h"

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

// Sets an environment variable for one scope, as mpirun would for its ranks.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Under an mpirun of N > 1 processes every process would run the whole run
// on its own backend: refused before anything starts, naming N and the
// backend. One process under mpirun is one run, and allowed.
TEST(LaunchTest, ANonMpiBackendUnderAnMpirunOfSeveralProcessesIsRefused) {
  TrainOptions o = testing::tiny_run(2);
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    SCOPED_TRACE(variable);
    ScopedEnv launched(variable, "2");
    for (Backend backend : {Backend::Threads, Backend::Procs}) {
      o.backend = backend;
      EXPECT_THROW_WITH(check_flags(o), std::invalid_argument,
                        fmt::format("launched by mpirun with 2 processes but --backend {}; use --backend mpi (or "
                                    "run without mpirun)",
                                    backend_name(backend)));
      EXPECT_THROW_WITH(train(o), std::invalid_argument, "launched by mpirun with 2 processes");
    }
    o.backend = Backend::Mpi;
    o.world = 0;
    EXPECT_NO_THROW(check_flags(o));
    o.world = 2;
  }
  ScopedEnv alone("OMPI_COMM_WORLD_SIZE", "1");
  o.backend = Backend::Threads;
  EXPECT_NO_THROW(check_flags(o));
}

}  // namespace
}  // namespace tinyllm::train
