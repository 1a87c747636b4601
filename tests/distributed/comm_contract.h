// The one contract every Comm backend keeps, as a value-parameterised suite:
// each backend's test file instantiates CommContract with its cases, so the
// same assertions run on threads, processes and MPI ranks. Values come from
// formulas of (rank, index), so every expectation is computed in one process
// from first principles, never by a second implementation of a collective.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::testing {

// The *Staged backends turn CommOptions::single_copy off, so the large
// cases also run the path that copies through the shared slots.
enum class Backend { Threads, ThreadsStaged, Procs, ProcsStaged, Mpi };

struct ContractCase {
  Backend backend;
  int world;
  std::size_t n;
};

using RankBody = std::function<void(dist::Comm&)>;

// Runs body on `world` ranks of the backend. A forked rank's failed
// expectations are reported here, in the parent, as failures of this test.
void run_ranks(Backend backend, int world, const RankBody& body, dist::CommOptions options = {});

// How the MPI test program runs a body on its ranks (it owns MPI_Init).
void set_mpi_runner(std::function<void(int world, const RankBody&, dist::CommOptions)> runner);

// Every (world, n) the contract covers; n spans empty, tiny, uneven and
// several rounds of the shared-memory slot.
std::vector<ContractCase> contract_cases(Backend backend, std::vector<int> worlds);

// "ThreadsP4N1000".
std::string contract_case_name(const ::testing::TestParamInfo<ContractCase>& info);

class CommContract : public ::testing::TestWithParam<ContractCase> {};
// The cases that need no n: world only.
class CommWorld : public ::testing::TestWithParam<ContractCase> {};

}  // namespace tinyllm::testing
