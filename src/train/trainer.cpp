#include "tinyllm/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "tinyllm/train/data.h"

namespace tinyllm::train {

TrainSummary train(const TrainOptions& options, const std::function<void(const StepReport&)>& on_step) {
  using Clock = std::chrono::steady_clock;
  const Corpus corpus = Corpus::load(options.data);
  const std::size_t T = options.model.block_size, B = options.batch;
  nn::GPT model(options.model, options.seed);
  optim::AdamW optimizer(model.parameters(), options.adamw);

  TrainSummary summary{.num_parameters = model.num_parameters()};
  const auto start = Clock::now();
  for (std::size_t step = 0; step < options.steps; ++step) {
    const auto step_start = Clock::now();
    const Batch batch = corpus.batch(step, B, T);
    optimizer.zero_grad();
    Tensor loss = model.loss(batch.inputs, batch.targets, batch.batch, T);
    const double value = loss.item();
    if (!std::isfinite(value)) throw std::runtime_error(fmt::format("loss is {} at step {}", value, step));
    loss.backward();
    optimizer.step();

    const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    if (step == 0) summary.first_loss = value;
    summary.last_loss = value;
    if (on_step) {
      on_step(
          {.step = step, .loss = value, .seconds = seconds, .tokens_per_second = static_cast<double>(B * T) / seconds});
    }
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return summary;
}

}  // namespace tinyllm::train
