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
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>

#include "memory_available.h"
#include "save_dir.h"
#include "tinyllm/dist/stop.h"
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

// The checkpoint a run starts from, checked against the options.
std::optional<CheckpointInfo> check_start(const TrainOptions& o) {
  if (!o.resume.empty() && !o.init.empty()) throw std::invalid_argument("--resume and --init exclude each other");
  const std::string& given = o.resume.empty() ? o.init : o.resume;
  if (given.empty()) return std::nullopt;
  const SafetensorsFile file = SafetensorsFile::open(find_checkpoint(given));
  const CheckpointInfo info = read_checkpoint_info(file);
  const nn::GPTConfig& c = info.config;
  const nn::GPTConfig& m = o.model;
  if (c.vocab_size != m.vocab_size || c.block_size != m.block_size || c.n_layer != m.n_layer || c.n_head != m.n_head ||
      c.n_embd != m.n_embd) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' holds a model of {}, the run asks for {}", file.path(), describe(c), describe(m)));
  }
  if (!o.resume.empty() && info.batch != o.batch) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' was trained with --batch {}; resuming with --batch {} would change the data "
                    "order (docs/DESIGN.md section 4 cuts step s at windows s·B)",
                    file.path(), info.batch, o.batch));
  }
  if (!o.resume.empty() && info.step > o.steps) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' is at step {}, past --steps {}", file.path(), info.step, o.steps));
  }
  return info;
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
// --timeout's range in seconds: a millisecond, up to dist::kMaxTimeout.
constexpr double kMinTimeout = 0.001;
constexpr double kMaxTimeout = 1e9;
static_assert(std::chrono::milliseconds(std::chrono::seconds(static_cast<long>(kMaxTimeout))) == dist::kMaxTimeout);

dist::CommOptions comm_options(const TrainOptions& o) {
  return {.timeout = std::chrono::milliseconds(std::llround(o.timeout * 1000))};
}

// The metrics file is truncated at the start: naming the corpus would erase it.
void check_metrics_is_not_data(const std::string& metrics, const std::string& data) {
  std::error_code error;
  if (!metrics.empty() && fs::equivalent(metrics, data, error)) {
    throw std::invalid_argument(fmt::format("--metrics file '{}' is the --data file '{}'", metrics, data));
  }
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
  check_in("--eps", o.adamw.eps, 0, 1, "]");
}

// The first of the launcher's variables that is set, as a count; 0: none.
int launcher_count(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

// The model state's peak on rank 0 (the largest chunk), for every rank on
// this machine, against the memory it may take. Under mpirun the world and
// this machine's share of it come from the launcher (Open MPI's variables,
// then MPICH's); a world it does not tell is left to the run.
void check_fits(const TrainOptions& o) {
  const Backend backend = resolve_backend(o.backend, o.world);
  int world = o.world, on_machine = o.world;
  if (backend == Backend::Mpi) {
    if (world == 0) world = launcher_count({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
    on_machine = std::max(1, launcher_count({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}));
  }
  if (world < 1) return;
  MemoryNeed need{
      .run = fmt::format("{} with --zero {} on {} rank{}", describe(o.model), o.zero, world, world == 1 ? "" : "s"),
      .per_rank = state_bytes(o.zero, o.model.num_parameters(), world, 0).total(),
      .ranks_per_machine = on_machine,
      .ranks_per_process = backend == Backend::Threads ? world : 1};
  const std::vector<MemoryLimit> limits = available_memory();
  // The state after a step first: it is counted at once, and when it fits,
  // the model is small enough for the peak's bucket plan to be quick.
  check_memory(need, limits);
  need.per_rank = peak_bytes(o.zero, o.model, world, 0, o.grad_accum, o.overlap).total();
  check_memory(need, limits);
}

void check_options(const TrainOptions& o, const Corpus& corpus) {
  check_optimizer(o);
  o.model.check();
  optim::AdamW::factory(o.adamw);
  lr_schedule(o);
  if (o.zero < 0 || o.zero > 3)
    throw std::invalid_argument(fmt::format("--zero must be 0, 1, 2 or 3 (got {})", o.zero));
  if (o.grad_accum == 0) throw std::invalid_argument("--grad-accum must be at least 1 (got 0)");
  if (!(o.clip >= 0) || !std::isfinite(o.clip)) {
    throw std::invalid_argument(fmt::format("--clip must be a finite norm >= 0 (got {})", o.clip));
  }
  if (!(o.timeout >= kMinTimeout && o.timeout <= kMaxTimeout)) {
    throw std::invalid_argument(fmt::format("--timeout must be a number of seconds from {} to {:g} (got {})",
                                            kMinTimeout, kMaxTimeout, o.timeout));
  }
  if (corpus.num_windows(o.model.block_size) == 0) {
    throw std::invalid_argument(fmt::format("data file '{}' has {} tokens, too few for one window of {} + 1 tokens",
                                            corpus.name(), corpus.size(), o.model.block_size));
  }
  if (o.world != 0) check_batch(o.batch, o.world, o.grad_accum);
  if (o.save_every > 0 && o.save_dir.empty()) throw std::invalid_argument("--save-every needs --save DIR");
  check_start(o);  // before the memory: a checkpoint's bad sizes are named as the checkpoint's
  check_fits(o);
  if (!o.save_dir.empty()) check_writable_dir(o.save_dir);
  check_metrics_is_not_data(o.metrics, o.data);
  if (!o.metrics.empty() && !std::ofstream(o.metrics, std::ios::app)) {
    throw std::invalid_argument(fmt::format("--metrics file '{}' cannot be written", o.metrics));
  }
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

// Rank 0's summary, carried back to the caller: through memory shared with
// the forked ranks under procs. Laid out as doubles (exact below 2^53),
// NaN for an absent value.
class SummarySink {
 public:
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  static constexpr std::size_t kHead = 11, kPerRank = 11;

  SummarySink(bool shared, int world) : length_(kHead + kPerRank * static_cast<std::size_t>(std::max(world, 1))) {
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
    std::vector<double> v = {s.first_loss,
                             s.last_loss,
                             s.seconds,
                             s.timed_seconds,
                             static_cast<double>(s.steps_run),
                             static_cast<double>(s.end_step),
                             static_cast<double>(s.num_parameters),
                             s.val_loss.value_or(kNone),
                             s.best_val_loss.value_or(kNone),
                             static_cast<double>(s.stop_signal),
                             static_cast<double>(s.ranks.size())};
    for (const RankStats& r : s.ranks) {
      for (double x : encode(r)) v.push_back(x);
    }
    if (v.size() > length_) {  // mpi: the world is mpirun's, known only now
      local_.resize(v.size());
      length_ = v.size();
    }
    std::copy(v.begin(), v.end(), data());
  }

  TrainSummary load() const {
    const double* v = data();
    TrainSummary s;
    s.first_loss = v[0];
    s.last_loss = v[1];
    s.seconds = v[2];
    s.timed_seconds = v[3];
    s.steps_run = static_cast<std::size_t>(v[4]);
    s.end_step = static_cast<std::size_t>(v[5]);
    s.num_parameters = static_cast<std::size_t>(v[6]);
    if (!std::isnan(v[7])) s.val_loss = v[7];
    if (!std::isnan(v[8])) s.best_val_loss = v[8];
    s.stop_signal = static_cast<int>(v[9]);
    for (std::size_t q = 0; q < static_cast<std::size_t>(v[10]); ++q)
      s.ranks.push_back(decode(v + kHead + kPerRank * q));
    return s;
  }

  static std::array<double, kPerRank> encode(const RankStats& r) {
    return {static_cast<double>(r.rank),           static_cast<double>(r.state.params),
            static_cast<double>(r.state.grads),    static_cast<double>(r.state.optimizer),
            static_cast<double>(r.peak.params),    static_cast<double>(r.peak.grads),
            static_cast<double>(r.peak.optimizer), static_cast<double>(r.peak_rss),
            static_cast<double>(r.bytes_sent),     static_cast<double>(r.theory_sent),
            static_cast<double>(r.stop_signal)};
  }
  static RankStats decode(const double* v) {
    const auto z = [&](int i) { return static_cast<std::size_t>(v[i]); };
    return {.rank = static_cast<int>(v[0]),
            .state = {z(1), z(2), z(3)},
            .peak = {z(4), z(5), z(6)},
            .peak_rss = z(7),
            .bytes_sent = z(8),
            .theory_sent = z(9),
            .stop_signal = static_cast<int>(v[10])};
  }

 private:
  double* data() { return shared_ ? shared_ : local_.data(); }
  const double* data() const { return shared_ ? shared_ : local_.data(); }

  std::size_t length_;
  double* shared_ = nullptr;
  std::vector<double> local_;
};

// Every rank's figures for this step, on every rank (one small all_gather).
std::vector<RankStats> gather_stats(dist::Comm& comm, const RankStats& mine) {
  const auto p = static_cast<std::size_t>(comm.size());
  const auto encoded = SummarySink::encode(mine);
  std::vector<double> all(SummarySink::kPerRank * p);
  comm.all_gather(encoded, all);
  std::vector<RankStats> out;
  for (std::size_t q = 0; q < p; ++q) out.push_back(SummarySink::decode(all.data() + SummarySink::kPerRank * q));
  return out;
}

// The stop some rank saw (dist::stop_requested), in rank order; 0: none.
int first_stop_signal(const std::vector<RankStats>& ranks) {
  for (const RankStats& q : ranks) {
    if (q.stop_signal != 0) return q.stop_signal;
  }
  return 0;
}

// The validation loss is due after the eval_every-th steps and the last.
bool evaluates(const TrainOptions& o, std::size_t step) {
  return o.val_fraction > 0 && o.eval_every > 0 && ((step + 1) % o.eval_every == 0 || step + 1 == o.steps);
}

std::size_t num_val_windows(const TrainOptions& o, const Corpus& val) {
  if (o.val_fraction == 0 || o.eval_every == 0) return 0;
  return num_eval_windows(val, o.batch, o.model.block_size, o.eval_batches);
}

// One rank's run: the start, then each step, its evaluation when due, the
// reports and the checkpoints.
void run_rank(dist::Comm& comm, const TrainOptions& o, const Corpus& corpus, const Corpus& val, TrainObserver& observer,
              SummarySink& sink) {
  const int p = comm.size(), r = comm.rank();
  check_batch(o.batch, p, o.grad_accum);  // under mpi, the world is known only now
  const RunStart start = start_run(o, comm, o.zero);
  Replica& replica = *start.replica;

  const optim::LRSchedule schedule = lr_schedule(o);
  const std::size_t n = replica.num_parameters(), T = o.model.block_size, B = o.batch;
  std::ofstream metrics;
  if (r == 0) {
    observer.on_start({.backend = resolve_backend(o.backend, p),
                       .world = p,
                       .start_step = start.step,
                       .num_parameters = n,
                       .num_windows = corpus.num_windows(T),
                       .num_val_windows = num_val_windows(o, val),
                       .corpus = corpus.name(),
                       .val_corpus = val.name()});
    if (!o.metrics.empty()) metrics.open(o.metrics, std::ios::trunc);
  }
  // Collective: the checkpoint of the run after steps_taken steps.
  std::string last_saved;
  const auto save = [&](const std::string& path, std::size_t steps_taken) {
    try {
      save_checkpoint(path, comm, replica,
                      {.config = o.model, .step = steps_taken, .batch = B, .seed = o.seed, .world = p, .zero = o.zero},
                      o.shared_files);
    } catch (const NonFiniteCheckpoint& e) {
      throw NonFiniteCheckpoint(fmt::format("{}; {}", e.what(),
                                            last_saved.empty() ? "this run wrote no checkpoint before"
                                                               : fmt::format("the last written is '{}'", last_saved)));
    }
    last_saved = path;
    if (r == 0) observer.on_checkpoint(path, steps_taken);
  };
  TrainSummary summary;
  summary.num_parameters = n;
  summary.end_step = start.step;
  // A run of no steps saves the weights it would start from (a fresh
  // model's, or --init's), for a peer such as PyTorch to start from too.
  if (o.steps == 0 && !o.save_dir.empty()) {
    save(checkpoint_path(o.save_dir, 0), 0);
  }
  const auto run_start = Clock::now();
  for (std::size_t step = start.step; step < o.steps; ++step) {
    const auto step_start = Clock::now();
    const std::uint64_t sent_before = comm.total_traffic().bytes_sent;
    const StepResult result = train_step(comm, replica, corpus, o, schedule, step);
    const double seconds = since(step_start);

    const RankStats mine{.rank = r,
                         .state = replica.memory_bytes(),
                         .peak = result.peak,
                         .peak_rss = peak_rss_bytes(),
                         .bytes_sent = comm.total_traffic().bytes_sent - sent_before,
                         .theory_sent = theory_bytes_sent(o.zero, o.model, p, r, o.grad_accum),
                         .stop_signal = dist::stop_requested()};
    StepReport report{.step = step,
                      .lr = result.lr,
                      .loss = result.loss,
                      .grad_norm = result.grad_norm,
                      .seconds = seconds,
                      .tokens_per_second = static_cast<double>(B * T) / seconds,
                      .ranks = gather_stats(comm, mine),
                      .val_loss = std::nullopt};
    observer.after_step(comm, replica, step, result.loss);
    if (evaluates(o, step)) report.val_loss = evaluate(comm, replica, val, B, T, o.eval_batches);
    summary.end_step = step + 1;
    if (summary.steps_run++ == 0) {
      summary.first_loss = result.loss;
    } else {
      summary.timed_seconds += seconds;
    }
    summary.last_loss = result.loss;
    summary.ranks = report.ranks;
    const bool best = report.val_loss && (!summary.best_val_loss || *report.val_loss < *summary.best_val_loss);
    if (report.val_loss) summary.val_loss = report.val_loss;
    if (best) summary.best_val_loss = report.val_loss;
    if (r == 0) {
      observer.on_step(report);
      if (metrics.is_open()) write_metrics(metrics, o.metrics, report);
    }
    if (best && !o.save_dir.empty()) save((fs::path(o.save_dir) / kBestCheckpoint).string(), step + 1);
    // Every rank sees the same gathered signals, so all stop after this step.
    summary.stop_signal = first_stop_signal(report.ranks);
    const bool last = step + 1 == o.steps || summary.stop_signal != 0;
    if (!o.save_dir.empty() && (last || (o.save_every > 0 && (step + 1) % o.save_every == 0))) {
      save(checkpoint_path(o.save_dir, step + 1), step + 1);
    }
    if (summary.stop_signal != 0) break;
  }
  summary.seconds = since(run_start);
  if (r == 0) {
    observer.on_end(summary);
    sink.store(summary);
  }
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

optim::LRSchedule lr_schedule(const TrainOptions& options) {
  // A run of no steps has no lr to schedule: decay over one step keeps the default schedule valid.
  const std::size_t decay_steps =
      options.decay_steps != 0 ? options.decay_steps : std::max<std::size_t>(options.steps, 1);
  return optim::LRSchedule(options.adamw.lr,
                           {.kind = options.schedule,
                            .warmup_steps = options.warmup_steps.value_or(decay_steps / kDefaultWarmupDivisor),
                            .decay_steps = decay_steps,
                            .min_lr = options.min_lr.value_or(options.adamw.lr / 10)});
}

std::pair<Corpus, Corpus> load_corpora(const TrainOptions& options) {
  return Corpus::load(options.data).split(options.val_fraction, options.model.block_size);
}

TrainSummary train(const TrainOptions& options, TrainObserver& observer) {
  const auto [corpus, val] = load_corpora(options);
  check_options(options, corpus);
  const Backend backend = resolve_backend(options.backend, options.world);
  const SaveDir save_dir(options, backend);  // held until every rank is done
  SummarySink sink(backend == Backend::Procs, options.world);
  launch(
      backend, options.world, [&](dist::Comm& comm) { run_rank(comm, options, corpus, val, observer, sink); },
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
