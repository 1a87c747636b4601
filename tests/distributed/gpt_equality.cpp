#include "gpt_equality.h"

#include <fmt/format.h>

#include "tinyllm/nn/gpt.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/train/data.h"

namespace tinyllm::testing {
namespace {

// Two blocks of width 16 on a 32-token vocabulary: every kind of parameter
// of the real model, small enough to train in milliseconds.
const nn::GPTConfig kConfig{.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
constexpr std::size_t kBatch = 24;  // divides by 1, 2, 3, 4 and 8 ranks
constexpr int kSteps = 5;

const train::Corpus& corpus() {
  static const train::Corpus corpus = [] {
    std::vector<int> tokens(1000);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>((i * i * 7 + i * 3 + 1) % 32);
    return train::Corpus(tokens);
  }();
  return corpus;
}

optim::OptimizerFactory adamw() {
  return optim::AdamW::factory({.lr = 1e-2, .betas = {0.9, 0.95}, .eps = 1e-8, .weight_decay = 0.1});
}

// Rank r of p's slice of step `step`, its mean loss backward, scaled so
// that the mean over ranks is the global batch's mean.
void backward_slice(const nn::GPT& model, int step, int r, int p) {
  const train::Batch b = corpus().batch(static_cast<std::size_t>(step), kBatch, kConfig.block_size, r, p);
  model.loss(b.inputs, b.targets, b.batch, b.seq).backward();
}

const std::vector<double>& one_process() {
  static const std::vector<double> trained = [] {
    nn::GPT model(kConfig);
    return train_alone(model, adamw(), kSteps, 0, [&](int step) { backward_slice(model, step, 0, 1); });
  }();
  return trained;
}

}  // namespace

std::vector<GptCase> gpt_cases(Backend backend, std::vector<int> worlds) {
  std::vector<GptCase> cases;
  for (int world : worlds)
    for (Mode mode : {Mode::Ddp, Mode::Zero1, Mode::Zero2, Mode::Zero3}) cases.push_back({backend, world, mode});
  return cases;
}

std::string gpt_case_name(const ::testing::TestParamInfo<GptCase>& info) {
  static const char* const kNames[] = {"Threads", "ThreadsStaged", "Procs", "ProcsStaged", "Mpi"};
  return fmt::format("{}P{}{}", kNames[static_cast<int>(info.param.backend)], info.param.world,
                     mode_name(info.param.mode));
}

TEST_P(GptEquality, FiveAdamWStepsMatchOneProcess) {
  const auto [backend, world, mode] = GetParam();
  const std::vector<double>& expected = one_process();  // before any fork
  run_ranks(backend, world, [&](dist::Comm& comm) {
    auto model = std::make_shared<nn::GPT>(kConfig);
    const std::vector<double> trained = train_mode(comm, mode, model, adamw(), kSteps, 0, [&](int step) {
      backward_slice(*model, step, comm.rank(), comm.size());
    });
    expect_all_within(trained, expected, 1e-10, "parameters");
    expect_same_bits_on_every_rank(comm, trained, "parameters");
  });
}

}  // namespace tinyllm::testing
