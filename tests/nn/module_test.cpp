#include <gtest/gtest.h>
#include <tinyllm/nn/module.h>

#include "support/expect_throw.h"

namespace tinyllm::nn {
namespace {

class Leaf : public Module {
 public:
  explicit Leaf(std::size_t n) {
    a = register_parameter("a", Tensor::zeros({n}));
    b = register_parameter("b", Tensor::zeros({n, 2}));
  }
  Tensor a, b;
};

class Tree : public Module {
 public:
  Tree() {
    own = register_parameter("own", Tensor::zeros({1}));
    first = register_module("first", std::make_shared<Leaf>(2));
    list = register_module("list", std::make_shared<ModuleList>());
    list->push_back(std::make_shared<Leaf>(3));
    list->push_back(std::make_shared<Leaf>(4));
  }
  void add(std::string name) { register_parameter(std::move(name), Tensor::zeros({1})); }
  Tensor own;
  std::shared_ptr<Leaf> first;
  std::shared_ptr<ModuleList> list;
};

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : m.named_parameters()) names.push_back(name);
  return names;
}

TEST(ModuleTest, NamedParametersInRegistrationOrderWithDottedNames) {
  Tree tree;
  EXPECT_EQ(names_of(tree),
            (std::vector<std::string>{"own", "first.a", "first.b", "list.0.a", "list.0.b", "list.1.a", "list.1.b"}));
  const auto params = tree.parameters();
  ASSERT_EQ(params.size(), 7u);
  EXPECT_TRUE(params[1].same(tree.first->a));
  EXPECT_TRUE(params[6].same(tree.list->at<Leaf>(1).b));
  EXPECT_EQ(tree.num_parameters(), 1u + 2 + 4 + 3 + 6 + 4 + 8);
}

TEST(ModuleTest, RegisteredParametersRequireGrad) {
  Tree tree;
  for (const Tensor& p : tree.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(ModuleTest, ZeroGradDropsEveryGrad) {
  Tree tree;
  for (const Tensor& p : tree.parameters()) p.mutable_grad();
  tree.zero_grad();
  for (const Tensor& p : tree.parameters()) EXPECT_TRUE(p.grad().empty());
}

TEST(ModuleTest, RejectsBadNames) {
  Tree tree;
  EXPECT_THROW_WITH(tree.add("own"), std::invalid_argument, "'own' is already registered");
  EXPECT_THROW_WITH(tree.add("first"), std::invalid_argument, "'first' is already registered");
  EXPECT_THROW_WITH(tree.add("a.b"), std::invalid_argument, "without '.' (got 'a.b')");
  EXPECT_THROW_WITH(tree.add(""), std::invalid_argument, "non-empty");
}

}  // namespace
}  // namespace tinyllm::nn
