// dist_mpi_test's main: every rank of `mpirun -n P dist_mpi_test` runs every
// test linked in, in the same order. MPI stays initialised for the whole
// run; each test makes its own MpiComm. Rank 0 prints GoogleTest's report;
// the other ranks print only their failures, each line led by the rank.
#include <gtest/gtest.h>

#include <cstdio>

#include "tinyllm/distributed/mpi_comm.h"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  tinyllm::dist::MpiSession session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
