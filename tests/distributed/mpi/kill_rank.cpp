// A run of all_reduces in which rank 1 SIGKILLs itself at step 20. mpirun
// must notice, name the rank, stop the others and exit non-zero; CTest pins
// the message and bounds the time. Exits 0 only if the kill never happened.
#include <csignal>
#include <cstdio>
#include <vector>

#include "tinyllm/distributed/errors.h"
#include "tinyllm/distributed/mpi_comm.h"

int main(int argc, char** argv) {
  using namespace tinyllm::dist;
  MpiSession session(&argc, &argv);
  MpiComm comm(MPI_COMM_WORLD, {.timeout = std::chrono::seconds(10)});
  std::vector<double> buf(1000, 1.0);
  try {
    for (int step = 0; step < 1000; ++step) {
      if (step == 20 && comm.rank() == 1) std::raise(SIGKILL);
      comm.all_reduce(buf, ReduceOp::Mean);
    }
  } catch (const CommError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  return 0;
}
