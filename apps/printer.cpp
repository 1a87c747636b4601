#include "printer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "tinyllm/distributed/stage.h"
#include "tinyllm/tensor/parallel.h"
#include "tinyllm/train/metrics.h"

namespace tinyllm::app {
namespace {

std::string mib(std::size_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

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

}  // namespace

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

std::unique_ptr<train::TrainObserver> make_printer(const train::TrainOptions& o) {
  return std::make_unique<Printer>(o);
}

}  // namespace tinyllm::app
