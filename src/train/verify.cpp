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
#include "tinyllm/distributed/payload.h"
#include "tinyllm/distributed/self_comm.h"
#include "tinyllm/train/checkpoint.h"
#include "tinyllm/train/metrics.h"
#include "train_step.h"

namespace tinyllm::train {
namespace {

// What rank 0 tells every rank after each step: the step's differences
// (each rank knows the step and its loss), and the first failure so far.
struct Verdict {
  VerifyStep now;
  bool failed = false;
  std::size_t failed_step = 0;
  double failed_worst = 0;
  bool failed_same_bits = true;
};
using VerdictPayload = dist::Payload<Verdict, [](auto& v, auto& io) {
  io(v.now.loss_diff, v.now.params_diff, v.now.exp_avg_diff, v.now.exp_avg_sq_diff, v.now.same_bits,
     v.now.one_process_bits, v.failed, v.failed_step, v.failed_worst, v.failed_same_bits);
}>;

// A Replica's three regions, whole (collective under ZeRO), and the FNV-1a
// hash of their bits end to end.
struct State {
  std::vector<std::vector<double>> regions;
  std::uint64_t hash = tinyllm::detail::kFnv1aBasis;
};

State full_state(Replica& replica) {
  State state;
  for (Region region : {Region::Params, Region::ExpAvg, Region::ExpAvgSq}) {
    state.regions.push_back(replica.full(region));
    state.hash = tinyllm::detail::fnv1a(std::as_bytes(std::span(state.regions.back())), state.hash);
  }
  return state;
}

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

  // The one-process run at its peak, and the whole states compared after
  // each step: three regions of n on every rank, and the reference's.
  MemoryBeside memory_beside_ranks(const TrainOptions& o) const override {
    const std::size_t n = o.model.num_parameters(), ranks = static_cast<std::size_t>(std::max(o.world, 1));
    TrainOptions one_process = o;
    one_process.zero = 0;
    one_process.overlap = false;
    const RankMemory reference = predict_run_memory(one_process, 1);
    return {.bytes = reference.total() - reference.base + 3 * n * sizeof(double) * (ranks + 1),
            .what = "verify's one-process reference and the states it compares"};
  }

  void after_step(dist::Comm& comm, Replica& replica, std::size_t step, double loss) override {
    // Every rank: its full state and the hash of its bits.
    const State mine = full_state(replica);
    const std::vector<std::uint64_t> hashes = dist::SinglePayload<std::uint64_t>::all_gather(comm, mine.hash);

    // Rank 0: the one-process step, then the differences, sent to every
    // rank so that all agree on the verdict.
    Verdict verdict;
    if (comm.rank() == 0) verdict = judge(step, loss, mine, hashes);
    verdict = VerdictPayload::broadcast(comm, verdict, 0);
    VerifyStep result = verdict.now;
    result.step = step;
    result.loss = loss;
    if (comm.rank() == 0 && on_step_) on_step_(result);
    if (step + 1 == options_.steps && verdict.failed) {
      throw std::runtime_error(
          !verdict.failed_same_bits
              ? fmt::format("verify failed: at step {} the ranks do not hold the same bits", verdict.failed_step + 1)
          : options_.bitwise
              ? fmt::format("verify --bitwise failed: at step {} the ranks' bits differ from one process's "
                            "(largest difference {:.3g})",
                            verdict.failed_step + 1, verdict.failed_worst)
              : fmt::format("verify failed: at step {} the ranks differ from one process by {:.3g} (tolerance {:.0e})",
                            verdict.failed_step + 1, verdict.failed_worst, tolerance_));
    }
  }

 private:
  // The one-process run, started at its first step from what the ranks
  // started from.
  double reference_step(std::size_t step) {
    if (!reference_) reference_ = start_run(options_, self_, 0).replica;
    return train_step(self_, *reference_, corpus_, options_, schedule_, step).loss;
  }

  // Rank 0 alone: this step's differences from the one-process step, and
  // the first failure so far (kept in failure_, as the ranks may be threads).
  Verdict judge(std::size_t step, double loss, const State& mine, const std::vector<std::uint64_t>& hashes) {
    const double reference_loss = reference_step(step);
    const State reference = full_state(*reference_);
    const auto diff = [&](std::size_t g) { return max_abs_diff(mine.regions[g], reference.regions[g]); };
    const std::uint64_t h = mine.hash;
    Verdict verdict = failure_;
    verdict.now = {.loss_diff = std::abs(loss - reference_loss),
                   .params_diff = diff(0),
                   .exp_avg_diff = diff(1),
                   .exp_avg_sq_diff = diff(2),
                   .same_bits = std::all_of(hashes.begin(), hashes.end(), [h](std::uint64_t q) { return q == h; }),
                   .one_process_bits = h == reference.hash && std::bit_cast<std::uint64_t>(loss) ==
                                                                  std::bit_cast<std::uint64_t>(reference_loss)};
    const double worst = verdict.now.worst();
    const bool close = options_.bitwise ? verdict.now.one_process_bits : worst <= tolerance_;
    if (!verdict.failed && (!close || !verdict.now.same_bits)) {
      verdict.failed = true;
      verdict.failed_step = step;
      verdict.failed_worst = worst;
      verdict.failed_same_bits = verdict.now.same_bits;
      failure_ = verdict;
    }
    return verdict;
  }

  const TrainOptions& options_;
  const optim::LRSchedule schedule_;
  const Corpus& corpus_;
  const std::function<void(const RunInfo&)>& on_start_;
  const std::function<void(const VerifyStep&)>& on_step_;
  double tolerance_;
  dist::SelfComm self_;
  std::unique_ptr<Replica> reference_;
  Verdict failure_;  // the first failed step's, once one failed
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
