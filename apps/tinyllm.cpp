// The tinyllm command. The only place that catches, prints and exits.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "tinyllm/train/trainer.h"

namespace {

void add_train(CLI::App& app, tinyllm::train::TrainOptions& o) {
  auto& m = o.model;
  app.add_option("--layers", m.n_layer, "transformer blocks (L)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--heads", m.n_head, "attention heads (H)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--width", m.n_embd, "embedding width (C)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", m.block_size, "context length (T)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--data", o.data, "corpus file, one token per byte")->capture_default_str();
  app.add_option("--batch", o.batch, "global batch, in windows")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  app.add_option("--lr", o.adamw.lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  app.add_option("--beta1", o.adamw.betas.first, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", o.adamw.betas.second, "AdamW beta2")->capture_default_str();
  app.add_option("--eps", o.adamw.eps, "AdamW eps")->capture_default_str();
  app.add_option("--seed", o.seed, "initialisation seed")->capture_default_str();
}

int run_train(const tinyllm::train::TrainOptions& o) {
  fmt::print("tinyllm train: L={} H={} C={} T={} on {}, batch {}, {} steps\n", o.model.n_layer, o.model.n_head,
             o.model.n_embd, o.model.block_size, o.data, o.batch, o.steps);
  const auto summary = tinyllm::train::train(o, [&](const tinyllm::train::StepReport& r) {
    fmt::print("step {:>5}/{}  loss {:.4f}  {:>8.0f} tokens/s\n", r.step + 1, o.steps, r.loss, r.tokens_per_second);
    std::fflush(stdout);
  });
  fmt::print("done: {} parameters, loss {:.4f} -> {:.4f} in {:.1f} s\n", summary.num_parameters, summary.first_loss,
             summary.last_loss, summary.seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tinyllm: exact data-parallel and ZeRO training of small GPTs"};
  app.require_subcommand(1);
  tinyllm::train::TrainOptions train_options;
  CLI::App* train = app.add_subcommand("train", "train the GPT on a byte corpus");
  add_train(*train, train_options);
  CLI11_PARSE(app, argc, argv);
  try {
    if (train->parsed()) return run_train(train_options);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tinyllm: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
