// Replica's weight decay: the matrices and embeddings decay, the biases and
// LayerNorm gains do not (GPT-2's rule), unless decay_all; under ZeRO each
// element of a chunk keeps its tensor's rule, so every stage still equals
// one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "tinyllm/distributed/self_comm.h"
#include "tinyllm/distributed/threads_comm.h"
#include "tinyllm/train/data.h"
#include "tinyllm/train/replica.h"
#include "tinyllm/train/verify.h"
#include "train_testing.h"

namespace tinyllm::testing {
namespace {

// Every tensor's values after one step of one process.
std::vector<std::vector<double>> one_step(const train::TrainOptions& o, bool decay_all) {
  auto model = std::make_shared<nn::GPT>(o.model, o.seed);
  // The biases start at 0, where decay does nothing: move every value off it.
  for (const Tensor& p : model->parameters()) {
    for (double& x : p.data()) x += 0.25;
  }
  dist::SelfComm self;
  train::Replica replica(model, o.adamw, self, 0, false, decay_all);
  replica.zero_grad();
  replica.backward(train::Corpus::load(o.data).batch(0, o.batch, o.model.block_size), 1);
  replica.step(0);
  std::vector<std::vector<double>> values;
  for (const Tensor& p : model->parameters()) values.emplace_back(p.data().begin(), p.data().end());
  return values;
}

TEST(ReplicaDecayTest, OnlyMatricesAndEmbeddingsDecay) {
  train::TrainOptions o = tiny_run();
  o.adamw.weight_decay = 0.5;
  const auto rule = one_step(o, false), all = one_step(o, true);
  o.adamw.weight_decay = 0;
  const auto none = one_step(o, false);
  const std::vector<Shape> shapes = o.model.parameter_shapes();
  std::size_t vectors = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const bool matrix = shapes[i].size() >= 2;
    vectors += matrix ? 0 : 1;
    EXPECT_EQ(rule[i], matrix ? all[i] : none[i]) << "tensor " << i;
    EXPECT_NE(all[i], none[i]) << "tensor " << i << ": the decay must show";
  }
  EXPECT_EQ(vectors, 2 + 8 * o.model.n_layer) << "ln_f's and each block's gains and biases";
}

// Chunks of 3 ranks cut through tensors of both kinds; verify compares
// every step's parameters and moments with one process's.
TEST(ReplicaDecayTest, EveryStageDecaysEachElementAsOneProcess) {
  for (int zero = 0; zero <= 3; ++zero) {
    SCOPED_TRACE(::testing::Message() << "zero " << zero);
    train::TrainOptions o = tiny_run(3, zero);
    o.adamw.weight_decay = 0.5;
    double worst = 0;
    train::verify(o, {}, [&](const train::VerifyStep& v) { worst = std::max(worst, v.worst()); });
    EXPECT_LE(worst, 1e-12);
  }
}

}  // namespace
}  // namespace tinyllm::testing
