#include "flags.h"

#include <charconv>
#include <cstdio>
#include <iterator>
#include <stdexcept>

#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/launch.h"

namespace tinyllm::app {

// unbounded: high is only the type's limit, so a positive low is the rule worth saying.
std::uint64_t parse_integer(const std::string& flag, const std::string& text, std::uint64_t low, std::uint64_t high,
                            bool unbounded) {
  std::uint64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, n);
  const bool too_large = error == std::errc::result_out_of_range || (error == std::errc() && n > high);
  if (text.empty() || error != std::errc() || stop != end || n < low || n > high) {
    throw CLI::ValidationError(
        unbounded && low > 0 && !too_large
            ? fmt::format("{} must be at least {} (got {})", flag, low, text)
            : fmt::format("{} must be an integer from {} to {} (got {})", flag, low, high, text));
  }
  return n;
}

CLI::Option* add_integer(CLI::App& app, const std::string& flag, std::optional<std::size_t>& value,
                         const std::string& help) {
  const auto set = [&value, flag](const std::string& text) {
    value = parse_integer(flag, text, 0, kMaxOf<std::size_t>, true);
  };
  return app.add_option_function<std::string>(flag, set, help)->type_name("INT");
}

ModelFlags add_model(CLI::App& app, nn::GPTConfig& m) {
  return {{
      add_integer(app, "--layers", m.n_layer, "transformer blocks (L)", 1),
      add_integer(app, "--heads", m.n_head, "attention heads (H)", 1),
      add_integer(app, "--width", m.n_embd, "embedding width (C)", 1),
      add_integer(app, "--seq", m.block_size, "context length (T)", 1),
  }};
}

RunFlags add_run(CLI::App& app, train::TrainOptions& o, RunNames& names) {
  RunFlags flags{.model = add_model(app, o.model)};
  app.add_option("--data", o.data, "corpus file, one token per byte")->capture_default_str();
  flags.val_fraction =
      app.add_option("--val-fraction", o.val_fraction, "the corpus's last fraction of bytes, held out for validation")
          ->capture_default_str();
  flags.eval_every = add_integer(app, "--eval-every", o.eval_every,
                                 "the validation loss every this many steps and at the end (0: never)");
  add_integer(app, "--eval-batches", o.eval_batches, "validation batches of --batch windows each (0: every window)");
  flags.batch = add_integer(app, "--batch", o.batch, "global batch, in windows", 1);
  add_integer(app, "--steps", o.steps,
              "optimizer steps (a resumed run counts its earlier ones; train --steps 0 --save DIR saves the start)");
  app.add_option("--lr", o.adamw.lr, "AdamW learning rate (the schedule's peak), in [0, 1000]")->capture_default_str();
  app.add_option("--schedule", names.schedule,
                 "learning rate by step: cosine (nanoGPT's linear warmup, cosine decay to --min-lr, then --min-lr) "
                 "or constant (--lr throughout)")
      ->capture_default_str();
  add_integer(app, "--warmup-steps", o.warmup_steps,
              "cosine: steps of linear warmup (default: 1/10 of the decay steps)");
  add_integer(app, "--decay-steps", o.decay_steps, "cosine: the step it reaches --min-lr at (0: --steps)");
  app.add_option("--min-lr", o.min_lr, "cosine: the learning rate after the decay, in [0, 1000] (default: --lr / 10)");
  app.add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay, in [0, 1000]")
      ->capture_default_str();
  app.add_option("--beta1", o.adamw.betas.first, "AdamW beta1, in [0, 1)")->capture_default_str();
  app.add_option("--beta2", o.adamw.betas.second, "AdamW beta2, in [0, 1)")->capture_default_str();
  app.add_option("--eps", o.adamw.eps, "AdamW eps, in (0, 1]")->capture_default_str();
  flags.seed = add_integer(app, "--seed", o.seed, "initialisation seed");
  flags.world = add_integer(app, "--world", o.world, "ranks (under mpirun: its -n, the default there)", 1);
  add_integer(app, "--zero", o.zero, "0: DDP; 1, 2, 3: ZeRO stage", 0, 3);
  app.add_option("--backend", names.backend, "auto, threads, procs or mpi")->capture_default_str();
  add_integer(app, "--grad-accum", o.grad_accum, "micro-batches per step", 1);
  app.add_flag("--overlap", o.overlap,
               "reduce each gradient bucket (and gather stage 3's blocks) on a communication thread while backward "
               "goes on, on every backend; the run's header says whether it is on");
  app.add_flag("--bitwise", o.bitwise,
               "the same bits as one process at any --world, --zero, --grad-accum and backend: one backward per "
               "window, the windows' gradients summed exactly (docs/BITWISE.md)");
  app.add_flag("--decay-all", o.decay_all,
               "weight decay on every parameter (default: the matrices and embeddings only, as GPT-2)");
  app.add_option("--clip", o.clip, "clip the global gradient norm to this (0: off)")->capture_default_str();
  app.add_option("--timeout", o.timeout,
                 "seconds a rank waits for the others before the run fails naming the late rank (every backend)")
      ->capture_default_str();
  app.add_option("--init", o.init, "start from this checkpoint's weights (fresh optimizer, step 0)");
  app.add_flag_function(
      "--no-memory-check", [&o](std::int64_t) { o.memory_check = false; },
      "start even where the predicted peak per rank exceeds the memory available (running out of it "
      "then ends the run with an error)");
  return flags;
}

void parse_names(train::TrainOptions& o, const RunNames& names) {
  o.backend = train::parse_backend(names.backend);
  o.schedule = optim::parse_lr_schedule(names.schedule);
}

// An evaluation asked for where there is nothing to evaluate.
void check_eval(const train::TrainOptions& o, const RunFlags& flags) {
  if (flags.eval_every->count() > 0 && o.eval_every > 0 && o.val_fraction == 0) {
    throw std::invalid_argument(
        fmt::format("--eval-every {} needs a validation part (--val-fraction is 0)", o.eval_every));
  }
}

// Under mpirun, the world is mpirun's unless --world says otherwise (then
// they must agree).
void adopt_mpirun_world(train::TrainOptions& o, const RunFlags& flags) {
  if (flags.world->count() == 0 && train::resolve_backend(o.backend, o.world) == train::Backend::Mpi) o.world = 0;
}

// With --resume or --init, what the user left unsaid comes from the
// checkpoint: the model's sizes, and for --resume the batch, the seed and
// the validation split (where the checkpoint records it).
void adopt_checkpoint(train::TrainOptions& o, const RunFlags& flags) {
  const std::string path = train::start_checkpoint(o);
  if (path.empty()) return;
  const train::CheckpointInfo info = train::read_checkpoint_info(train::SafetensorsFile::open(path));
  // Each size not given is the checkpoint's; one given that differs is refused by the run.
  const nn::GPTConfig& c = info.config;
  std::size_t nn::GPTConfig::*const sizes[] = {&nn::GPTConfig::n_layer, &nn::GPTConfig::n_head, &nn::GPTConfig::n_embd,
                                               &nn::GPTConfig::block_size};
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    if (flags.model.options[i]->count() == 0) o.model.*sizes[i] = c.*sizes[i];
  }
  o.model.vocab_size = c.vocab_size;
  if (o.resume.empty()) return;
  if (flags.batch->count() == 0) o.batch = info.batch;
  if (flags.seed->count() == 0) o.seed = info.seed;
  if (flags.val_fraction->count() == 0 && info.data) o.val_fraction = info.data->val_fraction;
}

// A command line that is wrong: the message, where to read the flags, and
// exit status 2, as argparse and most Unix tools do.
int usage_error(const std::string& message, const CLI::App& app) {
  std::string command = "tinyllm";
  for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
  fmt::print(stderr, "tinyllm: error: {}\nrun '{} --help' for the flags\n", message, command);
  std::fflush(stderr);
  train::abort_mpi_job(2);
  return 2;
}

}  // namespace tinyllm::app
