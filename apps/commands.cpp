#include "commands.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "printer.h"
#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/stage.h"
#include "tinyllm/distributed/stop.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/metrics.h"
#include "tinyllm/train/verify.h"

namespace tinyllm::app {
namespace {

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

}  // namespace

int run_train(const train::TrainOptions& o) {
  const std::unique_ptr<train::TrainObserver> printer = make_printer(o);
  install_stop_handlers();
  const train::TrainSummary s = train::train(o, *printer);
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

}  // namespace tinyllm::app
