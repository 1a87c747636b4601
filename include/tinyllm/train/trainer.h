// The training loop on one process: the GPT of DESIGN.md on a byte corpus in
// DESIGN.md's data order, AdamW decaying every parameter alike. It reports
// each step to a callback and prints nothing itself (the app does).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tinyllm/nn/gpt.h"
#include "tinyllm/optim/adamw.h"

namespace tinyllm::train {

// Present on every Debian machine (package base-files): a real English text
// to learn from without downloading anything.
inline constexpr const char* kDefaultCorpus = "/usr/share/common-licenses/GPL-3";

struct TrainOptions {
  nn::GPTConfig model;
  std::string data = kDefaultCorpus;
  std::size_t batch = 16;  // global batch, in windows of model.block_size tokens
  std::size_t steps = 50;
  optim::AdamWOptions adamw{.lr = 1e-3, .betas = {0.9, 0.95}, .eps = 1e-8, .weight_decay = 0.1};
  std::uint64_t seed = 1337;
};

struct StepReport {
  std::size_t step = 0;  // from 0
  double loss = 0.0;     // mean over the global batch
  double seconds = 0.0;  // wall time of this step
  double tokens_per_second = 0.0;
};

struct TrainSummary {
  double first_loss = 0.0;
  double last_loss = 0.0;
  double seconds = 0.0;
  std::size_t num_parameters = 0;
};

TrainSummary train(const TrainOptions& options, const std::function<void(const StepReport&)>& on_step = {});

}  // namespace tinyllm::train
