#include "overlap_equality.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tinyllm/distributed/ddp.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/clip_grad.h"

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

}  // namespace

TEST_P(OverlapEquality, EqualsSynchronousBitForBitWithTheSameTraffic) {
  const auto [backend, world, mode, prefetch] = GetParam();
  run_ranks(backend, world, [&](Comm& comm) {
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

std::vector<OverlapCase> overlap_cases(Backend backend, int world) {
  std::vector<OverlapCase> cases;
  for (Mode mode : {Mode::Ddp, Mode::Zero1, Mode::Zero2, Mode::Zero3}) cases.push_back({backend, world, mode, -1});
  for (int prefetch : {0, 1}) cases.push_back({backend, world, Mode::Zero3, prefetch});
  return cases;
}

std::string overlap_case_name(const ::testing::TestParamInfo<OverlapCase>& info) {
  static const char* const kNames[] = {"Threads", "ThreadsStaged", "Procs", "ProcsStaged", "Mpi"};
  const std::string units = info.param.prefetch < 0 ? "" : "UnitsPrefetch" + std::to_string(info.param.prefetch);
  return fmt::format("{}P{}{}{}", kNames[static_cast<int>(info.param.backend)], info.param.world,
                     mode_name(info.param.mode), units);
}

}  // namespace tinyllm::testing
