// The subcommands, each run once its flags are parsed and checked: train,
// verify, memory, diff and sample. Each returns the exit status; the run's
// errors are thrown, for main to print.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tinyllm/nn/gpt.h"
#include "tinyllm/train/trainer.h"

namespace tinyllm::app {

int run_train(const train::TrainOptions& o);

int run_verify(const train::TrainOptions& o);

int run_memory(const nn::GPTConfig& config, int world);

int run_diff(const std::string& a, const std::string& b, double tolerance);

struct SampleOptions {
  std::string checkpoint;
  std::string prompt = "\n";  // nanoGPT's sample.py starts from a newline too
  std::size_t samples = 1;
  std::uint64_t seed = 1337;
  nn::GenerateOptions generate{.max_new_tokens = 200, .top_k = 200};
};

// Each sample is the prompt and its continuation, printed as bytes on
// stdout with a separator line between samples; what it did goes to stderr,
// so stdout holds only the text.
int run_sample(const SampleOptions& o);

}  // namespace tinyllm::app
