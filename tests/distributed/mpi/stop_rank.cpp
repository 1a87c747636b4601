// A run of all_reduces through train::launch in which the last rank stops
// (SIGSTOP, as a stuck file system or a debugger would) instead of dying:
// `during`, before all_reduce #20, or `after`, once its last collective is
// done, where only launch's closing barrier can notice. The others must
// print the CommError and end the job with abort_mpi_job, the stopped rank
// included, where MPI_Finalize would wait for it forever; CTest pins the
// message and bounds the time. Exits 0 only if no rank stopped.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "tinyllm/distributed/comm.h"
#include "tinyllm/train/launch.h"

int main(int argc, char** argv) {
  using namespace tinyllm;
  const std::string when = argc > 1 ? argv[1] : "during";
  try {
    train::launch(train::Backend::Mpi, 0,
                  [&](dist::Comm& comm) {
                    const bool last = comm.rank() == comm.size() - 1;
                    std::vector<double> buf(1000, 1.0);
                    for (int step = 0; step < 40; ++step) {
                      if (last && when == "during" && step == 20) std::raise(SIGSTOP);
                      comm.all_reduce(buf, dist::ReduceOp::Mean);
                    }
                    if (last && when == "after") std::raise(SIGSTOP);
                  },
                  {.timeout = std::chrono::seconds(1)});
  } catch (const std::exception& error) {
    std::fprintf(stderr, "stop_rank: %s\n", error.what());
    std::fflush(stderr);
    train::abort_mpi_job(1);
    return 1;
  }
  return 0;
}
