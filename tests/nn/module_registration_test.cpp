// Module's registrations beyond the first: a tensor under two names (tied
// weights), replacing and dropping a name, and state_dict / load_state_dict.
#include <gtest/gtest.h>
#include <tinyllm/nn/module.h>

#include "support/expect_throw.h"

namespace tinyllm::nn {
namespace {

class Table : public Module {
 public:
  Table() { weight = register_parameter("weight", Tensor::zeros({2, 3})); }
  Tensor weight;
};

// A head tied to its child's table, as GPT-2 ties lm_head to wte.
class TiedNet : public Module {
 public:
  TiedNet() {
    table = register_module("table", std::make_shared<Table>());
    head = register_parameter("head", table->weight);
    bias = register_parameter("bias", Tensor::zeros({2}));
  }
  // The protected registration, for the tests.
  using Module::replace_module;
  using Module::replace_parameter;
  using Module::unregister;
  std::shared_ptr<Table> table;
  Tensor head, bias;
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : named) names.push_back(name);
  return names;
}

TEST(ModuleTest, TiedTensorIsOneParameterUnderItsFirstName) {
  TiedNet net;
  EXPECT_EQ(names_of(net.named_parameters()), (std::vector<std::string>{"head", "bias"}));
  ASSERT_EQ(net.parameters().size(), 2u);
  EXPECT_TRUE(net.parameters()[0].same(net.table->weight));
  EXPECT_EQ(net.num_parameters(), 6u + 2);
}

TEST(ModuleTest, StateDictHasATiedTensorUnderEachName) {
  TiedNet net;
  const auto state = net.state_dict();
  EXPECT_EQ(names_of(state), (std::vector<std::string>{"head", "bias", "table.weight"}));
  EXPECT_TRUE(state[0].second.same(state[2].second));
}

TEST(ModuleTest, ReplaceKeepsTheNamesPlace) {
  TiedNet net;
  const Tensor wider = Tensor::zeros({4});
  net.replace_parameter("head", wider);
  EXPECT_EQ(names_of(net.named_parameters()), (std::vector<std::string>{"head", "bias", "table.weight"}));
  EXPECT_TRUE(net.parameters()[0].same(wider));
  EXPECT_TRUE(wider.requires_grad());
  auto other = std::make_shared<Table>();
  net.replace_module("table", other);
  EXPECT_TRUE(net.parameters()[2].same(other->weight));
  EXPECT_THROW_WITH(net.replace_parameter("table", Tensor::zeros({1})), std::invalid_argument,
                    "no parameter is registered as 'table'");
  EXPECT_THROW_WITH(net.replace_module("bias", other), std::invalid_argument, "no module is registered as 'bias'");
  EXPECT_THROW_WITH(net.replace_parameter("head", Tensor()), std::invalid_argument, "'head' is undefined");
}

TEST(ModuleTest, UnregisterDropsAParameterOrAChild) {
  TiedNet net;
  EXPECT_TRUE(net.unregister("table"));
  EXPECT_EQ(names_of(net.state_dict()), (std::vector<std::string>{"head", "bias"}));
  EXPECT_TRUE(net.unregister("head"));
  EXPECT_FALSE(net.unregister("head"));
  EXPECT_EQ(names_of(net.state_dict()), (std::vector<std::string>{"bias"}));
}

TEST(ModuleTest, LoadStateDictCopiesValuesInAndMovesTheVersion) {
  TiedNet net;
  const std::uint64_t version = net.bias.impl().version;
  net.load_state_dict({{"head", Tensor::full({2, 3}, 1.5)},
                       {"bias", Tensor::from({1, 2}, {2})},
                       {"table.weight", Tensor::full({2, 3}, 1.5)}});
  EXPECT_EQ(net.bias.to_vector(), (std::vector<double>{1, 2}));
  EXPECT_EQ(net.table->weight.to_vector(), std::vector<double>(6, 1.5));
  EXPECT_GT(net.bias.impl().version, version);
  net.load_state_dict(net.state_dict());  // each parameter onto itself
  EXPECT_EQ(net.bias.to_vector(), (std::vector<double>{1, 2}));
}

TEST(ModuleTest, LoadStateDictNamesEveryProblemAndCopiesNothing) {
  TiedNet net;
  EXPECT_THROW_WITH(net.load_state_dict({{"head", Tensor::full({2, 3}, 1.0)},
                                         {"bias", Tensor::full({3}, 1.0)},
                                         {"bias", Tensor::full({2}, 1.0)},
                                         {"extra", Tensor::zeros({1})}}),
                    std::invalid_argument,
                    "Module::load_state_dict: missing table.weight; unexpected extra; duplicate bias; bias has shape "
                    "[3] but the parameter has shape [2]");
  EXPECT_EQ(net.head.to_vector(), std::vector<double>(6, 0.0));
}

}  // namespace
}  // namespace tinyllm::nn
