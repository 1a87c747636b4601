#include "train_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "tinyllm/tensor/deferred_init.h"
#include "tinyllm/train/checkpoint.h"

namespace tinyllm::train {
namespace {

dist::MemoryBytes max_of(const dist::MemoryBytes& x, const dist::MemoryBytes& y) {
  return {std::max(x.params, y.params), std::max(x.grads, y.grads), std::max(x.optimizer, y.optimizer)};
}

struct Phase {
  const char* what = "starting";
  std::size_t step = 0;
};
thread_local Phase phase;

}  // namespace

void set_phase(const char* what, std::size_t step) { phase = {what, step}; }

std::string current_phase() { return phase.step > 0 ? fmt::format("{}, step {}", phase.what, phase.step) : phase.what; }

RunStart start_run(const TrainOptions& o, dist::Comm& comm, int zero) {
  std::shared_ptr<nn::GPT> model;
  {
    // ZeRO builds the model's shapes only: each rank then makes (or reads)
    // just its own chunk, so that stage 3 never holds the whole model and
    // stages 1 and 2 never hold it twice.
    std::optional<DeferredInitGuard> deferred;
    if (zero > 0) deferred.emplace();
    model = std::make_shared<nn::GPT>(o.model, o.seed);
  }
  const std::string path = start_checkpoint(o);
  if (path.empty())
    return {std::make_unique<Replica>(model, o.adamw, comm, zero, o.overlap, o.decay_all, o.bitwise), 0};
  // The file stays open until the Replica has made its values from it.
  const SafetensorsFile from = SafetensorsFile::open(path);
  load_model(from, *model);
  RunStart start{std::make_unique<Replica>(model, o.adamw, comm, zero, o.overlap, o.decay_all, o.bitwise), 0};
  if (!o.resume.empty()) {
    start.step = read_checkpoint_info(from).step;
    start.replica->load_optimizer_state(from, static_cast<double>(start.step));
  }
  return start;
}

StepResult train_step(dist::Comm& comm, Replica& replica, const Corpus& train, const TrainOptions& o,
                      const optim::LRSchedule& schedule, std::size_t step) {
  replica.zero_grad();
  replica.reset_peak_memory_bytes();
  StepResult result{.peak = replica.memory_bytes()};
  set_phase("forward and backward", step + 1);
  result.loss =
      replica.backward(train.batch(step, o.batch, o.model.block_size, comm.rank(), comm.size()), o.grad_accum);
  result.peak = max_of(result.peak, replica.memory_bytes());
  if (!std::isfinite(result.loss))
    throw std::runtime_error(fmt::format("loss is {} at step {}", result.loss, step + 1));
  result.lr = schedule.get_lr(step);
  replica.set_lr(result.lr);
  set_phase("the optimizer step", step + 1);
  result.grad_norm = replica.step(o.clip);
  result.peak = max_of(max_of(result.peak, replica.memory_bytes()), replica.peak_memory_bytes());
  return result;
}

}  // namespace tinyllm::train
