// The tinyllm command: train, verify (P ranks against one process), memory
// (the per-rank byte table), diff (two checkpoints compared) and sample
// (text from a checkpoint). Here the subcommands and their flags are put
// together; flags.h parses, commands.h runs, printer.h prints, and main is
// the only place that catches and exits.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <tuple>

#include "commands.h"
#include "flags.h"
#include "tinyllm/train/launch.h"
#include "tinyllm/train/verify.h"

using namespace tinyllm;
using namespace tinyllm::app;

namespace {

// train's flags beyond verify's: what it writes, and what it resumes.
void add_train_only(CLI::App& train, train::TrainOptions& o) {
  train.add_option("--metrics", o.metrics, "write one JSON object per step to this file");
  train.add_option("--save", o.save_dir, "write checkpoints to this directory (at the end, and see --save-every)");
  add_integer(train, "--save-every", o.save_every, "also write a checkpoint every this many steps");
  train.add_flag("--overwrite", o.overwrite,
                 "save into a --save directory that holds checkpoints of another run, replacing them");
  train.add_option("--resume", o.resume, "continue from this checkpoint (or the latest in a directory)");
  train.add_flag("--allow-other-data", o.allow_other_data,
                 "resume even where --data (at --val-fraction) is not the corpus the checkpoint was trained on");
}

struct DiffArgs {
  std::string a, b;
  double tolerance = train::kVerifyTolerance;
};

CLI::App* add_diff(CLI::App& app, DiffArgs& d) {
  CLI::App* diff =
      app.add_subcommand("diff", "the largest difference between two checkpoints; exit 1 above the tolerance");
  diff->add_option("a", d.a, "checkpoint (or directory: its latest)")->required();
  diff->add_option("b", d.b, "checkpoint (or directory: its latest)")->required();
  diff->add_option("--tolerance", d.tolerance, "largest difference allowed")->capture_default_str();
  return diff;
}

CLI::App* add_sample(CLI::App& app, SampleOptions& o) {
  CLI::App* sample = app.add_subcommand("sample", "text from a checkpoint: the prompt and its continuation");
  sample->add_option("checkpoint", o.checkpoint, "checkpoint (or directory: its latest)")->required();
  sample->add_option("--prompt", o.prompt, "text to continue (default: a newline)");
  add_integer(*sample, "--tokens", o.generate.max_new_tokens, "new tokens (bytes) per sample");
  sample->add_option("--temperature", o.generate.temperature, "divides the logits; > 0")->capture_default_str();
  add_integer(*sample, "--top-k", o.generate.top_k, "draw among the K most likely (1: greedy)");
  add_integer(*sample, "--samples", o.samples, "samples, one after another from one generator");
  add_integer(*sample, "--seed", o.seed, "sampling seed: the same seed gives the same bytes");
  return sample;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tinyllm: exact data-parallel and ZeRO training of small GPTs"};
  app.require_subcommand(1);

  train::TrainOptions train_options;
  RunNames train_names;
  CLI::App* train = app.add_subcommand("train", "train the GPT on a byte corpus, on one or more ranks");
  const RunFlags train_flags = add_run(*train, train_options, train_names);
  add_train_only(*train, train_options);

  train::TrainOptions verify_options;
  RunNames verify_names;
  verify_options.steps = 50;  // twice the work of a run, on rank 0: keep the default check near a minute
  verify_options.world = 4;
  verify_options.zero = 2;
  CLI::App* verify = app.add_subcommand("verify", "train on P ranks and one process side by side; exit 1 above 1e-10");
  const RunFlags verify_flags = add_run(*verify, verify_options, verify_names);

  nn::GPTConfig memory_config;
  int memory_world = 4;
  CLI::App* memory = app.add_subcommand("memory", "the per-rank byte table of DDP and ZeRO 1-3, without training");
  add_model(*memory, memory_config);
  add_integer(*memory, "--world", memory_world, "ranks", 1);

  DiffArgs diff_args;
  CLI::App* diff = add_diff(app, diff_args);
  SampleOptions sample_options;
  CLI::App* sample = add_sample(app, sample_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what(), app);
  }
  // The command line's own errors are usage errors (exit 2), the run's exit 1.
  const auto usage = [&app](auto check) {
    try {
      check();
    } catch (const std::invalid_argument& e) {
      return usage_error(e.what(), app);
    }
    return 0;
  };
  try {
    for (auto [command, options, names, flags] : {std::tuple(train, &train_options, &train_names, &train_flags),
                                                  std::tuple(verify, &verify_options, &verify_names, &verify_flags)}) {
      if (!command->parsed()) continue;
      if (const int status = usage([&] {
            parse_names(*options, *names);
            adopt_mpirun_world(*options, *flags);
            check_eval(*options, *flags);
          }))
        return status;
      adopt_checkpoint(*options, *flags);  // a bad checkpoint is the run's error
      if (const int status = usage([&] { train::check_flags(*options); })) return status;
      return command == train ? run_train(*options) : run_verify(*options);
    }
    if (memory->parsed()) return run_memory(memory_config, memory_world);
    if (diff->parsed()) return run_diff(diff_args.a, diff_args.b, diff_args.tolerance);
    if (sample->parsed()) return run_sample(sample_options);
  } catch (const std::exception& e) {
    fmt::print(stderr, "tinyllm: error: {}\n", e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    // Under mpirun the message is out; now end every rank, a stopped one too.
    train::abort_mpi_job(1);
    return 1;
  }
  return 0;
}
