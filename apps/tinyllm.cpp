// The tinyllm command: train, verify (P ranks against one process), memory
// (the per-rank byte table), diff (two checkpoints compared) and sample
// (text from a checkpoint). The only place that catches, prints and exits.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/stage.h"
#include "tinyllm/distributed/stop.h"
#include "tinyllm/tensor/parallel.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/metrics.h"
#include "tinyllm/train/trainer.h"
#include "tinyllm/train/verify.h"

namespace {

using namespace tinyllm;

std::string mib(std::size_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// Flushes what was printed; a write that failed (a full disk, a closed
// pipe) ends the command with an error rather than exit status 0.
void flush_stdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    const int error = errno;
    std::clearerr(stdout);
    throw std::runtime_error(
        fmt::format("standard output cannot be written: {}", error != 0 ? std::strerror(error) : "write failed"));
  }
}

template <typename T>
constexpr std::uint64_t kMaxOf = static_cast<std::uint64_t>(std::numeric_limits<T>::max());

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
                         const std::string& help) {
  const auto set = [&value, flag](const std::string& text) {
    value = parse_integer(flag, text, 0, kMaxOf<std::size_t>, true);
  };
  return app.add_option_function<std::string>(flag, set, help)->type_name("INT");
}

struct ModelFlags {
  std::vector<CLI::Option*> options;  // --layers --heads --width --seq
};

ModelFlags add_model(CLI::App& app, nn::GPTConfig& m) {
  return {{
      add_integer(app, "--layers", m.n_layer, "transformer blocks (L)", 1),
      add_integer(app, "--heads", m.n_head, "attention heads (H)", 1),
      add_integer(app, "--width", m.n_embd, "embedding width (C)", 1),
      add_integer(app, "--seq", m.block_size, "context length (T)", 1),
  }};
}

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

// The update's settings: "lr 0.001 cosine (warmup 25 steps, down to 0.0001
// at step 500), clip 1".
std::string describe_update(const train::TrainOptions& o) {
  const optim::LRSchedule schedule = train::lr_schedule(o);
  const optim::LRScheduleOptions& s = schedule.options();
  const std::string lr = s.kind == optim::LRScheduleKind::Constant
                             ? fmt::format("lr {:g} constant", schedule.lr())
                             : fmt::format("lr {:g} cosine (warmup {} step{}, down to {:g} at step {})", schedule.lr(),
                                           s.warmup_steps, s.warmup_steps == 1 ? "" : "s", s.min_lr, s.decay_steps);
  return fmt::format("{}, {}{}", lr, o.clip > 0 ? fmt::format("clip {:g}", o.clip) : "no clipping",
                     o.bitwise ? ", bitwise" : "");
}

// "overlap on" or "overlap off", with the reason where --overlap asked for
// it: DDP on one rank has no collectives, and an MPI below
// MPI_THREAD_SERIALIZED allows no second thread to call it.
std::string describe_overlap(const train::TrainOptions& o, const train::RunInfo& info) {
  if (info.overlap) return "overlap on";
  if (!o.overlap) return "overlap off";
  if (o.zero == 0 && info.world == 1 && !o.bitwise)
    return "overlap off (--overlap: DDP on one rank has no collectives)";
  return "overlap off (--overlap: this MPI gives no MPI_THREAD_SERIALIZED)";
}

// Prints on rank 0: a live line on a terminal, plain lines when piped.
class Printer final : public train::TrainObserver {
 public:
  explicit Printer(const train::TrainOptions& o) : options_(o) {}

  void on_start(const train::RunInfo& info) override {
    if (!info.warning.empty()) fmt::print(stderr, "tinyllm: warning: {}\n", info.warning);
    // mpirun hands its ranks a terminal of its own even when its output goes to a file.
    live_ = isatty(STDOUT_FILENO) != 0 && info.backend != train::Backend::Mpi;
    fmt::print("tinyllm train: L={} H={} C={} T={}, {} parameters, on {} ({} windows), batch {}, steps {}..{}\n",
               options_.model.n_layer, options_.model.n_head, options_.model.n_embd, options_.model.block_size,
               info.num_parameters, info.corpus, info.num_windows, options_.batch, info.start_step + 1, options_.steps);
    fmt::print("{} on {} rank{} ({}), {}{}, {}\n", dist::mode_name(options_.zero), info.world,
               info.world == 1 ? "" : "s", train::backend_name(info.backend), describe_overlap(options_, info),
               options_.grad_accum > 1 ? fmt::format(", {} micro-batches per step", options_.grad_accum) : "",
               describe_update(options_));
    if (info.num_val_windows > 0) {
      fmt::print("validation: {} windows of {}, every {} steps and at the end\n", info.num_val_windows, info.val_corpus,
                 options_.eval_every);
    }
    flush_stdout();
    start_ = info.start_step;
    world_ = info.world;
  }

  void on_step(const train::StepReport& r) override {
    seconds_ += r.seconds;
    const double done = static_cast<double>(r.step + 1 - start_);
    const double eta = seconds_ / done * static_cast<double>(options_.steps - r.step - 1);
    std::string line = fmt::format("step {:>5}/{}  loss {:.4f}  lr {:.3e}  {:>8.0f} tokens/s", r.step + 1,
                                   options_.steps, r.loss, r.lr, r.tokens_per_second);
    if (r.val_loss) line += fmt::format("  val {:.4f}", *r.val_loss);
    if (live_ && r.val_loss) {
      fmt::print("\r{}\033[K\n", line);  // kept on screen
    } else if (live_) {
      fmt::print("\r{}  ETA {:.0f} s\033[K", line, eta);
    } else {
      fmt::print("{}\n", line);
    }
    flush_stdout();
  }

  void on_checkpoint(const std::string& path, std::size_t step) override {
    if (live_) fmt::print("\n");
    fmt::print("saved step {} to {}\n", step, path);
    flush_stdout();
  }

  void on_end(const train::TrainSummary& s) override {
    if (live_) fmt::print("\n");
    if (s.steps_run == 0) {
      fmt::print("done: {} parameters, no steps\n", s.num_parameters);
      return;
    }
    fmt::print("done: {} parameters, loss {:.4f} -> {:.4f} in {:.1f} s ({} steps)\n", s.num_parameters, s.first_loss,
               s.last_loss, s.seconds, s.steps_run);
    print_throughput(s);
    if (s.val_loss) fmt::print("validation loss {:.4f} (the lowest {:.4f})\n", *s.val_loss, *s.best_val_loss);
    fmt::print(
        "per rank: model state after a step (memory_bytes) | its peak within a step | peak RSS | sent per step\n");
    for (const train::RankStats& q : s.ranks) {
      fmt::print("  rank {}: params {} + grads {} + optimizer {} = {} | peak {} | RSS {} | sent {} (theory {})\n",
                 q.rank, mib(q.state.params), mib(q.state.grads), mib(q.state.optimizer), mib(q.state.total()),
                 mib(q.peak.total()), mib(q.peak_rss), mib(q.bytes_sent), mib(q.theory_sent));
    }
    flush_stdout();
  }

 private:
  // tokens/s over the steps after the first (all of them for a run of one),
  // and the model FLOP utilisation as llm.c and nanoGPT report it: the
  // FLOPs those tokens took over the dgemm peak of the cores the ranks use
  // on this machine (one rank's BLAS threads times the ranks, at most its
  // cores).
  void print_throughput(const train::TrainSummary& s) const {
    const bool warm = s.steps_run > 1;
    const double seconds = warm ? s.timed_seconds : s.seconds;
    const auto tokens = static_cast<double>((warm ? s.steps_run - 1 : 1) * options_.batch * options_.model.block_size);
    const double tokens_per_second = tokens / seconds;
    const double gflops = options_.model.flops_per_token() * tokens_per_second * 1e-9;
    const unsigned machine = std::max(1u, std::thread::hardware_concurrency());
    const auto cores = std::min<unsigned>(machine, static_cast<unsigned>(world_ * tinyllm::get_num_threads()));
    const double peak = tinyllm::dgemm_peak_gflops();
    fmt::print(
        "throughput: {:.0f} tokens/s{} x {:.2f} MFLOP/token = {:.2f} GFLOP/s, MFU {:.1f}% of {} core{} x {:.1f} "
        "GFLOP/s (dgemm)\n",
        tokens_per_second, warm ? " after the first step" : "", options_.model.flops_per_token() * 1e-6, gflops,
        100 * gflops / (cores * peak), cores, cores == 1 ? "" : "s", peak);
  }

  const train::TrainOptions& options_;
  bool live_ = false;
  std::size_t start_ = 0;
  int world_ = 1;
  double seconds_ = 0;
};

// The first SIGINT or SIGTERM asks the run to stop after its current step
// (distributed/stop.h), which saves that step under --save; a second one to the
// process the user started exits at once, and forked ranks die with it.
pid_t main_pid = 0;

void on_stop_signal(int signal) {
  if (dist::stop_requested() != 0 && getpid() == main_pid) _exit(128 + signal);
  dist::request_stop(signal);
}

void install_stop_handlers() {
  main_pid = getpid();
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM}) sigaction(signal, &action, nullptr);
}

int run_train(const train::TrainOptions& o) {
  Printer printer(o);
  install_stop_handlers();
  const train::TrainSummary s = train::train(o, printer);
  if (s.stop_signal == 0) return 0;
  fmt::print(stderr, "tinyllm: stopped by signal {} ({}) after step {}{}\n", s.stop_signal, strsignal(s.stop_signal),
             s.end_step, s.last_checkpoint.empty() ? "" : ", saved to " + s.last_checkpoint);
  return 128 + s.stop_signal;
}

int run_verify(const train::TrainOptions& o) {
  // The callback runs on rank 0, which may be a forked process: it prints
  // the verdict itself, after the last step (a failure throws after it).
  double worst = 0;
  bool within = true, same_bits = true;
  const auto on_start = [&](const train::RunInfo& info) {
    fmt::print(
        "tinyllm verify: {} on {} ranks ({}) against one process, {}, "
        "L={} H={} C={} T={}, batch {}{}, {}, {} steps\n",
        dist::mode_name(o.zero), info.world, train::backend_name(info.backend), describe_overlap(o, info),
        o.model.n_layer, o.model.n_head, o.model.n_embd, o.model.block_size, o.batch,
        o.grad_accum > 1 ? fmt::format(", grad-accum {}", o.grad_accum) : "", describe_update(o), o.steps);
    fmt::print("{:>5}  {:>10}  {:>9}  {:>9}  {:>9}  {:>10}  {}\n", "step", "loss", "|Δloss|", "|Δparam|", "|Δexp_avg|",
               "|Δexp_avg_sq|", "ranks bit-identical");
  };
  train::verify(o, on_start, [&](const train::VerifyStep& v) {
    worst = std::max(worst, v.worst());
    // False for a NaN, which std::max drops.
    within = within && (o.bitwise ? v.one_process_bits : v.worst() <= train::kVerifyTolerance);
    same_bits = same_bits && v.same_bits;
    fmt::print("{:>5}  {:>10.6f}  {:>9.2e}  {:>9.2e}  {:>9.2e}  {:>10.2e}  {}\n", v.step + 1, v.loss, v.loss_diff,
               v.params_diff, v.exp_avg_diff, v.exp_avg_sq_diff, v.same_bits ? "yes" : "NO");
    if (v.step + 1 == o.steps && within && same_bits && o.bitwise) {
      fmt::print(
          "verify --bitwise passed: every step's loss, parameters and AdamW state equal one process's bit for bit, "
          "on every rank\n");
    } else if (v.step + 1 == o.steps && within && same_bits) {
      fmt::print(
          "verify passed: every step within {:.0e} of one process (largest difference {:.2e}), the same bits "
          "on every rank\n",
          train::kVerifyTolerance, worst);
    }
    flush_stdout();
  });
  return 0;
}

int run_memory(const nn::GPTConfig& config, int world) {
  config.check();
  if (world < 1) throw std::invalid_argument(fmt::format("--world must be at least 1 (got {})", world));
  const std::size_t n = config.num_parameters();
  fmt::print("tinyllm memory: L={} H={} C={} T={} V={}: n = {} parameters, float64, AdamW, {} rank{}\n", config.n_layer,
             config.n_head, config.n_embd, config.block_size, config.vocab_size, n, world, world == 1 ? "" : "s");
  fmt::print("model state per rank after a step, in bytes (as memory_bytes() reports), and its peak within a step\n");
  fmt::print("{:<7} {:<9} {:>14} {:>14} {:>14} {:>14} {:>12} {:>14}\n", "mode", "ranks", "parameters", "gradients",
             "optimizer", "total", "total MiB", "peak");
  for (int zero = 0; zero <= 3; ++zero) {
    // Ranks whose chunks have the same length hold the same bytes: the first
    // n mod P hold one value more than the rest (dist::chunk_bounds).
    const auto world_ranks = static_cast<std::size_t>(world), longer = n % world_ranks;
    for (const auto& [first, end] : {std::pair<std::size_t, std::size_t>{0, longer}, {longer, world_ranks}}) {
      if (first == end) continue;
      const int r = static_cast<int>(first);
      const dist::MemoryBytes m = train::state_bytes(zero, n, world, r);
      const dist::MemoryBytes peak = train::peak_bytes(zero, config, world, r);
      const std::string ranks = end - first == 1 ? std::to_string(first) : fmt::format("{}-{}", first, end - 1);
      fmt::print("{:<7} {:<9} {:>14} {:>14} {:>14} {:>14} {:>12.2f} {:>14}\n", dist::mode_name(zero), ranks, m.params,
                 m.grads, m.optimizer, m.total(), static_cast<double>(m.total()) / (1 << 20), peak.total());
    }
  }
  flush_stdout();
  return 0;
}

int run_diff(const std::string& a, const std::string& b, double tolerance) {
  const train::SafetensorsFile x = train::SafetensorsFile::open(train::find_checkpoint(a));
  const train::SafetensorsFile y = train::SafetensorsFile::open(train::find_checkpoint(b));
  const auto worst = train::checkpoint_diff(x, y);
  fmt::print("{} vs {}: largest |difference| parameters {:.3e}, exp_avg {:.3e}, exp_avg_sq {:.3e}\n", x.path(),
             y.path(), worst[0], worst[1], worst[2]);
  const auto above = std::find_if(worst.begin(), worst.end(), [&](double d) { return !(d <= tolerance); });
  if (above != worst.end()) {
    throw std::runtime_error(fmt::format("the checkpoints differ by {:.3e}, above {:.0e}", *above, tolerance));
  }
  fmt::print("equal within {:.0e}\n", tolerance);
  flush_stdout();
  return 0;
}

struct SampleOptions {
  std::string checkpoint;
  std::string prompt = "\n";  // nanoGPT's sample.py starts from a newline too
  std::size_t samples = 1;
  std::uint64_t seed = 1337;
  nn::GenerateOptions generate{.max_new_tokens = 200, .top_k = 200};
};

// The prompt's bytes as token ids, checked against the model's vocabulary.
std::vector<int> prompt_tokens(const std::string& prompt, std::size_t vocab_size) {
  if (prompt.empty()) throw std::invalid_argument("--prompt must hold at least one byte (got an empty prompt)");
  std::vector<int> idx(prompt.begin(), prompt.end());
  for (int& t : idx) {
    t = static_cast<unsigned char>(t);
    if (static_cast<std::size_t>(t) >= vocab_size) {
      throw std::invalid_argument(
          fmt::format("--prompt byte {} is outside the model's vocabulary of {} tokens", t, vocab_size));
    }
  }
  return idx;
}

// Each sample is the prompt and its continuation, printed as bytes on
// stdout with a separator line between samples; what it did goes to stderr,
// so stdout holds only the text.
int run_sample(const SampleOptions& o) {
  o.generate.check();
  const train::SafetensorsFile file = train::SafetensorsFile::open(train::find_checkpoint(o.checkpoint));
  const train::CheckpointInfo info = train::read_checkpoint_info(file);
  const nn::GPTConfig& c = info.config;
  if (c.vocab_size > 256) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' has a vocabulary of {} tokens, more than the 256 bytes sample prints", file.path(),
                    c.vocab_size));
  }
  const std::unique_ptr<nn::GPT> model = train::load_gpt(file);
  std::vector<int> idx = prompt_tokens(o.prompt, c.vocab_size);
  fmt::print(stderr, "tinyllm sample: {} (step {}, L={} H={} C={} T={}), {} new tokens, temperature {}, top-k {}\n",
             file.path(), info.step, c.n_layer, c.n_head, c.n_embd, c.block_size, o.generate.max_new_tokens,
             o.generate.temperature, std::min(o.generate.top_k, c.vocab_size));
  if (idx.size() > c.block_size) {
    fmt::print(stderr,
               "tinyllm sample: the prompt's {} bytes exceed the model's context: it continues from the last {}\n",
               idx.size(), c.block_size);
    idx.erase(idx.begin(), idx.end() - static_cast<std::ptrdiff_t>(c.block_size));
  }
  Generator gen(o.seed);
  for (std::size_t s = 0; s < o.samples; ++s) {
    if (s > 0) fmt::print("---------------\n");
    fmt::print("{}", o.prompt);
    // Each byte as it is drawn: a long sample shows as it goes, and Ctrl-C keeps what was printed.
    model->generate(idx, o.generate, gen, [](int token) {
      std::fputc(token, stdout);
      flush_stdout();
    });
    fmt::print("\n");
  }
  flush_stdout();
  return 0;
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tinyllm: exact data-parallel and ZeRO training of small GPTs"};
  app.require_subcommand(1);

  train::TrainOptions train_options;
  RunNames train_names;
  CLI::App* train = app.add_subcommand("train", "train the GPT on a byte corpus, on one or more ranks");
  const RunFlags train_flags = add_run(*train, train_options, train_names);
  train->add_option("--metrics", train_options.metrics, "write one JSON object per step to this file");
  train->add_option("--save", train_options.save_dir,
                    "write checkpoints to this directory (at the end, and see --save-every)");
  add_integer(*train, "--save-every", train_options.save_every, "also write a checkpoint every this many steps");
  train->add_flag("--overwrite", train_options.overwrite,
                  "save into a --save directory that holds checkpoints of another run, replacing them");
  train->add_option("--resume", train_options.resume, "continue from this checkpoint (or the latest in a directory)");
  train->add_flag("--allow-other-data", train_options.allow_other_data,
                  "resume even where --data (at --val-fraction) is not the corpus the checkpoint was trained on");

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

  std::string diff_a, diff_b;
  double diff_tolerance = train::kVerifyTolerance;
  CLI::App* diff =
      app.add_subcommand("diff", "the largest difference between two checkpoints; exit 1 above the tolerance");
  diff->add_option("a", diff_a, "checkpoint (or directory: its latest)")->required();
  diff->add_option("b", diff_b, "checkpoint (or directory: its latest)")->required();
  diff->add_option("--tolerance", diff_tolerance, "largest difference allowed")->capture_default_str();

  SampleOptions sample_options;
  CLI::App* sample = app.add_subcommand("sample", "text from a checkpoint: the prompt and its continuation");
  sample->add_option("checkpoint", sample_options.checkpoint, "checkpoint (or directory: its latest)")->required();
  sample->add_option("--prompt", sample_options.prompt, "text to continue (default: a newline)");
  add_integer(*sample, "--tokens", sample_options.generate.max_new_tokens, "new tokens (bytes) per sample");
  sample->add_option("--temperature", sample_options.generate.temperature, "divides the logits; > 0")
      ->capture_default_str();
  add_integer(*sample, "--top-k", sample_options.generate.top_k, "draw among the K most likely (1: greedy)");
  add_integer(*sample, "--samples", sample_options.samples, "samples, one after another from one generator");
  add_integer(*sample, "--seed", sample_options.seed, "sampling seed: the same seed gives the same bytes");

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
    if (diff->parsed()) return run_diff(diff_a, diff_b, diff_tolerance);
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
