// The GPT equality suite (gpt_equality.h) on threads and processes, at every
// world from 1 to 4 and in every mode.
#include "gpt_equality.h"

namespace tinyllm::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Threads, GptEquality, ::testing::ValuesIn(gpt_cases(Backend::Threads, {1, 2, 3, 4})),
                         gpt_case_name);
INSTANTIATE_TEST_SUITE_P(Procs, GptEquality, ::testing::ValuesIn(gpt_cases(Backend::Procs, {1, 2, 3, 4})),
                         gpt_case_name);

// Bitwise mode at the worlds the trainer's batches divide into: 1 to 8.
INSTANTIATE_TEST_SUITE_P(Threads, GptBitwise, ::testing::ValuesIn(gpt_cases(Backend::Threads, {1, 2, 3, 4, 6, 8})),
                         gpt_case_name);
INSTANTIATE_TEST_SUITE_P(Procs, GptBitwise, ::testing::ValuesIn(gpt_cases(Backend::Procs, {1, 2, 3, 4, 6, 8})),
                         gpt_case_name);

}  // namespace
}  // namespace tinyllm::testing
