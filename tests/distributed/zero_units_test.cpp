// ZeRO stage 3 unit by unit: a GPT's blocks gathered one at a time, the
// same training as one process, and the options refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "comm_contract.h"
#include "support/expect_throw.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/nn/linear.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/tensor/ops.h"
#include "tinyllm/tensor/random.h"
#include "zero_testing.h"

namespace tinyllm::testing {
namespace {

using dist::Comm;
using dist::ZeroOptimizer;
using dist::ZeroOptions;

const nn::GPTConfig kConfig{.vocab_size = 16, .block_size = 4, .n_layer = 4, .n_head = 2, .n_embd = 8};

ZeroOptions blocks_of(const nn::GPT& model, int prefetch = 1) {
  ZeroOptions options;
  for (const auto& [name, block] : model.h->named_children()) options.units.push_back(block);
  options.prefetch = prefetch;
  return options;
}

std::vector<int> tokens(int step, std::size_t rows, std::size_t first) {
  std::vector<int> out;
  for (std::size_t i = first * 4; i < (first + rows) * 4; ++i) out.push_back(static_cast<int>((i * 7 + step * 3) % 16));
  return out;
}

// Three steps with AdamW on 2 rows per rank, gathered block by block, against
// one process on all rows; the parameters held at once are the chunk, the
// embeddings and ln_f, and the block with those prefetched beside it.
TEST(ZeroUnitsTest, BlockByBlockMatchesOneProcessAndNeverHoldsTheWholeModel) {
  for (int prefetch : {0, 1, 3}) {
    SCOPED_TRACE(::testing::Message() << "prefetch " << prefetch);
    nn::GPT alone(kConfig, 3);
    optim::AdamW reference(alone.parameters(), {.lr = 1e-2});
    for (int step = 0; step < 3; ++step) {
      reference.zero_grad();
      const std::vector<int> x = tokens(step, 6, 0), y = tokens(step + 1, 6, 0);
      alone.loss(x, y, 6, 4).backward();
      reference.step();
    }
    const std::vector<double> want = flat_values(alone.parameters());
    dist::run_threads(3, [&](Comm& comm) {
      auto model = std::make_shared<nn::GPT>(kConfig, 3);
      ZeroOptimizer zo(optim::AdamW::factory({.lr = 1e-2}), model->parameters(), comm, 3, blocks_of(*model, prefetch));
      const std::size_t n = kConfig.num_parameters();
      for (int step = 0; step < 3; ++step) {
        zo.gather();
        zo.zero_grad();
        zo.reset_peak_memory_bytes();
        const std::size_t first = 2 * static_cast<std::size_t>(comm.rank());
        const std::vector<int> x = tokens(step, 6, 0), y = tokens(step + 1, 6, 0);
        const std::span<const int> xs = std::span(x).subspan(first * 4, 8), ys = std::span(y).subspan(first * 4, 8);
        model->loss(xs, ys, 2, 4).backward();
        zo.step();
        // The chunk, the embeddings and ln_f, and 1 + prefetch of the 4 blocks.
        const std::size_t C = kConfig.n_embd, block = 12 * C * C + 13 * C, rest = n - 4 * block;
        const std::size_t live = std::min<std::size_t>(1 + static_cast<std::size_t>(prefetch), 4);
        EXPECT_EQ(zo.peak_memory_bytes().params, (zo.master_chunk().numel() + rest + live * block) * sizeof(double));
      }
      std::vector<double> got(n);
      comm.all_gather(zo.master_chunk().data(), got);
      for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << "value " << i;
    });
  }
}

// Four Linear layers as units, called in an order of the test's choosing:
// out of order, skipping one, one twice.
struct Layers : nn::Module {
  Layers() {
    Generator gen(5);
    for (int i = 0; i < 4; ++i)
      layers.push_back(register_module(std::to_string(i), std::make_shared<nn::Linear>(3, 3, gen)));
  }
  Tensor forward(const Tensor& x, const std::vector<int>& order) const {
    Tensor y = x;
    for (int i : order) y = gelu(layers[static_cast<std::size_t>(i)]->forward(y));
    return y;
  }
  std::vector<std::shared_ptr<nn::Linear>> layers;
};

Tensor rows(int step, std::size_t first, std::size_t count) {
  std::vector<double> values;
  for (std::size_t i = first * 3; i < (first + count) * 3; ++i)
    values.push_back(std::sin(0.7 * static_cast<double>(i + 5 * step)));
  return Tensor::from(values, {count, 3});
}

// Gathering on demand makes any call order correct: a unit is gathered in
// its own pre-forward hook and again when backward reaches its output, so
// neither the order of the units list nor prefetching decides what is held.
TEST(ZeroUnitsTest, UnitsCalledOutOfOrderSkippedOrTwiceTrainAsOneProcess) {
  for (const std::vector<int>& order : {std::vector<int>{2, 0, 3}, std::vector<int>{0, 1, 0, 3, 2}}) {
    for (int prefetch : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "prefetch " << prefetch << ", " << order.size() << " calls");
      Layers alone;
      // No decay: a skipped layer has no gradient, which one process skips and
      // a chunk sees as zeros; with a zero gradient and no decay AdamW leaves it.
      optim::AdamW reference(alone.parameters(), {.lr = 1e-2, .weight_decay = 0});
      for (int step = 0; step < 3; ++step) {
        reference.zero_grad();
        mean(alone.forward(rows(step, 0, 4), order)).backward();
        reference.step();
      }
      const std::vector<double> want = flat_values(alone.parameters());
      dist::run_threads(2, [&](Comm& comm) {
        auto model = std::make_shared<Layers>();
        ZeroOptions options;
        for (const auto& layer : model->layers) options.units.push_back(layer);
        options.prefetch = prefetch;
        ZeroOptimizer zo(optim::AdamW::factory({.lr = 1e-2, .weight_decay = 0}), model->parameters(), comm, 3, options);
        for (int step = 0; step < 3; ++step) {
          zo.gather();
          zo.zero_grad();
          // Each rank's mean over its 2 rows; the ranks' average is the mean over 4.
          mean(model->forward(rows(step, 2 * static_cast<std::size_t>(comm.rank()), 2), order)).backward();
          zo.step();
        }
        std::vector<double> got(want.size());
        comm.all_gather(zo.master_chunk().data(), got);
        for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << "value " << i;
      });
    }
  }
}

TEST(ZeroUnitsTest, RejectsBadOptionsByName) {
  dist::run_threads(2, [](Comm& comm) {
    auto model = std::make_shared<nn::GPT>(kConfig, 3);
    const auto make = [&](int stage, ZeroOptions options) {
      ZeroOptimizer zo(optim::AdamW::factory({}), model->parameters(), comm, stage, std::move(options));
    };
    EXPECT_THROW_WITH(make(2, blocks_of(*model)), std::invalid_argument,
                      "units shard the parameters, which only stage 3 does (got 4 units at stage 2)");
    EXPECT_THROW_WITH(make(3, blocks_of(*model, -1)), std::invalid_argument, "prefetch must be >= 0 (got -1)");
    ZeroOptions zero_bucket;
    zero_bucket.buckets.bucket_bytes = 0;
    EXPECT_THROW_WITH(make(1, zero_bucket), std::invalid_argument, "bucket sizes must be positive (got bucket_bytes 0");
    ZeroOptions swapped = blocks_of(*model);
    std::swap(swapped.units[0], swapped.units[1]);
    EXPECT_THROW_WITH(make(3, swapped), std::invalid_argument, "unit 1 must follow unit 0");
    ZeroOptions twice = blocks_of(*model);
    twice.units[1] = twice.units[0];
    EXPECT_THROW_WITH(make(3, twice), std::invalid_argument, "unit 1 must follow unit 0");
    ZeroOptions foreign;
    foreign.units.push_back(std::make_shared<nn::GPT>(kConfig, 4)->h);
    EXPECT_THROW_WITH(make(3, foreign), std::invalid_argument,
                      "unit 0's parameters must be a run of the parameter list");
  });
}

}  // namespace
}  // namespace tinyllm::testing
