#include "tinyllm/train/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "../support/fnv1a.h"
#include "difference.h"
#include "tinyllm/distributed/self_comm.h"
#include "tinyllm/train/checkpoint.h"
#include "train_step.h"

namespace tinyllm::train {
namespace {

class VerifyObserver final : public TrainObserver {
 public:
  VerifyObserver(const TrainOptions& options, const Corpus& corpus, const std::function<void(const RunInfo&)>& on_start,
                 const std::function<void(const VerifyStep&)>& on_step, double tolerance)
      : options_(options),
        schedule_(lr_schedule(options)),
        corpus_(corpus),
        on_start_(on_start),
        on_step_(on_step),
        tolerance_(tolerance) {}

  void on_start(const RunInfo& info) override {
    if (on_start_) on_start_(info);
  }

  void after_step(dist::Comm& comm, Replica& replica, std::size_t step, double loss) override {
    // Every rank: its full state (collective under ZeRO) and the hash of its bits.
    std::vector<std::vector<double>> mine;
    std::uint64_t h = tinyllm::detail::kFnv1aBasis;
    for (Region region : {Region::Params, Region::ExpAvg, Region::ExpAvgSq}) {
      mine.push_back(replica.full(region));
      h = tinyllm::detail::fnv1a(std::as_bytes(std::span(mine.back())), h);
    }
    std::vector<double> hashes(static_cast<std::size_t>(comm.size()));
    const double own = std::bit_cast<double>(h);
    comm.all_gather({&own, 1}, hashes);

    // Rank 0: the one-process step, then the differences, sent to every
    // rank so that all agree on the verdict.
    // Rank 0 alone writes this object's members (the ranks may be threads).
    std::vector<double> verdict(8, 0.0);  // 5 figures, then the first failing step, its difference and bits
    if (comm.rank() == 0) {
      const double reference_loss = reference_step(step);
      verdict = {std::abs(loss - reference_loss), max_abs_diff(mine[0], reference_->full(Region::Params)),
                 max_abs_diff(mine[1], reference_->full(Region::ExpAvg)),
                 max_abs_diff(mine[2], reference_->full(Region::ExpAvgSq)), 1.0};
      for (double q : hashes) {
        if (std::bit_cast<std::uint64_t>(q) != h) verdict[4] = 0.0;
      }
      const double worst = VerifyStep{.loss_diff = verdict[0],
                                      .params_diff = verdict[1],
                                      .exp_avg_diff = verdict[2],
                                      .exp_avg_sq_diff = verdict[3]}
                               .worst();
      if (first_failure_ < 0 && (!(worst <= tolerance_) || verdict[4] == 0.0)) {
        first_failure_ = static_cast<double>(step);
        failure_worst_ = worst;
        failure_bits_ = verdict[4];
      }
      verdict.insert(verdict.end(), {first_failure_, failure_worst_, failure_bits_});
    }
    comm.broadcast(verdict, 0);
    const VerifyStep result{.step = step,
                            .loss = loss,
                            .loss_diff = verdict[0],
                            .params_diff = verdict[1],
                            .exp_avg_diff = verdict[2],
                            .exp_avg_sq_diff = verdict[3],
                            .same_bits = verdict[4] == 1.0};
    if (comm.rank() == 0 && on_step_) on_step_(result);
    if (step + 1 == options_.steps && verdict[5] >= 0) {
      throw std::runtime_error(
          verdict[7] == 0.0
              ? fmt::format("verify failed: at step {} the ranks do not hold the same bits", verdict[5])
              : fmt::format("verify failed: at step {} the ranks differ from one process by {:.3g} (tolerance {:.0e})",
                            verdict[5], verdict[6], tolerance_));
    }
  }

 private:
  // The one-process run, started at its first step from what the ranks
  // started from.
  double reference_step(std::size_t step) {
    if (!reference_) reference_ = start_run(options_, self_, 0).replica;
    return train_step(self_, *reference_, corpus_, options_, schedule_, step).loss;
  }

  const TrainOptions& options_;
  const optim::LRSchedule schedule_;
  const Corpus& corpus_;
  const std::function<void(const RunInfo&)>& on_start_;
  const std::function<void(const VerifyStep&)>& on_step_;
  double tolerance_;
  dist::SelfComm self_;
  std::unique_ptr<Replica> reference_;
  double first_failure_ = -1;  // the first step that failed
  double failure_worst_ = 0;
  double failure_bits_ = 1;
};

}  // namespace

double VerifyStep::worst() const {
  return max_keeping_nan(max_keeping_nan(loss_diff, params_diff), max_keeping_nan(exp_avg_diff, exp_avg_sq_diff));
}

void verify(const TrainOptions& options, const std::function<void(const RunInfo&)>& on_start,
            const std::function<void(const VerifyStep&)>& on_step, double tolerance) {
  if (options.steps == 0) throw std::invalid_argument("verify: --steps must be at least 1 (got 0)");
  const Corpus corpus = load_corpora(options).first;
  VerifyObserver observer(options, corpus, on_start, on_step, tolerance);
  train(options, observer);
}

}  // namespace tinyllm::train
