// evaluate(): the mean of the validation windows' mean losses, the same on
// every rank of every mode as one process computes it window by window.
#include "tinyllm/train/evaluate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "tinyllm/distributed/threads_comm.h"
#include "tinyllm/tensor/autograd.h"
#include "tinyllm/tensor/deferred_init.h"
#include "train_testing.h"

namespace tinyllm::testing {
namespace {

// Window by window, on a model of its own.
double by_hand(const train::TrainOptions& o, const train::Corpus& val, std::size_t windows) {
  const nn::GPT model(o.model, o.seed);
  const autograd::NoGradGuard no_grad;
  double sum = 0;
  for (std::size_t w = 0; w < windows; ++w) {
    const train::Batch b = val.windows(w, 1, o.model.block_size);
    sum += model.loss(b.inputs, b.targets, 1, b.seq).item();
  }
  return sum / static_cast<double>(windows);
}

TEST(EvaluateTest, EveryModeAndWorldGivesOneProcesssMeanOfWindowMeans) {
  train::TrainOptions o = tiny_run();
  o.batch = 4;
  const train::Corpus corpus = train::Corpus::load(o.data);
  const auto [train_part, val] = corpus.split(0.02, o.model.block_size);
  const std::size_t all = val.num_windows(o.model.block_size);
  ASSERT_GT(all, 20u);
  ASSERT_NE(all % 4, 0u) << "the last round should be short";
  // 3 batches of 4; every window (a last batch short of rows, ranks without).
  for (const auto& [eval_batches, windows] : {std::pair<std::size_t, std::size_t>{3, 12}, {0, all}}) {
    const double expected = by_hand(o, val, windows);
    for (int zero = 0; zero <= 3; ++zero) {
      for (int world : {1, 3, 4}) {
        SCOPED_TRACE(::testing::Message()
                     << "zero " << zero << ", world " << world << ", eval_batches " << eval_batches);
        dist::run_threads(world, [&](dist::Comm& comm) {
          std::shared_ptr<nn::GPT> model;
          {
            std::optional<DeferredInitGuard> deferred;
            if (zero == 3) deferred.emplace();
            model = std::make_shared<nn::GPT>(o.model, o.seed);
          }
          train::Replica replica(model, o.adamw, comm, zero);
          const double loss = train::evaluate(comm, replica, val, o.batch, o.model.block_size, eval_batches);
          EXPECT_NEAR(loss, expected, 1e-12);
          double first = loss;
          comm.broadcast({&first, 1}, 0);
          EXPECT_EQ(loss, first) << "rank " << comm.rank() << " holds other bits";
        });
      }
    }
  }
}

}  // namespace
}  // namespace tinyllm::testing
