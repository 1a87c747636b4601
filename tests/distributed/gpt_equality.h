// Equality at scale: the GPT of docs/DESIGN.md section 3, small, trained 5 AdamW steps
// with weight decay in docs/DESIGN.md's data order (section 4), on p ranks in a mode (DDP or
// a ZeRO stage), equals one process to 1e-10 in every parameter, with the
// same bits on every rank. Instantiated per backend (threads and processes
// in dist_test, MPI in dist_mpi_test).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm_contract.h"
#include "zero_testing.h"

namespace tinyllm::testing {

struct GptCase {
  Backend backend;
  int world;
  Mode mode;
};

class GptEquality : public ::testing::TestWithParam<GptCase> {};
// Bitwise mode (dist::BucketOptions::bitwise): the same run, one leaf per
// window and clipped, gives one process's bits exactly.
class GptBitwise : public ::testing::TestWithParam<GptCase> {};

// Every mode on each of the worlds.
std::vector<GptCase> gpt_cases(Backend backend, std::vector<int> worlds);
std::string gpt_case_name(const ::testing::TestParamInfo<GptCase>& info);  // "ProcsP3Zero2"

}  // namespace tinyllm::testing
