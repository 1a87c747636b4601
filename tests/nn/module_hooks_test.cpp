// Forward hooks on modules: pre-hooks before a module's forward, hooks after
// it with its output, in the order the forward calls the modules.
#include <gtest/gtest.h>
#include <tinyllm/nn/gpt.h>
#include <tinyllm/tensor/autograd.h>

#include <string>
#include <vector>

#include "support/expect_throw.h"

namespace tinyllm::nn {
namespace {

GPT tiny_gpt() { return GPT({.vocab_size = 16, .block_size = 4, .n_layer = 3, .n_head = 2, .n_embd = 8}, 7); }

TEST(ModuleHookTest, BlocksRunTheirHooksInForwardOrder) {
  GPT model = tiny_gpt();
  std::vector<std::string> log;
  for (std::size_t i = 0; i < 3; ++i) {
    Block& block = model.h->at<Block>(i);
    block.register_forward_pre_hook([&log, i](const Module&) { log.push_back("pre " + std::to_string(i)); });
    block.register_forward_hook([&log, i](const Module&, const Tensor& out) {
      EXPECT_EQ(out.shape(), (Shape{1, 4, 8}));
      log.push_back("post " + std::to_string(i));
    });
  }
  model.register_forward_pre_hook([&](const Module& m) {
    EXPECT_EQ(&m, &model);
    log.push_back("gpt");
  });
  const std::vector<int> idx{1, 2, 3, 4};
  model.forward(idx, 1, 4);
  EXPECT_EQ(log, (std::vector<std::string>{"gpt", "pre 0", "post 0", "pre 1", "post 1", "pre 2", "post 2"}));
}

TEST(ModuleHookTest, HookSeesTheOutputTheCallerGets) {
  GPT model = tiny_gpt();
  Tensor seen;
  model.register_forward_hook([&](const Module&, const Tensor& out) { seen = out; });
  const std::vector<int> idx{1, 2, 3, 4};
  Tensor logits = model.forward(idx, 1, 4);
  EXPECT_TRUE(seen.same(logits));
}

TEST(ModuleHookTest, RunUnderNoGradAndCanBeRemoved) {
  GPT model = tiny_gpt();
  int pre = 0, post = 0;
  Block& block = model.h->at<Block>(1);
  RemovableHandle a = block.register_forward_pre_hook([&](const Module&) { ++pre; });
  RemovableHandle b = block.register_forward_hook([&](const Module&, const Tensor&) { ++post; });
  const std::vector<int> idx{1, 2, 3, 4};
  {
    autograd::NoGradGuard guard;
    model.forward(idx, 1, 4);
  }
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
  a.remove();
  b.remove();
  model.forward(idx, 1, 4);
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
}

TEST(ModuleHookTest, RejectsAnEmptyHook) {
  GPT model = tiny_gpt();
  EXPECT_THROW_WITH(model.register_forward_pre_hook(nullptr), std::invalid_argument, "the hook must not be empty");
  EXPECT_THROW_WITH(model.register_forward_hook(nullptr), std::invalid_argument, "the hook must not be empty");
}

}  // namespace
}  // namespace tinyllm::nn
