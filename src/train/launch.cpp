#include "tinyllm/train/launch.h"

#include <fmt/format.h>

#include <stdexcept>

#include "tinyllm/distributed/procs_comm.h"
#include "tinyllm/distributed/threads_comm.h"
#ifdef TINYLLM_WITH_MPI
#include "tinyllm/distributed/mpi_comm.h"
#endif

namespace tinyllm::train {
namespace {

bool started_by_mpirun() {
#ifdef TINYLLM_WITH_MPI
  return dist::launched_by_mpirun();
#else
  return false;
#endif
}

void launch_mpi([[maybe_unused]] int world, [[maybe_unused]] const std::function<void(dist::Comm&)>& fn,
                [[maybe_unused]] dist::CommOptions options) {
#ifdef TINYLLM_WITH_MPI
  if (!dist::launched_by_mpirun()) {
    throw std::invalid_argument("backend mpi: this process was not started by mpirun or mpiexec");
  }
  dist::MpiSession session;
  dist::MpiComm comm(MPI_COMM_WORLD, options);
  if (world != 0 && world != comm.size()) {
    throw std::invalid_argument(fmt::format(
        "--world {} differs from the {} processes mpirun started (drop --world or match -n)", world, comm.size()));
  }
  fn(comm);
  // A rank stuck after its last collective would hold the others in
  // MPI_Finalize forever; this barrier names it within the timeout instead.
  comm.barrier();
#else
  throw std::invalid_argument("backend mpi: this tinyllm was built without MPI (TINYLLM_WITH_MPI=OFF)");
#endif
}

}  // namespace

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::Auto:
      return "auto";
    case Backend::Threads:
      return "threads";
    case Backend::Procs:
      return "procs";
    case Backend::Mpi:
      return "mpi";
  }
  return "?";
}

Backend parse_backend(std::string_view name) {
  for (Backend b : {Backend::Auto, Backend::Threads, Backend::Procs, Backend::Mpi}) {
    if (name == backend_name(b)) return b;
  }
  throw std::invalid_argument(fmt::format("backend must be auto, threads, procs or mpi (got '{}')", name));
}

Backend resolve_backend(Backend backend, int world) {
  if (backend != Backend::Auto) return backend;
  if (started_by_mpirun()) return Backend::Mpi;
  return world > 1 ? Backend::Procs : Backend::Threads;
}

void abort_mpi_job([[maybe_unused]] int code) {
#ifdef TINYLLM_WITH_MPI
  dist::abort_mpi_job(code);
#endif
}

void launch(Backend backend, int world, const std::function<void(dist::Comm&)>& fn, dist::CommOptions options) {
  backend = resolve_backend(backend, world);
  if (world < 1 && !(backend == Backend::Mpi && world == 0)) {
    throw std::invalid_argument(fmt::format("world size must be at least 1 (got {})", world));
  }
  switch (backend) {
    case Backend::Threads:
      return dist::run_threads(world, fn, options);
    case Backend::Procs:
      return dist::run_procs(world, fn, options);
    case Backend::Mpi:
      return launch_mpi(world, fn, options);
    case Backend::Auto:
      break;
  }
  throw std::logic_error("launch: unresolved backend");
}

}  // namespace tinyllm::train
