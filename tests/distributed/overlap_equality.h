// BucketOptions::overlap against the synchronous run: the same training
// (a small GPT, AdamW, two micro-batches, clipping, small buckets) in every
// mode (DDP, stages 1 to 3, stage 3 by blocks at prefetch 0 and 1) gives
// the same bits with the communication thread as without, and sends the
// same bytes. Instantiated per backend (threads and processes in
// dist_test, MPI in dist_mpi_test).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm_contract.h"
#include "zero_testing.h"

namespace tinyllm::testing {

struct OverlapCase {
  Backend backend;
  int world;
  Mode mode;
  int prefetch;  // stage 3 by blocks; -1 for no units
};

class OverlapEquality : public ::testing::TestWithParam<OverlapCase> {};

std::vector<OverlapCase> overlap_cases(Backend backend, int world);
std::string overlap_case_name(const ::testing::TestParamInfo<OverlapCase>& info);  // "ProcsP3Zero3UnitsPrefetch1"

}  // namespace tinyllm::testing
