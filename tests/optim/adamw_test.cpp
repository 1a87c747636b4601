// AdamW against the hand example of docs/ZERO.md, hand-computed steps and
// torch.optim.AdamW's own numbers (tools/optim_reference.py), plus its
// state, its errors and its factory.
#include <gtest/gtest.h>
#include <tinyllm/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/expect_throw.h"
#include "support/optim_testing.h"

namespace tinyllm::optim {
namespace {

using testing::expect_all_near;
using testing::reference_gradient;
using testing::reference_initial;
using testing::set_grad;

const Tensor& tensor_named(const StateDict& state, const std::string& name) {
  for (const auto& [n, t] : state.tensors)
    if (n == name) return t;
  throw std::out_of_range("no tensor " + name);
}

double scalar_named(const StateDict& state, const std::string& name) {
  for (const auto& [n, v] : state.scalars)
    if (n == name) return v;
  throw std::out_of_range("no scalar " + name);
}

// The hand example of docs/ZERO.md on one process: w = 0..9, grad w − 1.5, lr 0.5,
// no decay. After one step m̂ = g and sqrt(v̂) = |g|, so every entry moves
// by 0.5 against the sign of its gradient (eps changes the eighth digit).
Tensor hand_example_leaf() {
  Tensor w = Tensor::from({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10}, true);
  std::span<double> g = w.mutable_grad();
  for (std::size_t j = 0; j < 10; ++j) g[j] = w.data()[j] - 1.5;
  return w;
}
const std::vector<double> kHandExampleAfterOneStep = {0.5, 1.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5};

TEST(AdamWTest, HandExampleStep) {
  Tensor w = hand_example_leaf();
  AdamW opt({w}, {.lr = 0.5, .weight_decay = 0});
  opt.step();
  expect_all_near(w.data(), kHandExampleAfterOneStep, 1e-7, "w");
}

TEST(AdamWTest, HandExampleTwoStepsWithDecay) {
  // lr 0.1, betas (0.9, 0.99), eps 1e-8, weight_decay 0.1; p = 1.
  // step 1, g = 0.5: p = 0.99·1; m = 0.1·0.5 = 0.05; v = 0.01·0.25 = 0.0025;
  //   bc1 = 0.1, bc2 = 0.01: m̂ = 0.5, sqrt(v)/sqrt(bc2) = 0.05/0.1 = 0.5;
  //   p = 0.99 − 0.1·0.5/(0.5 + 1e-8).
  // step 2, g = −1: m = 0.9·0.05 − 0.1 = −0.055; v = 0.99·0.0025 + 0.01 = 0.012475;
  //   bc1 = 1 − 0.81 = 0.19, bc2 = 1 − 0.9801 = 0.0199;
  //   p = 0.99·p − (0.1/0.19)·(−0.055)/(sqrt(0.012475)/sqrt(0.0199) + 1e-8).
  Tensor w = Tensor::from({1}, {1}, true);
  AdamW opt({w}, {.lr = 0.1, .betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.1});
  set_grad(w, {0.5});
  opt.step();
  const double p1 = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8);
  EXPECT_NEAR(w.data()[0], p1, 1e-12);
  set_grad(w, {-1});
  opt.step();
  const double p2 = 0.99 * p1 + (0.1 / 0.19) * 0.055 / (std::sqrt(0.012475) / std::sqrt(0.0199) + 1e-8);
  EXPECT_NEAR(w.data()[0], p2, 1e-12);
  const StateDict state = opt.state_dict();
  EXPECT_NEAR(tensor_named(state, "0.exp_avg").data()[0], -0.055, 1e-12);
  EXPECT_NEAR(tensor_named(state, "0.exp_avg_sq").data()[0], 0.012475, 1e-12);
  EXPECT_EQ(scalar_named(state, "0.step"), 2);
}

TEST(AdamWTest, ExpAvgFollowsPyTorchsLerpForms) {
  // torch.lerp(m, g, w) computes m + w·(g − m) when w < 0.5 and g − (g − m)·(1 − w)
  // otherwise; they round differently, so this compares bits. From m = 0 and
  // g = 1/7, where the two forms differ for both weights.
  for (const double beta1 : {0.9, 0.3}) {
    SCOPED_TRACE(::testing::Message() << "beta1 " << beta1);
    const double g = 1.0 / 7;
    const double weight = 1 - beta1;
    const double near_form = 0 + weight * (g - 0);
    const double far_form = g - (g - 0) * (1 - weight);
    ASSERT_NE(near_form, far_form);
    Tensor w = Tensor::zeros({1}, true);
    set_grad(w, {g});
    AdamW opt({w}, {.betas = {beta1, 0.999}});
    opt.step();
    EXPECT_EQ(tensor_named(opt.state_dict(), "0.exp_avg").data()[0], weight < 0.5 ? near_form : far_form);
  }
}

using testing::reference_params;
using testing::run_reference_steps;

struct AdamWReference {
  AdamWOptions options;
  std::vector<double> p0, exp_avg0, exp_avg_sq0, p1, exp_avg1, exp_avg_sq1;
};

TEST(AdamWTest, ProducesPyTorchValues) {
  // Printed by tools/optim_reference.py with torch 1.13, 5 steps; p0 took 5
  // steps and p1 3. Torch 1.13 updates exp_avg with mul_ and add_, 2.x (and
  // this code) with lerp_, which rounds differently: hence 1e-12 here, and
  // ExpAvgFollowsPyTorchsLerpForms for the bits. The second case has β1 < 0.5.
  const std::vector<AdamWReference> references = {
      {{.lr = 0.1, .betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.05},
       {-0.41004978446639395, 0.25461941731251081, -0.3410975946219108, -0.030563391064647658, 0.11531506114654262,
        -0.02286345240472766},
       {0.085133749999999994, -0.095868749999999989, 0.31364124999999993, -0.17080999999999996, 0.23869999999999994,
        0.057697499999999985},
       {0.041520803607812545, 0.041486937539062532, 0.068322862764062561, 0.04696047010000004, 0.056635735000000048,
        0.040063702443750029},
       {-0.29757503557252279, 0.052600506531065377, 0.2121650680128995, -0.17361127826807099},
       {0.43799999999999994, -0.27337499999999992, -0.0023749999999999986, 0.26862499999999995},
       {0.078657750000000082, 0.030060140625000027, 0.00030939062500000031, 0.029960640625000028}},
      {{.lr = 0.02, .betas = {0.3, 0.95}, .eps = 1e-6, .weight_decay = 0.1},
       {-0.38169636241357469, 0.25947939620564081, -0.058530092653814439, -0.20964164086518267, 0.32033554567442163,
        0.10614200350839909},
       {-0.18263874999999999, -0.01483124999999999, 0.98273874999999999, -0.80611999999999995, 0.19144999999999995,
        0.35925750000000001},
       {0.19180697753906265, 0.19100793457031268, 0.31296176269531273, 0.21863000000000021, 0.26054531250000024,
        0.18372052734375016},
       {-0.058492422773497282, -0.18655290777329006, 0.36226796998190858, 0.066661868156342244},
       {1.5014999999999998, -1.0526249999999999, -0.079625000000000001, 0.89337499999999992},
       {0.37612500000000032, 0.14533007812500012, 0.0014863281250000013, 0.14289257812500011}},
  };
  for (const AdamWReference& ref : references) {
    SCOPED_TRACE(::testing::Message() << "beta1 " << ref.options.betas.first);
    std::vector<Tensor> params = reference_params();
    AdamW opt(params, ref.options);
    run_reference_steps(opt, params);
    const StateDict state = opt.state_dict();
    expect_all_near(params[0].data(), ref.p0, 1e-12, "p0");
    expect_all_near(tensor_named(state, "0.exp_avg").data(), ref.exp_avg0, 1e-12, "0.exp_avg");
    expect_all_near(tensor_named(state, "0.exp_avg_sq").data(), ref.exp_avg_sq0, 1e-12, "0.exp_avg_sq");
    EXPECT_EQ(scalar_named(state, "0.step"), 5);
    expect_all_near(params[1].data(), ref.p1, 1e-12, "p1");
    expect_all_near(tensor_named(state, "1.exp_avg").data(), ref.exp_avg1, 1e-12, "1.exp_avg");
    expect_all_near(tensor_named(state, "1.exp_avg_sq").data(), ref.exp_avg_sq1, 1e-12, "1.exp_avg_sq");
    EXPECT_EQ(scalar_named(state, "1.step"), 3);
  }
}

TEST(AdamWTest, SkipsParametersWithoutGrad) {
  Tensor a = Tensor::from({1, 2}, {2}, true);
  Tensor b = Tensor::from({3}, {1}, true);
  AdamW opt({a, b}, {.lr = 0.5, .weight_decay = 0.1});
  for (int k = 0; k < 2; ++k) {
    set_grad(a, {1, -1});
    opt.step();
  }
  EXPECT_EQ(b.to_vector(), (std::vector<double>{3}));  // not even decayed
  StateDict state = opt.state_dict();
  EXPECT_EQ(state.tensors.size(), 2u);  // only parameter 0 has state
  EXPECT_EQ(scalar_named(state, "0.step"), 2);
  EXPECT_THROW(scalar_named(state, "1.step"), std::out_of_range);
  // b's first step with a grad is a first step (bias correction of step 1),
  // although a is at its third: p = 3·(1 − 0.05) − 0.5·sign(g).
  a.zero_grad();
  set_grad(b, {-4});
  opt.step();
  EXPECT_NEAR(b.data()[0], 3 * 0.95 + 0.5, 1e-7);
  state = opt.state_dict();
  EXPECT_EQ(scalar_named(state, "0.step"), 2);
  EXPECT_EQ(scalar_named(state, "1.step"), 1);
}

TEST(AdamWTest, StateDictNamesShapesAndBytes) {
  Tensor a = Tensor::zeros({2, 3}, true);
  Tensor b = Tensor::zeros({4}, true);
  AdamW opt({a, b});
  EXPECT_TRUE(opt.state_dict().tensors.empty());  // allocated at the first step
  EXPECT_EQ(opt.state_dict().bytes(), 0u);
  set_grad(a, std::vector<double>(6, 1.0));
  set_grad(b, std::vector<double>(4, 1.0));
  opt.step();
  const StateDict state = opt.state_dict();
  ASSERT_EQ(state.tensors.size(), 4u);
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"0.exp_avg", {2, 3}}, {"0.exp_avg_sq", {2, 3}}, {"1.exp_avg", {4}}, {"1.exp_avg_sq", {4}}};
  for (std::size_t t = 0; t < expected.size(); ++t) {
    EXPECT_EQ(state.tensors[t].first, expected[t].first);
    EXPECT_EQ(state.tensors[t].second.shape(), expected[t].second);
  }
  ASSERT_EQ(state.scalars.size(), 2u);
  EXPECT_EQ(state.scalars[0], (std::pair<std::string, double>{"0.step", 1}));
  EXPECT_EQ(state.scalars[1], (std::pair<std::string, double>{"1.step", 1}));
  EXPECT_EQ(state.bytes(), 8u * 2u * 10u);  // two moments per parameter element
  // The dict shares the optimizer's arrays: the next step shows through it.
  const double m_before = state.tensors[0].second.data()[0];
  opt.step();
  EXPECT_NE(state.tensors[0].second.data()[0], m_before);
  EXPECT_TRUE(state.tensors[0].second.same(tensor_named(opt.state_dict(), "0.exp_avg")));
}

TEST(AdamWTest, StateDictRoundTripStepsIdentically) {
  // Parameter 2 never gets a grad before the copy, so it has no state to carry.
  Tensor a = Tensor::from({1, -2, 3}, {3}, true);
  Tensor b = Tensor::from({0.5, 0.25}, {2}, true);
  Tensor c = Tensor::from({7}, {1}, true);
  const AdamWOptions options{.lr = 0.01, .betas = {0.8, 0.95}, .eps = 1e-6, .weight_decay = 0.1};
  AdamW first({a, b, c}, options);
  for (int k = 0; k < 2; ++k) {
    set_grad(a, {0.3 * k - 1, 0.7, 1.1 * k});
    set_grad(b, {-0.2, 0.9 - k});
    first.step();
  }
  Tensor a2 = a.clone().set_requires_grad(true);
  Tensor b2 = b.clone().set_requires_grad(true);
  Tensor c2 = c.clone().set_requires_grad(true);
  AdamW second({a2, b2, c2}, options);
  second.load_state_dict(first.state_dict());
  EXPECT_EQ(second.state_dict().tensors.size(), 4u);
  EXPECT_FALSE(tensor_named(second.state_dict(), "0.exp_avg").same(tensor_named(first.state_dict(), "0.exp_avg")));
  for (int k = 0; k < 3; ++k) {
    for (const auto& [x, y, z] : {std::tuple{a, b, c}, std::tuple{a2, b2, c2}}) {
      set_grad(x, {0.1 * k, -0.6, 1.3});
      set_grad(y, {k - 0.5, 0.4});
      set_grad(z, {0.5 * k + 0.1});
    }
    first.step();
    second.step();
  }
  EXPECT_EQ(a.to_vector(), a2.to_vector());
  EXPECT_EQ(b.to_vector(), b2.to_vector());
  EXPECT_EQ(c.to_vector(), c2.to_vector());
  EXPECT_EQ(scalar_named(second.state_dict(), "2.step"), 3);
}

TEST(AdamWTest, LoadingReplacesTheWholeState) {
  // As PyTorch: a parameter absent from the dict starts afresh.
  Tensor a = Tensor::from({1}, {1}, true);
  AdamW opt({a});
  set_grad(a, {1});
  opt.step();
  opt.load_state_dict(StateDict{});
  EXPECT_TRUE(opt.state_dict().tensors.empty());
}

StateDict stepped_state(AdamW& opt, const Tensor& w) {
  set_grad(w, std::vector<double>(w.numel(), 1.0));
  opt.step();
  StateDict state = opt.state_dict();
  // Copies, so editing the dict cannot touch the optimizer.
  for (auto& [name, t] : state.tensors) t = t.clone();
  return state;
}

TEST(AdamWTest, LoadStateDictRejectsMissingNames) {
  Tensor w = Tensor::zeros({2, 3}, true);
  AdamW opt({w});
  StateDict state = stepped_state(opt, w);
  state.tensors.erase(state.tensors.begin() + 1);  // 0.exp_avg_sq
  state.scalars.clear();
  EXPECT_THROW_WITH(opt.load_state_dict(state), std::invalid_argument,
                    "AdamW::load_state_dict: missing 0.exp_avg_sq, 0.step");
}

TEST(AdamWTest, LoadStateDictRejectsUnexpectedNames) {
  Tensor w = Tensor::zeros({2, 3}, true);
  AdamW opt({w});
  StateDict state = stepped_state(opt, w);
  state.tensors.emplace_back("1.exp_avg", Tensor::zeros({2, 3}));          // no parameter 1
  state.tensors.emplace_back("0.momentum_buffer", Tensor::zeros({2, 3}));  // not AdamW's
  state.tensors.emplace_back("exp_avg", Tensor::zeros({2, 3}));            // no index
  state.scalars.emplace_back("0.lr", 0.1);
  EXPECT_THROW_WITH(opt.load_state_dict(state), std::invalid_argument,
                    "unexpected 1.exp_avg, 0.momentum_buffer, exp_avg, 0.lr (names are "
                    "<i>.{exp_avg, exp_avg_sq, step} for i < 1)");
}

TEST(AdamWTest, LoadStateDictRejectsDuplicatesAndWrongShapes) {
  Tensor w = Tensor::zeros({2, 3}, true);
  AdamW opt({w});
  StateDict state = stepped_state(opt, w);
  state.tensors.emplace_back("0.exp_avg", Tensor::zeros({2, 3}));
  EXPECT_THROW_WITH(opt.load_state_dict(state), std::invalid_argument, "duplicate 0.exp_avg");
  state.tensors.pop_back();
  state.tensors[1].second = Tensor::zeros({3, 2});
  EXPECT_THROW_WITH(opt.load_state_dict(state), std::invalid_argument,
                    "0.exp_avg_sq has shape [3, 2] but parameter 0 has shape [2, 3]");
}

TEST(AdamWTest, LoadStateDictRejectsAFractionalStep) {
  Tensor w = Tensor::zeros({2}, true);
  AdamW opt({w});
  StateDict state = stepped_state(opt, w);
  state.scalars[0].second = 1.5;
  EXPECT_THROW_WITH(opt.load_state_dict(state), std::invalid_argument,
                    "AdamW::load_state_dict: 0.step must be a whole number >= 0 (got 1.5)");
}

TEST(AdamWTest, FailedLoadLeavesTheStateAsItWas) {
  Tensor w = Tensor::zeros({2}, true);
  AdamW opt({w});
  StateDict good = stepped_state(opt, w);
  StateDict bad = good;
  bad.tensors[0].second = Tensor::full({2}, 42.0);
  bad.scalars[0].second = -1;
  EXPECT_THROW(opt.load_state_dict(bad), std::invalid_argument);
  const StateDict now = opt.state_dict();
  EXPECT_EQ(now.tensors[0].second.to_vector(), good.tensors[0].second.to_vector());
  EXPECT_EQ(now.scalars[0].second, 1);
}

// Element by element, the decay of a no_decay range is exactly that of an
// AdamW with weight_decay 0 (PyTorch's second parameter group), and the
// rest that of the decaying one, over three steps of changing gradients.
TEST(AdamWTest, NoDecayRangesStepAsTheirOwnGroup) {
  const AdamWOptions decaying{.lr = 0.1, .betas = {0.9, 0.99}, .eps = 1e-8, .weight_decay = 0.5};
  AdamWOptions plain = decaying;
  plain.weight_decay = 0;
  const auto values = [](int index) {
    std::vector<double> v(10);
    for (int j = 0; j < 10; ++j) v[j] = reference_initial(index, j);
    return v;
  };
  Tensor mixed = Tensor::from(values(0), {10}, true), second = Tensor::from(values(1), {10}, true);
  Tensor all = Tensor::from(values(0), {10}, true), none = Tensor::from(values(0), {10}, true);
  Tensor second_all = Tensor::from(values(1), {10}, true);
  AdamW opt({mixed, second}, decaying, {{{0, 2}, {5, 7}, {9, 10}}});
  AdamW with_decay({all, second_all}, decaying), without_decay({none}, plain);
  for (int k = 0; k < 3; ++k) {
    std::vector<double> g(10);
    for (int j = 0; j < 10; ++j) g[j] = reference_gradient(0, k, j);
    for (const Tensor* w : {&mixed, &all, &none}) set_grad(*w, g);
    for (int j = 0; j < 10; ++j) g[j] = reference_gradient(1, k, j);
    for (const Tensor* w : {&second, &second_all}) set_grad(*w, g);
    opt.step();
    with_decay.step();
    without_decay.step();
  }
  const std::vector<bool> skips = {1, 1, 0, 0, 0, 1, 1, 0, 0, 1};
  for (std::size_t j = 0; j < 10; ++j) {
    EXPECT_EQ(mixed.data()[j], (skips[j] ? none : all).data()[j]) << j;
    EXPECT_NE(all.data()[j], none.data()[j]) << j << ": the decay must show";
  }
  EXPECT_TRUE(std::equal(second.data().begin(), second.data().end(), second_all.data().begin()))
      << "a parameter past the list decays whole";
}

TEST(AdamWTest, RejectsBadNoDecayRangesNamingThem) {
  Tensor w = Tensor::zeros({4}, true);
  EXPECT_THROW_WITH(AdamW({w}, {}, {{}, {}}), std::invalid_argument, "no_decay lists 2 parameters, but there are 1");
  EXPECT_THROW_WITH(AdamW({w}, {}, {{{2, 5}}}), std::invalid_argument,
                    "no_decay range [2, 5) of parameter 0 (4 elements) must be non-empty, ascending and inside it");
  EXPECT_THROW_WITH(AdamW({w}, {}, {{{1, 1}}}), std::invalid_argument, "range [1, 1)");
  EXPECT_THROW_WITH(AdamW({w}, {}, {{{0, 2}, {1, 3}}}), std::invalid_argument, "range [1, 3)");
  EXPECT_THROW_WITH(AdamW::factory({}, {{{3, 2}}})({w}), std::invalid_argument, "range [3, 2)");
}

// A schedule sets the lr between steps: the hand example's lr 0.5 set on
// an AdamW made with another, then lr 0, which moves nothing (no decay).
TEST(AdamWTest, SetLrChangesTheNextStep) {
  Tensor w = hand_example_leaf();
  AdamW opt({w}, {.lr = 0.1, .weight_decay = 0});
  opt.set_lr(0.5);
  EXPECT_EQ(opt.lr(), 0.5);
  EXPECT_EQ(opt.options().lr, 0.5);
  opt.step();
  expect_all_near(w.data(), kHandExampleAfterOneStep, 1e-7, "w");
  const std::vector<double> after_one = w.to_vector();
  opt.set_lr(0);
  opt.step();
  EXPECT_EQ(w.to_vector(), after_one);
}

TEST(AdamWTest, RejectsNegativeLr) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(AdamW({w}, {.lr = -1}), std::invalid_argument, "AdamW: lr must be >= 0 (got -1)");
  EXPECT_THROW_WITH(AdamW({w}, {.lr = std::nan("")}), std::invalid_argument, "AdamW: lr must be >= 0 (got nan)");
}

TEST(AdamWTest, RejectsNegativeEps) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(AdamW({w}, {.eps = -1e-8}), std::invalid_argument, "AdamW: eps must be >= 0 (got -1e-08)");
}

TEST(AdamWTest, RejectsBetasOutsideZeroToOne) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(AdamW({w}, {.betas = {1.0, 0.999}}), std::invalid_argument,
                    "AdamW: betas.first must be in [0, 1) (got 1)");
  EXPECT_THROW_WITH(AdamW({w}, {.betas = {-0.1, 0.999}}), std::invalid_argument,
                    "AdamW: betas.first must be in [0, 1) (got -0.1)");
  EXPECT_THROW_WITH(AdamW({w}, {.betas = {0.9, 1.5}}), std::invalid_argument,
                    "AdamW: betas.second must be in [0, 1) (got 1.5)");
  EXPECT_THROW_WITH(AdamW({w}, {.betas = {0.9, -1e-3}}), std::invalid_argument,
                    "AdamW: betas.second must be in [0, 1) (got -0.001)");
}

TEST(AdamWTest, RejectsNegativeWeightDecay) {
  Tensor w = Tensor::zeros({1}, true);
  EXPECT_THROW_WITH(AdamW({w}, {.weight_decay = -0.01}), std::invalid_argument,
                    "AdamW: weight_decay must be >= 0 (got -0.01)");
}

TEST(AdamWTest, FactoryCarriesTheHyperparameters) {
  auto make = AdamW::factory({.lr = 0.5, .weight_decay = 0});
  Tensor w = hand_example_leaf();
  std::unique_ptr<Optimizer> opt = make({w});
  const auto* adamw = dynamic_cast<const AdamW*>(opt.get());
  ASSERT_NE(adamw, nullptr);
  EXPECT_EQ(adamw->options().lr, 0.5);
  EXPECT_EQ(adamw->options().weight_decay, 0);
  EXPECT_EQ(adamw->options().betas, (std::pair<double, double>{0.9, 0.999}));
  // With lr 1e-3 and decay 1e-2 every entry would move by about 1e-3, not 0.5.
  opt->step();
  expect_all_near(w.data(), kHandExampleAfterOneStep, 1e-7, "w");
}

TEST(AdamWTest, FactoryRejectsBadOptionsAtOnce) {
  EXPECT_THROW_WITH(AdamW::factory({.betas = {0.9, 1.0}}), std::invalid_argument,
                    "AdamW: betas.second must be in [0, 1) (got 1)");
}

TEST(AdamWTest, ZeroGradDropsGrads) {
  Tensor w = hand_example_leaf();
  AdamW opt({w});
  opt.zero_grad();
  EXPECT_TRUE(w.grad().empty());
  opt.step();  // nothing to do: no grad, no state
  EXPECT_TRUE(opt.state_dict().tensors.empty());
  EXPECT_EQ(w.data()[9], 9);
}

}  // namespace
}  // namespace tinyllm::optim
