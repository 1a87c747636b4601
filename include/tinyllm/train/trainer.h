// The training loop: the GPT of docs/DESIGN.md section 3 on a byte corpus in docs/DESIGN.md's
// data order, AdamW decaying the matrices and embeddings at each step's lr
// from the schedule (optim::LRSchedule) after clipping, on `world` ranks with
// DDP (zero 0) or a ZeRO stage, equal to one process. Rank r of p takes
// rows [r·B/p, (r+1)·B/p) of each global batch and splits them into
// grad_accum micro-batches; each micro-batch's mean loss is scaled by
// 1/grad_accum, so the step's gradient is the global batch's mean. It
// reports to an observer and prints nothing itself (the app does).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tinyllm/distributed/comm.h"
#include "tinyllm/distributed/memory_bytes.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/lr_schedule.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/launch.h"
#include "tinyllm/train/metrics.h"
#include "tinyllm/train/replica.h"

namespace tinyllm::train {

// Present on every Debian machine (package base-files): a real English text
// to learn from without downloading anything.
inline constexpr const char* kDefaultCorpus = "/usr/share/common-licenses/GPL-3";

// The warmup a cosine schedule gets unless told: 1/10 of its decay steps
// (50 of the default 500), rounded down.
inline constexpr std::size_t kDefaultWarmupDivisor = 10;

struct TrainOptions {
  nn::GPTConfig model;
  std::string data = kDefaultCorpus;
  // The corpus's last val_fraction of bytes is held out (Corpus::split);
  // 0: none, and no evaluation.
  double val_fraction = 0.1;
  // The validation loss (evaluate.h) after every eval_every-th step's
  // update and after the last step; 0: never.
  std::size_t eval_every = 100;
  std::size_t eval_batches = 0;  // batches of `batch` windows from the start of the validation part; 0: all
  std::size_t batch = 16;        // global batch, in windows of model.block_size tokens
  std::size_t steps = 500;       // the step count the run ends at (a resumed run counts its earlier steps)
  optim::AdamWOptions adamw{.lr = 1e-3, .betas = {0.9, 0.95}, .eps = 1e-8, .weight_decay = 0.1};
  std::uint64_t seed = 1337;

  int world = 1;  // ranks; 0 under mpi: mpirun's
  int zero = 0;   // 0: DDP; 1, 2, 3: ZeRO's stages
  Backend backend = Backend::Auto;
  std::size_t grad_accum = 1;  // micro-batches per step on each rank
  double clip = 1.0;           // global gradient-norm limit; 0: none
  // Step s trains at lr_schedule(*this).get_lr(s), adamw.lr its peak.
  optim::LRScheduleKind schedule = optim::LRScheduleKind::Cosine;
  std::optional<std::size_t> warmup_steps;  // absent: the decay steps / kDefaultWarmupDivisor
  std::size_t decay_steps = 0;              // 0: steps
  std::optional<double> min_lr;             // absent: adamw.lr / 10
  // Weight decay on every parameter, not only the matrices and embeddings
  // (Replica's rule).
  bool decay_all = false;
  // The buckets' collectives (and stage 3's gathers) on a communication
  // thread beside backward (dist::BucketOptions::overlap); same results.
  bool overlap = false;
  // The same bits at any world size, stage and backend (docs/BITWISE.md):
  // one forward and backward per window, summed exactly (Replica's bitwise).
  bool bitwise = false;
  // Seconds a rank waits for the others in a collective before the run
  // fails naming the collective and the late rank, in [0.001, 1e9].
  double timeout = 300;
  // Refuse, before building anything, a run whose predicted peak
  // (predict_rank_memory) exceeds the memory it may take. Off, a run that
  // runs out of memory ends with an error naming the rank and the phase.
  bool memory_check = true;

  std::string metrics;         // JSON lines, one per step ("" for none)
  std::string save_dir;        // checkpoints go here ("" for none): every save_every steps, at the end,
                               // and as kBestCheckpoint whenever the validation loss is the run's lowest;
                               // a run of steps 0 saves its starting weights as step 0
  std::size_t save_every = 0;  // 0: only at the end
  bool overwrite = false;      // save even where save_dir holds checkpoints the run does not resume
  std::string resume;          // checkpoint (or directory of them) to continue from: weights, optimizer, step
  std::string init;            // checkpoint whose weights start a fresh run
  // Resume even where the checkpoint's corpus fingerprint (DataFingerprint)
  // differs from data's training part, or is missing: with a warning.
  bool allow_other_data = false;
  SharedFiles shared_files = SharedFiles::Auto;  // how ranks write checkpoints (safetensors.h)
};

// One rank's figures, gathered to rank 0 each step.
struct RankStats {
  int rank = 0;
  dist::MemoryBytes state;   // model state held after the step (memory_bytes())
  dist::MemoryBytes peak;    // the largest within the step: the stage-3 gather, the full gradients before the reduce
  std::size_t peak_rss = 0;  // this process's peak resident set, bytes (the whole process under threads)
  std::uint64_t bytes_sent = 0;   // by this rank's collectives in the step
  std::uint64_t theory_sent = 0;  // what the mode's collectives of n values send from this rank (zero.h)
  int stop_signal = 0;            // dist::stop_requested() on this rank as the step ended
};

struct StepReport {
  std::size_t step = 0;             // from 0
  double lr = 0;                    // the learning rate the step used
  double loss = 0.0;                // mean over the global batch
  std::optional<double> grad_norm;  // before clipping; absent without clipping, which does not compute it
  double seconds = 0.0;             // wall time of this step
  double tokens_per_second = 0.0;
  std::vector<RankStats> ranks;
  std::optional<double> val_loss;  // after this step's update, when it was evaluated
};

struct RunInfo {
  Backend backend = Backend::Threads;  // resolved
  int world = 1;
  std::size_t start_step = 0;  // > 0 when resumed
  std::size_t num_parameters = 0;
  std::size_t num_windows = 0;      // of the training part
  std::size_t num_val_windows = 0;  // the validation windows evaluated (0: no evaluation)
  // Rank 0's collectives on a communication thread (Replica::overlapping):
  // false without overlap, and with it for DDP on one rank (no collectives)
  // or MPI below MPI_THREAD_SERIALIZED.
  bool overlap = false;
  std::string corpus;
  std::string val_corpus;  // the validation part's name
  std::string warning;     // what the run accepted but the user should know ("" for none): --allow-other-data's
};

struct TrainSummary {
  double first_loss = 0.0;
  double last_loss = 0.0;
  double seconds = 0.0;
  // The steps' own wall time but the first's (which touches fresh memory
  // and warms the caches): what throughput is measured over.
  double timed_seconds = 0.0;
  std::size_t steps_run = 0;
  std::size_t end_step = 0;  // the step count at the end, a resumed run's earlier steps included
  std::size_t num_parameters = 0;
  std::optional<double> val_loss;       // the last evaluation's
  std::optional<double> best_val_loss;  // the lowest evaluated in this run
  std::vector<RankStats> ranks;         // the last step's
  std::string last_checkpoint;          // "" when none was saved
  // The signal whose stop (distributed/stop.h) ended the run early; 0: it ran to
  // the end.
  int stop_signal = 0;
};

// What the loop calls. on_* run on rank 0 only (for printing);
// after_step runs on every rank after each step and may make collective
// calls on comm (verify compares there).
// What an observer holds beside the ranks, on rank 0's side.
struct MemoryBeside {
  std::size_t bytes = 0;
  std::string what;  // "verify's one-process reference"
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(const RunInfo& /*info*/) {}
  virtual void on_step(const StepReport& /*report*/) {}
  virtual void on_checkpoint(const std::string& /*path*/, std::size_t /*step*/) {}
  virtual void on_end(const TrainSummary& /*summary*/) {}
  virtual void after_step(dist::Comm& /*comm*/, Replica& /*replica*/, std::size_t /*step*/, double /*loss*/) {}
  // Counted by the memory check before the run starts.
  virtual MemoryBeside memory_beside_ranks(const TrainOptions& /*options*/) const { return {}; }
};

// The corpus the options train on and the one they validate on
// (Corpus::split); std::invalid_argument for a bad file or fraction.
std::pair<Corpus, Corpus> load_corpora(const TrainOptions& options);

// The options' own rules, which need no file: each value in its range, the
// batch against world and grad_accum, the schedule (its errors in the
// flags' words, a derived value named as such), and no backend but mpi
// under an mpirun of more than one process (its size from
// OMPI_COMM_WORLD_SIZE or PMI_SIZE: each process would run the whole run);
// std::invalid_argument naming the flag. train() checks them first, and a
// command line can before it runs.
void check_flags(const TrainOptions& options);

// Whether the run takes validation losses between its steps.
bool validates(const TrainOptions& options);

// Rank 0's predicted peak (it holds the largest chunk) in the options' run
// on `world` ranks: predict_rank_memory of its mode, batch and flags.
RankMemory predict_run_memory(const TrainOptions& options, int world);

// The checkpoint --resume (or else --init) names: the file, or its
// directory's latest (find_checkpoint); "" for neither.
std::string start_checkpoint(const TrainOptions& options);

// The schedule of the options' run, its defaults filled in:
// std::invalid_argument as optim::LRSchedule for bad values (check_flags
// names them by flag first).
optim::LRSchedule lr_schedule(const TrainOptions& options);

// Checks everything it can before any rank starts (the data, the model's
// sizes, the batch against world and grad_accum, the model state's peak
// per rank against the memory this machine and the process's rlimits
// leave, the checkpoint to resume, the save directory, the metrics file),
// then trains. std::invalid_argument
// naming the value for bad options; std::runtime_error naming the step for
// a loss that is not finite. A stop asked for (dist::request_stop) ends
// the run after the step during which some rank first saw it, with that
// step's checkpoint saved when saving. Returns rank 0's summary on every
// backend.
TrainSummary train(const TrainOptions& options, TrainObserver& observer);
TrainSummary train(const TrainOptions& options, const std::function<void(const StepReport&)>& on_step = {});

}  // namespace tinyllm::train
