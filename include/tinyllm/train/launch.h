// launch: runs a function on the ranks of a backend, the one place where
// `--backend auto|threads|procs|mpi` and `--world P` become a dist::Comm.
// Threads share this process (tests, and one rank without a fork), procs
// are forked processes of this machine, mpi the processes mpirun started.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::train {

enum class Backend { Auto, Threads, Procs, Mpi };

// "auto", "threads", "procs", "mpi"; parse_backend throws
// std::invalid_argument naming any other spelling.
const char* backend_name(Backend backend);
Backend parse_backend(std::string_view name);

// The backend `auto` stands for here: mpi when mpirun started this process,
// else procs for more than one rank, else threads (one rank, no fork).
Backend resolve_backend(Backend backend, int world);

// Runs fn(comm) on `world` ranks of the backend and returns when all are
// done, rethrowing the first rank's failure (see run_threads, run_procs).
// Under mpi, this process is one rank of mpirun's world and `world` must
// be that size or 0 (take mpirun's). std::invalid_argument for a world
// below 1 (other than mpi's 0), mpi when tinyllm was built without it or
// not started by mpirun, or a world that differs from mpirun's.
// Every wait is bounded by options.timeout; under mpi, a final barrier
// also keeps MPI_Finalize from waiting for a rank that stopped after its
// last collective.
void launch(Backend backend, int world, const std::function<void(dist::Comm&)>& fn, dist::CommOptions options = {});

// For the program, after it printed a failure: under mpirun, ends the whole
// job (dist::abort_mpi_job), since the ranks a stopped one holds up would
// otherwise wait in MPI_Finalize forever. Elsewhere it returns at once.
void abort_mpi_job(int code);

}  // namespace tinyllm::train
