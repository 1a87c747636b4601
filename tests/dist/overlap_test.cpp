// BucketOptions::overlap: the collectives on a communication thread give
// the synchronous run's bits and bytes in every mode (DDP, stages 1 to 3,
// stage 3 unit by unit with and without prefetch), with accumulation and
// clipping; a bucket's collective really is in flight while backward goes
// on; and a rank that fails mid-backward makes the others fail fast.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/dist/ddp.h"
#include "tinyllm/dist/errors.h"
#include "tinyllm/dist/threads_comm.h"
#include "tinyllm/dist/zero.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/clip_grad.h"
#include "tinyllm/tensor/ops.h"
#include "zero_testing.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;

const nn::GPTConfig kConfig{.vocab_size = 16, .block_size = 4, .n_layer = 4, .n_head = 2, .n_embd = 8};
constexpr std::size_t kRowsPerRank = 2;  // one row per micro-batch
constexpr int kSteps = 3;
constexpr double kClip = 0.05;  // below the gradient's norm, so clipping scales

// Small buckets: a few parameters each, so backward reduces many while it runs.
dist::BucketOptions small_buckets(bool overlap) {
  return {.bucket_bytes = 2048, .first_bucket_bytes = 512, .overlap = overlap};
}

std::vector<int> tokens(int step, std::size_t rows, std::size_t first) {
  std::vector<int> out;
  for (std::size_t i = first * 4; i < (first + rows) * 4; ++i) out.push_back(static_cast<int>((i * 7 + step * 3) % 16));
  return out;
}

// Micro-batch m of this rank's step, its loss scaled by 1/2.
Tensor micro_loss(const nn::GPT& model, const Comm& comm, int step, std::size_t m) {
  const std::size_t row = kRowsPerRank * static_cast<std::size_t>(comm.rank()) + m;
  return model.loss(tokens(step, 1, row), tokens(step + 1, 1, row), 1, 4) * 0.5;
}

struct Result {
  std::vector<double> params;
  std::uint64_t bytes_sent = 0;
  bool overlapping = false;
};

// kSteps AdamW steps of two micro-batches with clipping. DDP and stage 1
// run the first micro-batch inside no_sync(); stages 2 and 3 reduce each.
// prefetch < 0: stage 3 without units.
Result train(Comm& comm, Mode mode, bool overlap, int prefetch = -1) {
  auto model = std::make_shared<nn::GPT>(kConfig, 3);
  const optim::OptimizerFactory adamw = optim::AdamW::factory({.lr = 1e-2, .weight_decay = 0.1});
  Result result;
  comm.reset_traffic();
  if (mode == Mode::Ddp) {
    dist::DDP ddp(model, comm, small_buckets(overlap));
    result.overlapping = ddp.overlapping();
    const std::vector<Tensor> params = ddp.parameters();
    std::unique_ptr<optim::Optimizer> opt = adamw(params);
    for (int step = 0; step < kSteps; ++step) {
      opt->zero_grad();
      {
        dist::NoSyncGuard quiet = ddp.no_sync();
        micro_loss(*model, comm, step, 0).backward();
      }
      micro_loss(*model, comm, step, 1).backward();
      ddp.sync_grads();
      optim::clip_grad_norm(params, kClip);
      opt->step();
    }
    result.bytes_sent = comm.total_traffic().bytes_sent;
    result.params = flat_values(params);
    return result;
  }
  dist::ZeroOptions options;
  options.buckets = small_buckets(overlap);
  if (prefetch >= 0) {
    for (const auto& [name, block] : model->h->named_children()) options.units.push_back(block);
    options.prefetch = prefetch;
  }
  dist::ZeroOptimizer zo(adamw, model->parameters(), comm, static_cast<int>(mode), options);
  result.overlapping = zo.overlapping();
  for (int step = 0; step < kSteps; ++step) {
    zo.gather();
    zo.zero_grad();
    if (mode == Mode::Zero1) {
      dist::NoSyncGuard quiet = zo.no_sync();
      micro_loss(*model, comm, step, 0).backward();
    } else {
      micro_loss(*model, comm, step, 0).backward();
    }
    micro_loss(*model, comm, step, 1).backward();
    zo.clip_grad_norm(kClip);
    zo.step();
  }
  result.bytes_sent = comm.total_traffic().bytes_sent;
  result.params.resize(kConfig.num_parameters());
  comm.all_gather(zo.master_chunk().data(), result.params);
  return result;
}

struct OverlapCase {
  Backend backend;
  Mode mode;
  int prefetch;  // stage 3 with units; -1 for none
};

class OverlapTest : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(OverlapTest, EqualsSynchronousBitForBitWithTheSameTraffic) {
  const auto [backend, mode, prefetch] = GetParam();
  run_ranks(backend, 3, [&](Comm& comm) {
    const Result plain = train(comm, mode, false, prefetch);
    const Result overlapped = train(comm, mode, true, prefetch);
    EXPECT_FALSE(plain.overlapping);
    EXPECT_TRUE(overlapped.overlapping);
    ASSERT_EQ(overlapped.params.size(), plain.params.size());
    EXPECT_EQ(std::memcmp(overlapped.params.data(), plain.params.data(), plain.params.size() * sizeof(double)), 0)
        << "rank " << comm.rank() << ": the overlapped parameters differ from the synchronous ones";
    EXPECT_EQ(overlapped.bytes_sent, plain.bytes_sent);
    expect_same_bits_on_every_rank(comm, overlapped.params, "parameters");
  });
}

std::vector<OverlapCase> overlap_cases() {
  std::vector<OverlapCase> cases;
  for (Backend backend : {Backend::Threads, Backend::Procs}) {
    for (Mode mode : {Mode::Ddp, Mode::Zero1, Mode::Zero2, Mode::Zero3}) cases.push_back({backend, mode, -1});
    for (int prefetch : {0, 1}) cases.push_back({backend, Mode::Zero3, prefetch});
  }
  return cases;
}

std::string overlap_case_name(const ::testing::TestParamInfo<OverlapCase>& info) {
  const std::string backend = info.param.backend == Backend::Threads ? "Threads" : "Procs";
  const std::string units = info.param.prefetch < 0 ? "" : "UnitsPrefetch" + std::to_string(info.param.prefetch);
  return backend + mode_name(info.param.mode) + units;
}

INSTANTIATE_TEST_SUITE_P(Modes, OverlapTest, ::testing::ValuesIn(overlap_cases()), overlap_case_name);

// Whether rank 0's backward got past fc1's output (fc2's bucket issued,
// in stage 3 its unit) while rank 1's backward waited, for up to 2 s, at
// fc2's output: after stage 3's re-gathers there, before any gradient.
// Rank 0's reduction of fc2 cannot finish before rank 1 joins it, so rank
// 0 gets past the point only if the reduction runs on another thread while
// its backward goes on.
bool passes_while_peer_waits(Mode mode, bool overlap) {
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
      return layer->register_forward_hook([fn](const nn::Module&, const Tensor& output) {
        output.register_hook([fn](const Tensor&) { fn(); });
      });
    };
    RemovableHandle point = comm.rank() == 0 ? on_output(net->fc1, [&passed] { passed = true; })
                                             : on_output(net->fc2, [&passed, &seen] {
                                                 const auto deadline =
                                                     std::chrono::steady_clock::now() + std::chrono::seconds(2);
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
        run_ranks(
            GetParam(), 3,
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
              RemovableHandle point = net->fc1->register_forward_hook([&comm](const nn::Module&, const Tensor& out) {
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
