#include "tinyllm/train/trainer.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>

#include "launcher_env.h"
#include "memory_available.h"
#include "save_dir.h"
#include "tinyllm/distributed/exact_sum.h"
#include "tinyllm/distributed/payload.h"
#include "tinyllm/distributed/stop.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/evaluate.h"
#include "tinyllm/train/metrics.h"
#include "train_step.h"

namespace tinyllm::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// --decay-steps, or --steps where it is 0. A run of no steps has no lr to
// schedule: decay over one step keeps the default schedule valid.
std::size_t lr_schedule_decay_steps(const TrainOptions& o) {
  return o.decay_steps != 0 ? o.decay_steps : std::max<std::size_t>(o.steps, 1);
}

void check_batch(std::size_t batch, int world, std::size_t grad_accum) {
  const std::size_t parts = static_cast<std::size_t>(world) * grad_accum;
  if (batch == 0 || batch % parts != 0) {
    throw std::invalid_argument(fmt::format("batch of {} rows does not divide by world size {} × grad-accum {} (= {})",
                                            batch, world, grad_accum, parts));
  }
}

std::string describe(const nn::GPTConfig& c) {
  return fmt::format("--layers {} --heads {} --width {} --seq {} (vocab {})", c.n_layer, c.n_head, c.n_embd,
                     c.block_size, c.vocab_size);
}

std::string describe(const DataFingerprint& d) {
  return fmt::format("{} tokens with FNV-1a {:016x}", d.tokens, d.fnv1a);
}

// A resumed run goes on with docs/DESIGN.md's data order (section 4) on
// the corpus it trained on: another file, or another --val-fraction's cut
// of the same one, would train its remaining steps on other text. Returns
// --allow-other-data's warning, or "".
std::string check_data(const TrainOptions& o, const std::string& path, const CheckpointInfo& info,
                       const Corpus& corpus) {
  const DataFingerprint now = fingerprint(corpus, o.val_fraction);
  if (info.data && info.data->same_tokens(now)) return "";
  const std::string given =
      fmt::format("--data '{}' at --val-fraction {} gives {}", o.data, o.val_fraction, describe(now));
  const std::string problem =
      info.data ? fmt::format("checkpoint '{}' was trained on {} (the training part at --val-fraction {}), but {}",
                              path, describe(*info.data), info.data->val_fraction, given)
                : fmt::format(
                      "checkpoint '{}' holds no fingerprint of the corpus it was trained on (no data_tokens, "
                      "data_fnv1a: an older tinyllm wrote it), so {} cannot be checked against it",
                      path, given);
  if (!o.allow_other_data) {
    throw std::invalid_argument(
        fmt::format("{}; pass {}--allow-other-data to continue on it", problem,
                    info.data ? "--data with the run's corpus (and its --val-fraction), or " : ""));
  }
  return problem + "; continuing on it (--allow-other-data)";
}

// The checkpoint a run starts from, checked against the options. Returns
// check_data's warning.
std::string check_start(const TrainOptions& o, const Corpus& corpus) {
  if (!o.resume.empty() && !o.init.empty()) throw std::invalid_argument("--resume and --init exclude each other");
  const std::string path = start_checkpoint(o);
  if (path.empty()) return "";
  const SafetensorsFile file = SafetensorsFile::open(path);
  const CheckpointInfo info = read_checkpoint_info(file);
  const nn::GPTConfig& c = info.config;
  const nn::GPTConfig& m = o.model;
  if (c.vocab_size != m.vocab_size || c.block_size != m.block_size || c.n_layer != m.n_layer || c.n_head != m.n_head ||
      c.n_embd != m.n_embd) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' holds a model of {}, the run asks for {}", file.path(), describe(c), describe(m)));
  }
  // --init starts a new run, on whatever corpus it is given.
  if (o.resume.empty()) return "";
  if (info.batch != o.batch) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' was trained with --batch {}; resuming with --batch {} would change the data "
                    "order (docs/DESIGN.md section 4 cuts step s at windows s·B)",
                    file.path(), info.batch, o.batch));
  }
  if (info.step > o.steps) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' is at step {}, past --steps {}", file.path(), info.step, o.steps));
  }
  return check_data(o, file.path(), info, corpus);
}

void check_writable_dir(const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  const fs::path probe = fs::path(dir) / fmt::format(".tinyllm-probe-{}", ::getpid());
  if (error || !std::ofstream(probe)) {
    throw std::invalid_argument(fmt::format("--save directory '{}' is not writable{}", dir,
                                            error ? fmt::format(" ({})", error.message()) : ""));
  }
  fs::remove(probe, error);
}

// Everything that can be checked before any rank starts, in the order a
// user fixes them; nothing is written until all passed.
dist::CommOptions comm_options(const TrainOptions& o) {
  return {.timeout = dist::timeout_from_seconds(o.timeout, "--timeout")};
}

// The metrics file is written from the run's start: it must be none of the
// files the run reads (the corpus, the checkpoint it starts from) nor one it
// saves, and never a checkpoint.
void check_metrics_file(const TrainOptions& o) {
  if (o.metrics.empty()) return;
  std::error_code error;
  const auto refuse = [&](const std::string& what) {
    throw std::invalid_argument(fmt::format("--metrics file '{}' is {}: it would be overwritten", o.metrics, what));
  };
  if (fs::equivalent(o.metrics, o.data, error)) refuse(fmt::format("the --data file '{}'", o.data));
  const std::string start = start_checkpoint(o);
  if (!start.empty() && fs::equivalent(o.metrics, start, error))
    refuse(fmt::format("the checkpoint the run starts from ('{}')", start));
  if (fs::path(o.metrics).extension() == ".safetensors") refuse("named as a checkpoint (.safetensors)");
}

// A rate above kMaxRate diverges on the first step; inf and NaN would save
// a checkpoint of NaN parameters.
constexpr double kMaxRate = 1e3;

void check_in(const char* flag, double value, double low, double high, const char* upper) {
  if (!(value >= low && value <= high) || (*upper == ')' && value == high)) {
    throw std::invalid_argument(
        fmt::format("{} must be a number in [{:g}, {:g}{} (got {})", flag, low, high, upper, value));
  }
}

void check_optimizer(const TrainOptions& o) {
  check_in("--lr", o.adamw.lr, 0, kMaxRate, "]");
  if (o.min_lr) check_in("--min-lr", *o.min_lr, 0, kMaxRate, "]");
  check_in("--weight-decay", o.adamw.weight_decay, 0, kMaxRate, "]");
  check_in("--beta1", o.adamw.betas.first, 0, 1, ")");
  check_in("--beta2", o.adamw.betas.second, 0, 1, ")");
  // eps 0 divides 0 by 0 for a parameter whose gradient is 0 so far.
  if (!(o.adamw.eps > 0 && o.adamw.eps <= 1))
    throw std::invalid_argument(fmt::format("--eps must be a number in (0, 1] (got {})", o.adamw.eps));
}

// The schedule's two rules that join flags, in the flags' words (optim::LRSchedule
// states them in its fields' names): a value the user left out is named as
// the default it took.
void check_schedule(const TrainOptions& o) {
  if (o.min_lr && !(*o.min_lr <= o.adamw.lr)) {
    throw std::invalid_argument(fmt::format("--min-lr {} must not be above --lr {}", *o.min_lr, o.adamw.lr));
  }
  // The default warmup, a tenth of the decay, is always below it.
  if (o.schedule != optim::LRScheduleKind::Cosine || !o.warmup_steps) return;
  const std::size_t decay = lr_schedule_decay_steps(o);
  if (*o.warmup_steps < decay) return;
  const std::string decay_flag =
      o.decay_steps != 0 ? fmt::format("--decay-steps {}", o.decay_steps)
      : o.steps != 0     ? fmt::format("the decay steps, which are --steps {} as --decay-steps is not given", o.steps)
                         : "the decay steps, which are 1 for --steps 0 as --decay-steps is not given";
  throw std::invalid_argument(fmt::format("--warmup-steps {} must be below {}", *o.warmup_steps, decay_flag));
}

// mpirun starts this command N times: on any backend but mpi each copy is a
// whole run of its own, N runs interleaving their output in one place. One
// process under mpirun is one run, and harmless. A launcher that does not
// tell its world's size (PMIx alone) is not caught.
void check_launcher(const TrainOptions& o) {
  const Backend backend = resolve_backend(o.backend, o.world);
  const int processes = launcher_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}).value_or(0);
  if (backend == Backend::Mpi || processes <= 1) return;
  // auto picks mpi under mpirun unless tinyllm was built without it.
  if (o.backend == Backend::Auto) {
    throw std::invalid_argument(fmt::format(
        "launched by mpirun with {} processes but this tinyllm was built without MPI (--backend auto is {} here); "
        "run it without mpirun",
        processes, backend_name(backend)));
  }
  throw std::invalid_argument(
      fmt::format("launched by mpirun with {} processes but --backend {}; use --backend mpi (or run without mpirun)",
                  processes, backend_name(backend)));
}

std::string describe(const RankMemory& m) {
  return fmt::format("model state {} + in-step {} + activations {} + base {} + margin {}", memory_size(m.state),
                     memory_size(m.in_step), memory_size(m.activations), memory_size(m.base), memory_size(m.margin));
}

// Rank 0's predicted peak (it holds the largest chunk), for every rank on
// this machine, and what the observer holds beside the ranks, against the
// memory the run may take. Under mpirun the world and this machine's share
// of it come from the launcher (Open MPI's variables, then MPICH's); a
// world it does not tell is left to the run.
void check_fits(const TrainOptions& o, const TrainObserver& observer) {
  const Backend backend = resolve_backend(o.backend, o.world);
  int world = o.world, on_machine = o.world;
  if (backend == Backend::Mpi) {
    if (world == 0) world = launcher_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}).value_or(0);
    on_machine = std::max(1, launcher_number({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}).value_or(1));
  }
  if (world < 1) return;
  const RankMemory m = predict_run_memory(o, world);
  const MemoryBeside beside = observer.memory_beside_ranks(o);
  const MemoryNeed need{
      .run = fmt::format("{} with --zero {} on {} rank{}", describe(o.model), o.zero, world, world == 1 ? "" : "s"),
      .per_rank = m.total(),
      .split = describe(m),
      .unmapped = m.unmapped,
      .ranks_per_machine = on_machine,
      .ranks_per_process = backend == Backend::Threads ? world : 1,
      .once = beside.bytes,
      .once_name = beside.what};
  check_memory(need, available_memory());
}

// Returns the warning the run's start prints, or "".
std::string check_options(const TrainOptions& o, const Corpus& corpus, const TrainObserver& observer) {
  check_flags(o);
  if (corpus.num_windows(o.model.block_size) == 0) {
    throw std::invalid_argument(fmt::format("data file '{}' has {} tokens, too few for one window of {} + 1 tokens",
                                            corpus.name(), corpus.size(), o.model.block_size));
  }
  // The checkpoint before the memory: a checkpoint's bad sizes are named as the checkpoint's.
  const std::string warning = check_start(o, corpus);
  if (o.memory_check) check_fits(o, observer);
  if (!o.save_dir.empty()) check_writable_dir(o.save_dir);
  check_metrics_file(o);
  if (!o.metrics.empty() && !std::ofstream(o.metrics, std::ios::app)) {
    throw std::invalid_argument(fmt::format("--metrics file '{}' cannot be written", o.metrics));
  }
  return warning;
}

// Flushed each step, so that a full disk is reported at the step it fills
// rather than as an empty file after a run that claims success.
void write_metrics(std::ofstream& metrics, const std::string& path, const StepReport& report) {
  metrics << metrics_line(report) << '\n';
  if (report.val_loss) metrics << val_metrics_line(report.step, *report.val_loss) << '\n';
  errno = 0;
  metrics << std::flush;
  if (!metrics) {
    throw std::runtime_error(fmt::format("--metrics file '{}' cannot be written at step {}: {}", path, report.step + 1,
                                         errno != 0 ? std::strerror(errno) : "write failed"));
  }
}

using RankPayload = dist::Payload<RankStats, [](auto& r, auto& io) {
  io(r.rank, r.state.params, r.state.grads, r.state.optimizer, r.peak.params, r.peak.grads, r.peak.optimizer,
     r.peak_rss, r.bytes_sent, r.theory_sent, r.stop_signal);
}>;
// The summary but its ranks, which follow it, and its last checkpoint, which
// the caller names.
using SummaryPayload = dist::Payload<TrainSummary, [](auto& s, auto& io) {
  io(s.first_loss, s.last_loss, s.seconds, s.timed_seconds, s.steps_run, s.end_step, s.num_parameters, s.val_loss,
     s.best_val_loss, s.stop_signal);
}>;

// Rank 0's summary, carried back to the caller: through memory shared with
// the forked ranks under procs. Laid out as the summary, the rank count and
// the ranks.
class SummarySink {
 public:
  SummarySink(bool shared, int world)
      : length_(SummaryPayload::size() + 1 + RankPayload::size() * static_cast<std::size_t>(std::max(world, 1))) {
    if (shared) {
      void* memory = mmap(nullptr, length_ * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (memory == MAP_FAILED) throw std::runtime_error("train: cannot map memory for the summary");
      shared_ = static_cast<double*>(memory);
    } else {
      local_.resize(length_);
    }
  }
  ~SummarySink() {
    if (shared_) munmap(shared_, length_ * sizeof(double));
  }
  SummarySink(const SummarySink&) = delete;
  SummarySink& operator=(const SummarySink&) = delete;

  void store(const TrainSummary& s) {
    std::vector<double> v = SummaryPayload::pack(s);
    v.push_back(static_cast<double>(s.ranks.size()));
    const std::vector<double> ranks = RankPayload::pack(s.ranks);
    v.insert(v.end(), ranks.begin(), ranks.end());
    if (v.size() > length_) {  // mpi: the world is mpirun's, known only now
      local_.resize(v.size());
      length_ = v.size();
    }
    std::copy(v.begin(), v.end(), data());
  }

  TrainSummary load() const {
    const std::span<const double> v(data(), length_);
    const std::size_t head = SummaryPayload::size();
    TrainSummary s = SummaryPayload::unpack(v.first(head))[0];
    s.ranks = RankPayload::unpack(v.subspan(head + 1, static_cast<std::size_t>(v[head]) * RankPayload::size()));
    return s;
  }

 private:
  double* data() { return shared_ ? shared_ : local_.data(); }
  const double* data() const { return shared_ ? shared_ : local_.data(); }

  std::size_t length_;
  double* shared_ = nullptr;
  std::vector<double> local_;
};

// The stop some rank saw (dist::stop_requested), in rank order; 0: none.
int first_stop_signal(const std::vector<RankStats>& ranks) {
  for (const RankStats& q : ranks) {
    if (q.stop_signal != 0) return q.stop_signal;
  }
  return 0;
}

// The validation loss is due after the eval_every-th steps and the last.
bool evaluates(const TrainOptions& o, std::size_t step) {
  return validates(o) && ((step + 1) % o.eval_every == 0 || step + 1 == o.steps);
}

std::size_t num_val_windows(const TrainOptions& o, const Corpus& val) {
  if (!validates(o)) return 0;
  return num_eval_windows(val, o.batch, o.model.block_size, o.eval_batches);
}

// One rank's run: the start, then each step, its evaluation when due, the
// reports and the checkpoints.
// The saving policy: --save-every, the last step, best.safetensors at a new
// best validation loss, and step 0 for a run of no steps. Collective.
class CheckpointSaver {
 public:
  CheckpointSaver(dist::Comm& comm, const Replica& replica, const TrainOptions& o, const Corpus& corpus,
                  TrainObserver& observer)
      : comm_(comm), replica_(replica), o_(o), data_(fingerprint(corpus, o.val_fraction)), observer_(observer) {}

  // A run of no steps saves the weights it would start from (a fresh
  // model's, or --init's), for a peer such as PyTorch to start from too.
  void at_start() {
    if (o_.steps == 0 && !o_.save_dir.empty()) save(checkpoint_path(o_.save_dir, 0), 0);
  }
  // After the step that ends with `steps_taken`; `last` when the run stops there.
  void after_step(std::size_t steps_taken, bool best, bool last) {
    if (o_.save_dir.empty()) return;
    if (best) save((fs::path(o_.save_dir) / kBestCheckpoint).string(), steps_taken);
    if (last || (o_.save_every > 0 && steps_taken % o_.save_every == 0)) {
      save(checkpoint_path(o_.save_dir, steps_taken), steps_taken);
    }
  }

 private:
  void save(const std::string& path, std::size_t steps_taken) {
    set_phase("saving a checkpoint", steps_taken);
    try {
      save_checkpoint(path, comm_, replica_,
                      {.config = o_.model,
                       .step = steps_taken,
                       .batch = o_.batch,
                       .seed = o_.seed,
                       .world = comm_.size(),
                       .zero = o_.zero,
                       .data = data_},
                      o_.shared_files);
    } catch (const NonFiniteCheckpoint& e) {
      throw NonFiniteCheckpoint(fmt::format("{}; {}", e.what(),
                                            last_saved_.empty()
                                                ? "this run wrote no checkpoint before"
                                                : fmt::format("the last written is '{}'", last_saved_)));
    }
    last_saved_ = path;
    if (comm_.rank() == 0) observer_.on_checkpoint(path, steps_taken);
  }

  dist::Comm& comm_;
  const Replica& replica_;
  const TrainOptions& o_;
  const DataFingerprint data_;
  TrainObserver& observer_;
  std::string last_saved_;
};

// One step's report, with every rank's figures gathered (collective).
StepReport report_step(dist::Comm& comm, const Replica& replica, const TrainOptions& o, std::size_t step,
                       const StepResult& result, double seconds, std::uint64_t sent_before) {
  const int p = comm.size(), r = comm.rank();
  const RankStats mine{.rank = r,
                       .state = replica.memory_bytes(),
                       .peak = result.peak,
                       .peak_rss = peak_rss_bytes(),
                       .bytes_sent = comm.total_traffic().bytes_sent - sent_before,
                       .theory_sent = theory_bytes_sent(o.zero, o.model, p, r, o.grad_accum,
                                                        o.bitwise ? o.batch / static_cast<std::size_t>(p) : 0),
                       .stop_signal = dist::stop_requested()};
  return {.step = step,
          .lr = result.lr,
          .loss = result.loss,
          .grad_norm = o.clip > 0 ? std::optional(result.grad_norm) : std::nullopt,
          .seconds = seconds,
          .tokens_per_second = static_cast<double>(o.batch * o.model.block_size) / seconds,
          .ranks = RankPayload::all_gather(comm, mine),
          .val_loss = std::nullopt};
}

// The summary after one more step; whether its validation loss is a new best.
bool add_to_summary(TrainSummary& summary, const StepReport& report) {
  summary.end_step = report.step + 1;
  if (summary.steps_run++ == 0) {
    summary.first_loss = report.loss;
  } else {
    summary.timed_seconds += report.seconds;
  }
  summary.last_loss = report.loss;
  summary.ranks = report.ranks;
  const bool best = report.val_loss && (!summary.best_val_loss || *report.val_loss < *summary.best_val_loss);
  if (report.val_loss) summary.val_loss = report.val_loss;
  if (best) summary.best_val_loss = report.val_loss;
  // Every rank sees the same gathered signals, so all stop after this step.
  summary.stop_signal = first_stop_signal(report.ranks);
  return best;
}

void run_rank(dist::Comm& comm, const TrainOptions& o, const Corpus& corpus, const Corpus& val,
              const std::string& warning, TrainObserver& observer, SummarySink& sink) {
  const int p = comm.size(), r = comm.rank();
  check_batch(o.batch, p, o.grad_accum);  // under mpi, the world is known only now
  set_phase("building the model");
  const RunStart start = start_run(o, comm, o.zero);
  Replica& replica = *start.replica;

  const optim::LRSchedule schedule = lr_schedule(o);
  std::ofstream metrics;
  if (r == 0) {
    observer.on_start({.backend = resolve_backend(o.backend, p),
                       .world = p,
                       .start_step = start.step,
                       .num_parameters = replica.num_parameters(),
                       .num_windows = corpus.num_windows(o.model.block_size),
                       .num_val_windows = num_val_windows(o, val),
                       .overlap = replica.overlapping(),
                       .corpus = corpus.name(),
                       .val_corpus = val.name(),
                       .warning = warning});
    // A resumed run goes on with the history it resumes, as nanoGPT's and llm.c's logs do.
    if (!o.metrics.empty()) metrics.open(o.metrics, o.resume.empty() ? std::ios::trunc : std::ios::app);
  }
  CheckpointSaver saver(comm, replica, o, corpus, observer);
  TrainSummary summary;
  summary.num_parameters = replica.num_parameters();
  summary.end_step = start.step;
  saver.at_start();
  const auto run_start = Clock::now();
  for (std::size_t step = start.step; step < o.steps; ++step) {
    const auto step_start = Clock::now();
    const std::uint64_t sent_before = comm.total_traffic().bytes_sent;
    const StepResult result = train_step(comm, replica, corpus, o, schedule, step);
    StepReport report = report_step(comm, replica, o, step, result, since(step_start), sent_before);
    observer.after_step(comm, replica, step, result.loss);
    if (evaluates(o, step)) {
      set_phase("validation", step + 1);
      report.val_loss = evaluate(comm, replica, val, o.batch, o.model.block_size, o.eval_batches);
    }
    const bool best = add_to_summary(summary, report);
    if (r == 0) {
      observer.on_step(report);
      if (metrics.is_open()) write_metrics(metrics, o.metrics, report);
    }
    saver.after_step(step + 1, best, step + 1 == o.steps || summary.stop_signal != 0);
    if (summary.stop_signal != 0) break;
  }
  summary.seconds = since(run_start);
  if (r == 0) {
    observer.on_end(summary);
    sink.store(summary);
  }
}

// A rank that ran out of memory: what it could not allocate, where, and the
// prediction the memory check made (or that it was off).
std::string out_of_memory_message(const TrainOptions& o, int world, const std::bad_alloc& e) {
  const RankMemory m = predict_run_memory(o, world);
  const std::string what = dynamic_cast<const OutOfMemory*>(&e) ? e.what() : "out of memory";
  return fmt::format("{} (during {}); the memory check {} up to {} per rank ({}); left now: {}", what, current_phase(),
                     o.memory_check ? "predicted" : "was off (--no-memory-check); it would have predicted",
                     memory_size(m.total()), describe(m), describe_limits(available_memory()));
}

class CallbackObserver final : public TrainObserver {
 public:
  explicit CallbackObserver(const std::function<void(const StepReport&)>& on_step) : on_step_(on_step) {}
  void on_step(const StepReport& report) override {
    if (on_step_) on_step_(report);
  }

 private:
  const std::function<void(const StepReport&)>& on_step_;
};

}  // namespace

bool validates(const TrainOptions& o) { return o.val_fraction > 0 && o.eval_every > 0; }

RankMemory predict_run_memory(const TrainOptions& o, int world) {
  return predict_rank_memory(o.zero, o.model, world, 0, o.batch, o.grad_accum, o.overlap, o.bitwise, validates(o));
}

void check_flags(const TrainOptions& o) {
  check_launcher(o);
  check_optimizer(o);
  if (o.schedule == optim::LRScheduleKind::Constant) {
    // The cosine's own settings would be silently ignored.
    for (const auto& [given, flag] :
         {std::pair(o.warmup_steps.has_value(), "--warmup-steps"), std::pair(o.decay_steps != 0, "--decay-steps"),
          std::pair(o.min_lr.has_value(), "--min-lr")}) {
      if (given) throw std::invalid_argument(fmt::format("{} applies to --schedule cosine, not constant", flag));
    }
  }
  o.model.check();
  optim::AdamW::factory(o.adamw);
  check_schedule(o);
  lr_schedule(o);
  if (o.zero < 0 || o.zero > 3)
    throw std::invalid_argument(fmt::format("--zero must be 0, 1, 2 or 3 (got {})", o.zero));
  if (o.grad_accum == 0) throw std::invalid_argument("--grad-accum must be at least 1 (got 0)");
  if (!(o.clip >= 0) || !std::isfinite(o.clip)) {
    throw std::invalid_argument(fmt::format("--clip must be a finite norm >= 0 (got {})", o.clip));
  }
  dist::timeout_from_seconds(o.timeout, "--timeout");
  if (o.world != 0) check_batch(o.batch, o.world, o.grad_accum);
  if (o.bitwise && o.batch > dist::ExactSum::kMaxTerms) {
    throw std::invalid_argument(fmt::format("--bitwise sums at most {} windows exactly per step (got --batch {})",
                                            dist::ExactSum::kMaxTerms, o.batch));
  }
  if (o.save_every > 0 && o.save_dir.empty()) throw std::invalid_argument("--save-every needs --save DIR");
}

optim::LRSchedule lr_schedule(const TrainOptions& options) {
  const std::size_t decay_steps = lr_schedule_decay_steps(options);
  return optim::LRSchedule(options.adamw.lr,
                           {.kind = options.schedule,
                            .warmup_steps = options.warmup_steps.value_or(decay_steps / kDefaultWarmupDivisor),
                            .decay_steps = decay_steps,
                            .min_lr = options.min_lr.value_or(options.adamw.lr / 10)});
}

std::string start_checkpoint(const TrainOptions& options) {
  if (!options.resume.empty()) return find_checkpoint(options.resume, "--resume");
  return options.init.empty() ? "" : find_checkpoint(options.init, "--init");
}

std::pair<Corpus, Corpus> load_corpora(const TrainOptions& options) {
  return Corpus::load(options.data).split(options.val_fraction, options.model.block_size);
}

TrainSummary train(const TrainOptions& options, TrainObserver& observer) {
  const auto [corpus, val] = load_corpora(options);
  const std::string warning = check_options(options, corpus, observer);
  const Backend backend = resolve_backend(options.backend, options.world);
  const SaveDir save_dir(options, backend);  // held until every rank is done
  SummarySink sink(backend == Backend::Procs, options.world);
  launch(
      backend, options.world,
      [&](dist::Comm& comm) {
        try {
          run_rank(comm, options, corpus, val, warning, observer, sink);
        } catch (const std::bad_alloc& e) {
          // threads and procs name the failing rank themselves; under mpirun each rank speaks for itself.
          const std::string rank = backend == Backend::Mpi ? fmt::format("rank {}: ", comm.rank()) : "";
          throw std::runtime_error(rank + out_of_memory_message(options, comm.size(), e));
        }
      },
      comm_options(options));
  TrainSummary summary = sink.load();
  if (!options.save_dir.empty() && (summary.steps_run > 0 || options.steps == 0))
    summary.last_checkpoint = checkpoint_path(options.save_dir, summary.end_step);
  return summary;
}

TrainSummary train(const TrainOptions& options, const std::function<void(const StepReport&)>& on_step) {
  CallbackObserver observer(on_step);
  return train(options, observer);
}

}  // namespace tinyllm::train
