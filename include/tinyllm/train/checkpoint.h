// Checkpoint: a training run's whole state in one safetensors file, as
// docs/DESIGN.md section 5 fixes it. Data region: the parameters (F64, GPT-2's names, in
// parameters() order), then every "<name>.exp_avg", then every
// "<name>.exp_avg_sq": three flat vectors of n values, so each rank writes
// its chunk of each at its offset. The metadata holds the model's sizes,
// the step (optimizer steps taken, which is also the data position), the
// run's settings and a fingerprint of the corpus it trained on. Written collectively and atomically (safetensors.h);
// loads at any world size and stage.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tinyllm/distributed/comm.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/safetensors.h"

namespace tinyllm::train {

class Replica;

// The data region's three parts, in order, each n values long.
enum class Region { Params = 0, ExpAvg = 1, ExpAvgSq = 2 };
inline constexpr int kNumRegions = 3;

// The corpus a run trained on: the training part of its --data
// (Corpus::split), so that a resumed run can tell another file, or another
// --val-fraction's cut of the same one, from its own.
struct DataFingerprint {
  std::size_t tokens = 0;   // of the training part
  std::uint64_t fnv1a = 0;  // Corpus::fnv1a of the training part
  double val_fraction = 0;  // the split it was cut with, to explain a difference
  // The same training tokens: val_fraction only says how they were cut.
  bool same_tokens(const DataFingerprint& other) const { return tokens == other.tokens && fnv1a == other.fnv1a; }
};

DataFingerprint fingerprint(const Corpus& train, double val_fraction);

struct CheckpointInfo {
  nn::GPTConfig config;
  std::size_t step = 0;   // optimizer steps taken; the run resumes at this step of the data order
  std::size_t batch = 0;  // the global batch the data order was cut with
  std::uint64_t seed = 0;
  int world = 1;  // where it was written (for the record; it loads anywhere)
  int zero = 0;
  // Absent in the checkpoints of tinyllm versions before it was recorded.
  std::optional<DataFingerprint> data;
};

// The checkpoint of the lowest validation loss in --save: resuming from
// the directory takes the latest step-*.safetensors, never this one.
inline constexpr const char* kBestCheckpoint = "best.safetensors";

// "<dir>/step-00000100.safetensors".
std::string checkpoint_path(const std::string& dir, std::size_t step);
// A checkpoint file as given, or the latest step-*.safetensors of a
// directory. std::invalid_argument when there is none, naming `flag` (the
// option that gave the directory, if any) and a kBestCheckpoint it holds.
std::string find_checkpoint(const std::string& path_or_dir, const std::string& flag = "");

// Removes what a save killed mid-write (SIGKILL, a crash) left in dir: the
// writer's temporary files, "<name>.safetensors.<16 hex digits>.tmp", and
// nothing else. A run saving into dir at the same moment would lose its
// own, so the trainer calls it once, after taking dir's lock and before its
// first save. Returns the
// paths removed; a file that cannot be removed is left, and the next save
// reports any real fault in dir.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

// The tensors of a checkpoint of this model, in data order.
std::vector<TensorInfo> checkpoint_tensors(const nn::GPT& model);

// A checkpoint refused for holding a value that is not finite.
struct NonFiniteCheckpoint : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Collective: every rank writes its chunk (Replica::pieces()). Every rank
// throws NonFiniteCheckpoint, naming the step, the count and the first
// tensor, when some rank's chunk of the parameters or AdamW state holds an
// inf or a NaN; nothing is written then, and a file at path stays as it was.
void save_checkpoint(const std::string& path, dist::Comm& comm, const Replica& replica, const CheckpointInfo& info,
                     SharedFiles shared = SharedFiles::Auto);

// The metadata, checked: std::invalid_argument naming the path and the key
// for a file that is not a tinyllm checkpoint or holds a bad value.
CheckpointInfo read_checkpoint_info(const SafetensorsFile& file);
// Copies the checkpoint's parameters into the model after checking that
// its tensors are exactly checkpoint_tensors(model): names, order, shapes.
// A deferred model (tensor/deferred_init.h) instead gets recipes that read
// the file range by range when its values are made, so the file must stay
// open until then (a stage-3 ZeroOptimizer makes them as it is built).
void load_model(const SafetensorsFile& file, const nn::GPT& model);
// A model of the checkpoint's sizes holding its parameters (the optimizer
// state is left unread), e.g. to sample from; whatever world and stage wrote
// it. Throws as read_checkpoint_info and load_model do.
std::unique_ptr<nn::GPT> load_gpt(const SafetensorsFile& file);

// The largest |a − b| in each region of two checkpoints of the same model
// (parameters, exp_avg, exp_avg_sq): how two runs compare. Throws
// std::invalid_argument when their tensors differ in names or shapes.
std::array<double, kNumRegions> checkpoint_diff(const SafetensorsFile& a, const SafetensorsFile& b);

}  // namespace tinyllm::train
