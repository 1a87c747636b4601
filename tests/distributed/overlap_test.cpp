// BucketOptions::overlap: equal to the synchronous run (overlap_equality.h)
// on threads and processes; a bucket's collective really is in flight
// while backward goes on; and a rank that fails mid-backward makes the
// others fail fast.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm_contract.h"
#include "overlap_equality.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/ddp.h"
#include "tinyllm/distributed/errors.h"
#include "tinyllm/distributed/threads_comm.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/optim/adamw.h"
#include "zero_testing.h"

namespace tinyllm::testing {

INSTANTIATE_TEST_SUITE_P(Threads, OverlapEquality, ::testing::ValuesIn(overlap_cases(Backend::Threads, 3)),
                         overlap_case_name);
INSTANTIATE_TEST_SUITE_P(Procs, OverlapEquality, ::testing::ValuesIn(overlap_cases(Backend::Procs, 3)),
                         overlap_case_name);

namespace {

using dist::Comm;

// Whether rank 0's backward got past fc1's output (fc2's bucket issued,
// in stage 3 its unit) while rank 1's backward waited at fc2's output:
// after stage 3's re-gathers there, before any gradient. Rank 0's
// reduction of fc2 cannot finish before rank 1 joins it, so rank 0 gets
// past the point only if the reduction runs on another thread while its
// backward goes on. The answer does not hang on the machine's speed: with
// overlap rank 0 gets there at once, and rank 1 waits for it up to 30 s
// (the wait ends when it does); without, it never gets there, and 2 s of
// waiting shows that as well as any longer wait would.
bool passes_while_peer_waits(Mode mode, bool overlap) {
  const auto patience = overlap ? std::chrono::seconds(30) : std::chrono::seconds(2);
  std::atomic<bool> passed{false}, seen{false};
  dist::run_threads(2, [&](Comm& comm) {
    auto net = std::make_shared<TinyNet>(7);
    const dist::BucketOptions buckets{.bucket_bytes = 8, .first_bucket_bytes = 8, .overlap = overlap};
    std::unique_ptr<dist::DDP> ddp;
    std::unique_ptr<dist::ZeroOptimizer> zo;
    if (mode == Mode::Ddp) {
      ddp = std::make_unique<dist::DDP>(net, comm, buckets);
    } else {
      dist::ZeroOptions options;
      options.buckets = buckets;
      if (mode == Mode::Zero3) options.units = {net->fc1, net->fc2};
      zo = std::make_unique<dist::ZeroOptimizer>(optim::AdamW::factory({}), net->parameters(), comm,
                                                 static_cast<int>(mode), options);
      zo->gather();
      zo->zero_grad();
    }
    // After the optimizer's own hooks, so stage 3's gathers come first.
    const auto on_output = [](const std::shared_ptr<nn::Linear>& layer, std::function<void()> fn) {
      return layer->register_forward_hook(
          [fn](const nn::Module&, const Tensor& output) { output.register_hook([fn](const Tensor&) { fn(); }); });
    };
    RemovableHandle point = comm.rank() == 0 ? on_output(net->fc1, [&passed] { passed = true; })
                                             : on_output(net->fc2, [&passed, &seen, patience] {
                                                 const auto deadline = std::chrono::steady_clock::now() + patience;
                                                 while (!passed && std::chrono::steady_clock::now() < deadline) {
                                                   std::this_thread::yield();
                                                 }
                                                 seen = passed.load();
                                               });
    tiny_loss(*net, 0, 4 * static_cast<std::size_t>(comm.rank()), 4).backward();
    if (ddp) {
      ddp->sync_grads();
    } else {
      zo->step();
    }
    point.remove();
  });
  return seen;
}

TEST(OverlapInFlightTest, ABucketsCollectiveRunsWhileBackwardGoesOn) {
  for (Mode mode : {Mode::Ddp, Mode::Zero2, Mode::Zero3}) {
    SCOPED_TRACE(mode_name(mode));
    EXPECT_TRUE(passes_while_peer_waits(mode, true));
    // The control: synchronous, rank 0 waits in its first collective.
    EXPECT_FALSE(passes_while_peer_waits(mode, false));
  }
}

// Rank 1 throws inside its backward, once fc2's buckets are issued. Its
// stream drops what it had queued, and the others' collectives on their
// streams fail at once with its message, far within the 30 s timeout.
class OverlapFailureTest : public ::testing::TestWithParam<Backend> {};

TEST_P(OverlapFailureTest, ARankThatThrowsMidBackwardFailsTheOthersFast) {
  for (Mode mode : {Mode::Ddp, Mode::Zero2, Mode::Zero3}) {
    SCOPED_TRACE(mode_name(mode));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW_WITH(
        run_ranks(GetParam(), 3,
                  [&](Comm& comm) {
                    auto net = std::make_shared<TinyNet>(7);
                    const dist::BucketOptions buckets{.bucket_bytes = 8, .first_bucket_bytes = 8, .overlap = true};
                    std::unique_ptr<dist::DDP> ddp;
                    std::unique_ptr<dist::ZeroOptimizer> zo;
                    if (mode == Mode::Ddp) {
                      ddp = std::make_unique<dist::DDP>(net, comm, buckets);
                    } else {
                      dist::ZeroOptions options;
                      options.buckets = buckets;
                      if (mode == Mode::Zero3) options.units = {net->fc1, net->fc2};
                      zo = std::make_unique<dist::ZeroOptimizer>(optim::AdamW::factory({}), net->parameters(), comm,
                                                                 static_cast<int>(mode), options);
                      zo->gather();
                      zo->zero_grad();
                    }
                    RemovableHandle point =
                        net->fc1->register_forward_hook([&comm](const nn::Module&, const Tensor& out) {
                          out.register_hook([&comm](const Tensor&) {
                            if (comm.rank() == 1) throw std::runtime_error("backward failed on purpose");
                          });
                        });
                    try {
                      tiny_loss(*net, 0, 4 * static_cast<std::size_t>(comm.rank()), 4).backward();
                      if (ddp) {
                        ddp->sync_grads();
                      } else {
                        zo->step();
                      }
                    } catch (const dist::CommError& error) {
                      EXPECT_NE(std::string(error.what()).find("aborted: rank 1 failed: backward failed on purpose"),
                                std::string::npos)
                          << error.what();
                      throw;
                    }
                    ADD_FAILURE() << "rank " << comm.rank() << " finished its step";
                  },
                  {.timeout = std::chrono::seconds(30)}),
        std::runtime_error, "rank 1: backward failed on purpose");
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, OverlapFailureTest, ::testing::Values(Backend::Threads, Backend::Procs),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::Threads ? std::string("Threads") : std::string("Procs");
                         });

}  // namespace
}  // namespace tinyllm::testing
