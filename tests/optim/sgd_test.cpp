// SGD against hand-computed steps and against torch.optim.SGD's own numbers
// (tools/optim_reference.py), plus its state, its errors and its factory.
#include <gtest/gtest.h>
#include <tinyllm/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/expect_throw.h"
#include "support/optim_testing.h"

namespace tinyllm::optim {
namespace {

using testing::expect_all_near;
using testing::set_grad;

TEST(SGDTest, PlainStepIsLrTimesGrad) {
  Tensor w = Tensor::from({1, -2}, {2}, true);
  SGD sgd({w}, {.lr = 0.5});
  set_grad(w, {0.25, -1});
  sgd.step();
  expect_all_near(w.data(), {0.875, -1.5}, 1e-12, "w");
  EXPECT_TRUE(sgd.state_dict().tensors.empty());  // no momentum, no state
}

TEST(SGDTest, HandExampleTwoStepsWithMomentumAndDecay) {
  // lr 0.5, momentum 0.9, weight_decay 0.1, dampening 0.
  // step 1: d = g + 0.1·p = [0.5 + 0.1, 1 − 0.2] = [0.6, 0.8]; buf = d;
  //         p = [1, −2] − 0.5·[0.6, 0.8] = [0.7, −2.4]
  // step 2: d = [−1 + 0.07, 0.25 − 0.24] = [−0.93, 0.01];
  //         buf = 0.9·[0.6, 0.8] + d = [−0.39, 0.73]; p = [0.7 + 0.195, −2.4 − 0.365]
  Tensor w = Tensor::from({1, -2}, {2}, true);
  SGD sgd({w}, {.lr = 0.5, .momentum = 0.9, .weight_decay = 0.1});
  set_grad(w, {0.5, 1});
  sgd.step();
  expect_all_near(w.data(), {0.7, -2.4}, 1e-12, "w after step 1");
  set_grad(w, {-1, 0.25});
  sgd.step();
  expect_all_near(w.data(), {0.895, -2.765}, 1e-12, "w after step 2");
  expect_all_near(sgd.state_dict().tensors.at(0).second.data(), {-0.39, 0.73}, 1e-12, "momentum_buffer");
}

TEST(SGDTest, FirstBufferIsTheGradientUndamped) {
  // momentum 0.5, dampening 0.5: buf = g on step 1 (no dampening), then
  // buf = 0.5·2 + 0.5·4 = 3. p = 1 − 0.1·2 = 0.8, then 0.8 − 0.1·3 = 0.5.
  Tensor w = Tensor::from({1}, {1}, true);
  SGD sgd({w}, {.lr = 0.1, .momentum = 0.5, .dampening = 0.5});
  set_grad(w, {2});
  sgd.step();
  EXPECT_NEAR(w.data()[0], 0.8, 1e-12);
  set_grad(w, {4});
  sgd.step();
  EXPECT_NEAR(w.data()[0], 0.5, 1e-12);
}

TEST(SGDTest, HandExampleTwoNesterovSteps) {
  // momentum 0.5: step 1: buf = 2, direction 2 + 0.5·2 = 3, p = 1 − 0.3 = 0.7;
  // step 2: buf = 0.5·2 − 1 = 0, direction −1 + 0.5·0 = −1, p = 0.7 + 0.1 = 0.8.
  Tensor w = Tensor::from({1}, {1}, true);
  SGD sgd({w}, {.lr = 0.1, .momentum = 0.5, .nesterov = true});
  set_grad(w, {2});
  sgd.step();
  EXPECT_NEAR(w.data()[0], 0.7, 1e-12);
  set_grad(w, {-1});
  sgd.step();
  EXPECT_NEAR(w.data()[0], 0.8, 1e-12);
}

using testing::reference_params;
using testing::run_reference_steps;

struct SGDReference {
  SGDOptions options;
  std::vector<double> p0, p1, buf0, buf1;  // buffers empty without momentum
};

TEST(SGDTest, ProducesPyTorchValues) {
  // Printed by tools/optim_reference.py with torch 1.13, 5 steps.
  const std::vector<SGDReference> references = {
      {{.lr = 0.1},
       {-0.48750000000000004, 0.36250000000000004, -0.38750000000000007, -0.05000000000000001, 0.074999999999999983,
        0.049999999999999996},
       {-0.48750000000000004, 0.050000000000000003, 0.375, -0.17500000000000002},
       {},
       {}},
      {{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
       {-0.52639429931099613, 0.35367967794186506, -0.50608582320444639, -0.020099831802212399, -0.010214153134017773,
        0.0002086443043373608},
       {-0.44337998646875004, 0.0052571820096874991, 0.36270108275890628, -0.15252844171578128},
       {0.72608345782228345, -0.8121055994651204, 2.9224155716432545, -1.6091622368933542, 2.158117891856322,
        0.58716987692761657},
       {4.0808872293750005, -2.5360385151937499, -0.0019637176781249961, 2.5100756468156251}},
      {{.lr = 0.1, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true},
       {-0.7306717386346393, 0.55210463102982499, -1.1041304995442329, 0.27410853149837666, -0.5318593777541194,
        -0.099350229411216878},
       {-1.1789766824000001, 0.4562008288640001, 0.35544332690399999, -0.60777021823200006},
       {0.5693843156558186, -0.76642489890276044, 2.5388418373657378, -1.4984835670850256, 1.8649160012283958,
        0.47097395462489355},
       {3.9005926799999999, -2.4867646048000003, -0.027753482799999993, 2.3887562124000001}},
  };
  for (const SGDReference& ref : references) {
    SCOPED_TRACE(::testing::Message() << "momentum " << ref.options.momentum << ", nesterov " << ref.options.nesterov);
    std::vector<Tensor> params = reference_params();
    SGD sgd(params, ref.options);
    run_reference_steps(sgd, params);
    expect_all_near(params[0].data(), ref.p0, 1e-12, "p0");
    expect_all_near(params[1].data(), ref.p1, 1e-12, "p1");
    const StateDict state = sgd.state_dict();
    if (ref.buf0.empty()) {
      EXPECT_TRUE(state.tensors.empty());
      continue;
    }
    ASSERT_EQ(state.tensors.size(), 2u);
    expect_all_near(state.tensors[0].second.data(), ref.buf0, 1e-12, "0.momentum_buffer");
    expect_all_near(state.tensors[1].second.data(), ref.buf1, 1e-12, "1.momentum_buffer");
  }
}

TEST(SGDTest, SkipsParametersWithoutGrad) {
  Tensor a = Tensor::from({1, 2}, {2}, true);
  Tensor b = Tensor::from({3}, {1}, true);
  SGD sgd({a, b}, {.lr = 0.5, .momentum = 0.9, .weight_decay = 0.1});
  set_grad(a, {1, 1});
  sgd.step();
  EXPECT_EQ(b.to_vector(), (std::vector<double>{3}));  // even weight decay leaves it alone
  const StateDict state = sgd.state_dict();
  ASSERT_EQ(state.tensors.size(), 1u);
  EXPECT_EQ(state.tensors[0].first, "0.momentum_buffer");
  // b's first step with a grad starts its buffer from that grad.
  sgd.zero_grad();
  set_grad(b, {2});
  sgd.step();
  EXPECT_NEAR(b.data()[0], 3 - 0.5 * (2 + 0.1 * 3), 1e-12);
}

TEST(SGDTest, StateDictNamesShapesAndBytes) {
  Tensor a = Tensor::zeros({2, 3}, true);
  Tensor b = Tensor::zeros({4}, true);
  SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(sgd.state_dict().bytes(), 0u);  // created at the first step, as in PyTorch
  set_grad(a, std::vector<double>(6, 1.0));
  set_grad(b, std::vector<double>(4, 1.0));
  sgd.step();
  const StateDict state = sgd.state_dict();
  ASSERT_EQ(state.tensors.size(), 2u);
  EXPECT_EQ(state.tensors[0].first, "0.momentum_buffer");
  EXPECT_EQ(state.tensors[0].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(state.tensors[1].first, "1.momentum_buffer");
  EXPECT_EQ(state.tensors[1].second.shape(), (Shape{4}));
  EXPECT_TRUE(state.scalars.empty());
  EXPECT_EQ(state.bytes(), 8u * 10u);
  // The dict shares the optimizer's arrays: the next step shows through it.
  sgd.step();
  EXPECT_NEAR(state.tensors[0].second.data()[0], 1.9, 1e-12);
}

TEST(SGDTest, StateDictRoundTripStepsIdentically) {
  Tensor a = Tensor::from({1, -2, 3}, {3}, true);
  Tensor b = Tensor::from({0.5, 0.25}, {2}, true);
  const SGDOptions options{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01};
  SGD first({a, b}, options);
  for (int k = 0; k < 2; ++k) {
    set_grad(a, {0.3 * k - 1, 0.7, 1.1 * k});
    set_grad(b, {-0.2, 0.9 - k});
    first.step();
  }
  Tensor a2 = a.clone().set_requires_grad(true);
  Tensor b2 = b.clone().set_requires_grad(true);
  SGD second({a2, b2}, options);
  second.load_state_dict(first.state_dict());
  EXPECT_FALSE(second.state_dict().tensors[0].second.same(first.state_dict().tensors[0].second));
  for (int k = 0; k < 3; ++k) {
    for (const auto& [x, y] : {std::pair{a, b}, std::pair{a2, b2}}) {
      set_grad(x, {0.1 * k, -0.6, 1.3});
      set_grad(y, {k - 0.5, 0.4});
    }
    first.step();
    second.step();
  }
  EXPECT_EQ(a.to_vector(), a2.to_vector());
  EXPECT_EQ(b.to_vector(), b2.to_vector());
}

TEST(SGDTest, LoadStateDictRejectsBadNamesAndShapes) {
  Tensor a = Tensor::zeros({2, 3}, true);
  SGD sgd({a}, {.lr = 0.1, .momentum = 0.9});
  StateDict wrong_shape;
  wrong_shape.tensors.emplace_back("0.momentum_buffer", Tensor::zeros({6}));
  EXPECT_THROW_WITH(sgd.load_state_dict(wrong_shape), std::invalid_argument,
                    "SGD::load_state_dict: 0.momentum_buffer has shape [6] but parameter 0 has shape [2, 3]");
  StateDict extra;
  extra.tensors.emplace_back("1.momentum_buffer", Tensor::zeros({2, 3}));
  extra.scalars.emplace_back("0.step", 1);
  EXPECT_THROW_WITH(sgd.load_state_dict(extra), std::invalid_argument, "unexpected 1.momentum_buffer, 0.step");

  SGD plain({a}, {.lr = 0.1});
  StateDict buffer;
  buffer.tensors.emplace_back("0.momentum_buffer", Tensor::zeros({2, 3}));
  EXPECT_THROW_WITH(plain.load_state_dict(buffer), std::invalid_argument, "unexpected 0.momentum_buffer");
}

// A schedule sets the lr between steps; the next step uses it.
TEST(SGDTest, SetLrChangesTheNextStep) {
  Tensor w = Tensor::from({1, -2}, {2}, true);
  SGD sgd({w}, {.lr = 0.5});
  EXPECT_EQ(sgd.lr(), 0.5);
  sgd.set_lr(0.25);
  EXPECT_EQ(sgd.lr(), 0.25);
  EXPECT_EQ(sgd.options().lr, 0.25);
  set_grad(w, {0.25, -1});
  sgd.step();
  EXPECT_EQ(w.to_vector(), (std::vector<double>{0.9375, -1.75}));  // p − 0.25·g, exact in binary
  sgd.set_lr(0);
  set_grad(w, {0.25, -1});
  sgd.step();
  EXPECT_EQ(w.to_vector(), (std::vector<double>{0.9375, -1.75}));
}

TEST(SGDTest, RejectsNegativeLr) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(SGD({w}, {.lr = -1}), std::invalid_argument, "SGD: lr must be >= 0 (got -1)");
  EXPECT_THROW_WITH(SGD({w}, {.lr = std::nan("")}), std::invalid_argument, "SGD: lr must be >= 0 (got nan)");
}

TEST(SGDTest, RejectsNegativeMomentum) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(SGD({w}, {.momentum = -0.5}), std::invalid_argument, "SGD: momentum must be >= 0 (got -0.5)");
}

TEST(SGDTest, RejectsNegativeWeightDecay) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(SGD({w}, {.weight_decay = -0.01}), std::invalid_argument,
                    "SGD: weight_decay must be >= 0 (got -0.01)");
}

TEST(SGDTest, RejectsNesterovWithoutMomentumOrWithDampening) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(SGD({w}, {.nesterov = true}), std::invalid_argument,
                    "SGD: nesterov needs momentum > 0 and dampening 0 (got momentum 0, dampening 0)");
  EXPECT_THROW_WITH(SGD({w}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}), std::invalid_argument,
                    "(got momentum 0.9, dampening 0.1)");
}

TEST(SGDTest, FactoryCarriesTheHyperparameters) {
  auto make = SGD::factory({.lr = 0.5, .momentum = 0.9, .weight_decay = 0.1});
  Tensor w = Tensor::from({1, -2}, {2}, true);
  std::unique_ptr<Optimizer> opt = make({w});
  const auto* sgd = dynamic_cast<const SGD*>(opt.get());
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->options().momentum, 0.9);
  // The first step of HandExampleTwoStepsWithMomentumAndDecay.
  set_grad(w, {0.5, 1});
  opt->step();
  expect_all_near(w.data(), {0.7, -2.4}, 1e-12, "w");
}

TEST(SGDTest, FactoryRejectsBadOptionsAtOnce) {
  EXPECT_THROW_WITH(SGD::factory({.lr = -2}), std::invalid_argument, "SGD: lr must be >= 0 (got -2)");
}

}  // namespace
}  // namespace tinyllm::optim
