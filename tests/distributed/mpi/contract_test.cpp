// The Comm contract, the GPT equality suite and overlap's equality with the
// synchronous run on the MPI backend: the world is whatever mpirun
// started, so the cases are that world with every n, and that world in
// every mode.
#include <cstdlib>

#include "../comm_contract.h"
#include "../gpt_equality.h"
#include "../overlap_equality.h"
#include "tinyllm/distributed/mpi_comm.h"

namespace tinyllm::testing {
namespace {

// Read before MPI_Init (test registration runs first), from the launcher's environment.
int launched_world() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 1;
}

const bool kRunnerSet = [] {
  set_mpi_runner([](int world, const RankBody& body, dist::CommOptions options) {
    dist::MpiComm comm(MPI_COMM_WORLD, options);
    ASSERT_EQ(comm.size(), world);
    body(comm);
  });
  return true;
}();

INSTANTIATE_TEST_SUITE_P(Mpi, CommContract, ::testing::ValuesIn(contract_cases(Backend::Mpi, {launched_world()})),
                         contract_case_name);
INSTANTIATE_TEST_SUITE_P(Mpi, CommWorld, ::testing::Values(ContractCase{Backend::Mpi, launched_world(), 0}),
                         contract_case_name);
INSTANTIATE_TEST_SUITE_P(Mpi, GptEquality, ::testing::ValuesIn(gpt_cases(Backend::Mpi, {launched_world()})),
                         gpt_case_name);
INSTANTIATE_TEST_SUITE_P(Mpi, GptBitwise, ::testing::ValuesIn(gpt_cases(Backend::Mpi, {launched_world()})),
                         gpt_case_name);
INSTANTIATE_TEST_SUITE_P(Mpi, OverlapEquality, ::testing::ValuesIn(overlap_cases(Backend::Mpi, launched_world())),
                         overlap_case_name);

}  // namespace
}  // namespace tinyllm::testing
