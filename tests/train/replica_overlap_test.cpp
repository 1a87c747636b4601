// Replica with overlap (TrainOptions::overlap): every mode trains the same
// bits as without it, and stages 2 and 3 peak at peak_bytes' figure with
// the second bucket in flight.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "tinyllm/distributed/threads_comm.h"
#include "tinyllm/tensor/deferred_init.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/metrics.h"
#include "tinyllm/train/replica.h"
#include "train_testing.h"

namespace tinyllm::testing {
namespace {

struct Trained {
  std::vector<double> params;
  dist::MemoryBytes peak;
};

Trained train_replica(dist::Comm& comm, const train::TrainOptions& o, std::size_t grad_accum, bool overlap) {
  const train::Corpus corpus = train::Corpus::load(o.data);
  std::shared_ptr<nn::GPT> model;
  {
    std::optional<DeferredInitGuard> deferred;  // stage 3 makes only its chunk, as the trainer does
    if (o.zero == 3) deferred.emplace();
    model = std::make_shared<nn::GPT>(o.model, o.seed);
  }
  train::Replica replica(model, o.adamw, comm, o.zero, overlap);
  Trained out;
  // As the trainer takes it: the buffers alive around backward and the step,
  // and what ZeroOptimizer noted within them.
  const auto note = [&out](const dist::MemoryBytes& now) {
    out.peak = {.params = std::max(out.peak.params, now.params),
                .grads = std::max(out.peak.grads, now.grads),
                .optimizer = std::max(out.peak.optimizer, now.optimizer)};
  };
  for (std::size_t step = 0; step < 3; ++step) {
    replica.zero_grad();
    replica.reset_peak_memory_bytes();
    note(replica.memory_bytes());
    replica.backward(corpus.batch(step, o.batch, o.model.block_size, comm.rank(), comm.size()), grad_accum);
    note(replica.memory_bytes());
    replica.step(1.0);
    note(replica.memory_bytes());
    note(replica.peak_memory_bytes());
  }
  out.params = replica.full(train::Region::Params);
  return out;
}

TEST(ReplicaOverlapTest, EveryModeTrainsTheSameBitsAndPeaksAsTheTheorySays) {
  for (int zero = 0; zero <= 3; ++zero) {
    for (std::size_t grad_accum : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << "zero " << zero << ", grad_accum " << grad_accum);
      train::TrainOptions o = tiny_run(3, zero);
      o.model.n_layer = 4;
      dist::run_threads(3, [&](dist::Comm& comm) {
        const Trained plain = train_replica(comm, o, grad_accum, false);
        const Trained overlapped = train_replica(comm, o, grad_accum, true);
        ASSERT_EQ(overlapped.params.size(), plain.params.size());
        EXPECT_EQ(std::memcmp(overlapped.params.data(), plain.params.data(), plain.params.size() * sizeof(double)), 0);
        if (zero == 0) return;
        for (bool overlap : {false, true}) {
          const dist::MemoryBytes want = train::peak_bytes(zero, o.model, 3, comm.rank(), grad_accum, overlap);
          const dist::MemoryBytes got = overlap ? overlapped.peak : plain.peak;
          EXPECT_EQ(got.grads, want.grads) << "zero " << zero << ", grad_accum " << grad_accum << ", rank "
                                           << comm.rank() << (overlap ? ", overlap" : "");
          EXPECT_EQ(got.params, want.params) << "zero " << zero << ", grad_accum " << grad_accum << ", rank "
                                             << comm.rank() << (overlap ? ", overlap" : "");
        }
      });
    }
  }
}

}  // namespace
}  // namespace tinyllm::testing
