// The command line's flags: integers parsed strictly, the model's and a
// run's flags for train and verify, what the flags leave to mpirun or to a
// checkpoint, and the usage error every bad command line ends in.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tinyllm/nn/gpt.h"
#include "tinyllm/train/trainer.h"

namespace tinyllm::app {

template <typename T>
constexpr std::uint64_t kMaxOf = static_cast<std::uint64_t>(std::numeric_limits<T>::max());

// unbounded: high is only the type's limit, so a positive low is the rule worth saying.
std::uint64_t parse_integer(const std::string& flag, const std::string& text, std::uint64_t low, std::uint64_t high,
                            bool unbounded);

// Every integer flag: CLI11 would read "-1" into an unsigned option as
// 2^64 - 1, and bound an int by a 310-digit number, so the text is parsed
// here, refusing a sign and any value outside [low, high].
template <typename T>
CLI::Option* add_integer(CLI::App& app, const std::string& flag, T& value, const std::string& help,
                         std::uint64_t low = 0, std::uint64_t high = kMaxOf<T>) {
  const auto set = [&value, flag, low, high](const std::string& text) {
    value = static_cast<T>(parse_integer(flag, text, low, high, high == kMaxOf<T>));
  };
  return app.add_option_function<std::string>(flag, set, help)->type_name("INT")->default_str(fmt::format("{}", value));
}

CLI::Option* add_integer(CLI::App& app, const std::string& flag, std::optional<std::size_t>& value,
                         const std::string& help);

struct ModelFlags {
  std::vector<CLI::Option*> options;  // --layers --heads --width --seq
};

ModelFlags add_model(CLI::App& app, nn::GPTConfig& m);

struct RunFlags {
  ModelFlags model;
  CLI::Option* batch = nullptr;
  CLI::Option* seed = nullptr;
  CLI::Option* world = nullptr;
  CLI::Option* eval_every = nullptr;
  CLI::Option* val_fraction = nullptr;
};

// The flags given as names, parsed once CLI11 is done so that a bad one
// gets this command's error message and exit status.
struct RunNames {
  std::string backend = "auto";
  std::string schedule = "cosine";
};

RunFlags add_run(CLI::App& app, train::TrainOptions& o, RunNames& names);

void parse_names(train::TrainOptions& o, const RunNames& names);

// An evaluation asked for where there is nothing to evaluate.
void check_eval(const train::TrainOptions& o, const RunFlags& flags);

// Under mpirun, the world is mpirun's unless --world says otherwise (then
// they must agree).
void adopt_mpirun_world(train::TrainOptions& o, const RunFlags& flags);

// With --resume or --init, what the user left unsaid comes from the
// checkpoint: the model's sizes, and for --resume the batch, the seed and
// the validation split (where the checkpoint records it).
void adopt_checkpoint(train::TrainOptions& o, const RunFlags& flags);

// A command line that is wrong: the message, where to read the flags, and
// exit status 2, as argparse and most Unix tools do.
int usage_error(const std::string& message, const CLI::App& app);

}  // namespace tinyllm::app
