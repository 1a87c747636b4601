#include "tinyllm/tensor/autograd.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

#include "../support/check.h"

namespace tinyllm::autograd {
namespace {

thread_local bool grad_enabled = true;
// The callbacks of the backward running on this thread, if one is.
thread_local std::vector<std::function<void()>>* callbacks = nullptr;

// The non-leaf tensors that `root` depends on, each after every tensor it
// depends on (post-order of a depth-first search over the ordered inputs).
std::vector<Tensor> topological_order(const Tensor& root) {
  std::vector<Tensor> order;
  std::unordered_set<const TensorImpl*> visited;  // membership only; the order comes from the inputs
  struct Frame {
    Tensor tensor;
    std::size_t next_input = 0;
  };
  std::vector<Frame> stack{{root}};
  visited.insert(&root.impl());
  while (!stack.empty()) {
    Frame& frame = stack.back();
    const Node& node = *frame.tensor.grad_fn();
    if (!node.backward) {
      throw std::invalid_argument(
          "Tensor::backward: the graph was already freed by an earlier backward (tinyllm keeps no graph "
          "after backward; run the forward again)");
    }
    if (frame.next_input < node.inputs.size()) {
      const Tensor& input = node.inputs[frame.next_input++];
      if (input.grad_fn() && visited.insert(&input.impl()).second) stack.push_back({input});
      continue;
    }
    order.push_back(std::move(frame.tensor));
    stack.pop_back();
  }
  return order;
}

}  // namespace

Node::~Node() {
  // Each tensor whose last handle is ours hands its node's inputs to this
  // loop before it dies, so its own destruction never recurses. Backward
  // functions hold handles to the inputs too; they go first.
  std::vector<Tensor> pending = std::move(inputs);
  backward = nullptr;
  while (!pending.empty()) {
    Tensor tensor = std::move(pending.back());
    pending.pop_back();
    if (tensor.use_count() == 1 && tensor.grad_fn() && tensor.grad_fn().use_count() == 1) {
      Node& node = *tensor.grad_fn();
      std::move(node.inputs.begin(), node.inputs.end(), std::back_inserter(pending));
      node.inputs.clear();
      node.backward = nullptr;
    }
  }
}

bool is_grad_enabled() { return grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(std::exchange(grad_enabled, false)) {}

NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }

void record(Tensor& out, std::vector<Tensor> inputs, BackwardFn backward) {
  // Undefined inputs (an absent bias) take no part in the graph.
  std::erase_if(inputs, [](const Tensor& input) { return !input.defined(); });
  bool any = false;
  for (const Tensor& input : inputs) any = any || input.requires_grad();
  if (!any || !is_grad_enabled()) return;
  std::vector<std::uint64_t> versions;
  versions.reserve(inputs.size());
  for (const Tensor& input : inputs) versions.push_back(input.impl().version);
  TensorImpl& impl = out.impl();
  impl.requires_grad = true;
  impl.grad_fn =
      std::make_shared<Node>(Node{std::move(inputs), std::move(backward), std::move(versions), impl.version});
}

namespace {

void run_hooks(const Tensor& tensor) {
  if (const auto& hooks = tensor.impl().hooks; hooks && !hooks->empty()) hooks->run(tensor);
}

// For each node of `order` (indexed by execution step), the leaves with
// hooks whose last contribution that node adds: their grads are final once
// it has run.
std::vector<std::vector<Tensor>> leaves_final_after(const std::vector<Tensor>& order) {
  std::vector<std::vector<Tensor>> final_after(order.size());
  std::unordered_set<const TensorImpl*> seen;
  // Walking the execution backwards, the first node met that uses a leaf is the last to run.
  for (std::size_t step = 0; step < order.size(); ++step) {
    for (const Tensor& input : order[step].grad_fn()->inputs) {
      const auto& hooks = input.impl().hooks;
      if (input.is_leaf() && hooks && !hooks->empty() && seen.insert(&input.impl()).second) {
        final_after[order.size() - 1 - step].push_back(input);
      }
    }
  }
  return final_after;
}

// Refuses, before any gradient moves, a graph whose ops would compute with
// values changed since their forward.
void check_versions(const std::vector<Tensor>& order) {
  const auto refuse = [](const Tensor& t, std::string role, std::uint64_t recorded) {
    throw std::invalid_argument(fmt::format(
        "Tensor::backward: {}, a {} tensor, was modified in place after the forward (it is at version {}, the op "
        "saw version {}); run the forward again after changing it",
        role, to_string(t.shape()), t.impl().version, recorded));
  };
  for (const Tensor& tensor : order) {
    const Node& node = *tensor.grad_fn();
    if (tensor.impl().version != node.output_version) refuse(tensor, "an op's output", node.output_version);
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i].impl().version != node.input_versions[i]) {
        refuse(node.inputs[i], fmt::format("input {} of an op", i), node.input_versions[i]);
      }
    }
  }
}

// Backwards on several threads may share leaves (one model, each thread
// with its own batch), and a node adds into its inputs' grads: it holds the
// locks of the leaves it adds into, taken in one global order. Locks are
// striped by address, so no tensor carries a mutex.
class LeafLocks {
 public:
  explicit LeafLocks(const Node& node) {
    for (const Tensor& input : node.inputs) {
      if (input.is_leaf() && input.requires_grad()) held_.push_back(&stripe(input.impl()));
    }
    std::sort(held_.begin(), held_.end());
    held_.erase(std::unique(held_.begin(), held_.end()), held_.end());
    for (std::mutex* m : held_) m->lock();
  }
  ~LeafLocks() {
    for (std::mutex* m : held_) m->unlock();
  }
  LeafLocks(const LeafLocks&) = delete;
  LeafLocks& operator=(const LeafLocks&) = delete;

 private:
  static std::mutex& stripe(const TensorImpl& impl) {
    static std::array<std::mutex, 64> stripes;
    return stripes[(reinterpret_cast<std::uintptr_t>(&impl) >> 4) % stripes.size()];
  }
  std::vector<std::mutex*> held_;
};

void run_graph(const Tensor& root) {
  if (!root.grad_fn()) {  // a leaf: the seed already sits in its grad
    run_hooks(root);
    return;
  }
  std::vector<Tensor> order = topological_order(root);
  check_versions(order);
  const std::vector<std::vector<Tensor>> final_after = leaves_final_after(order);
  // Reverse post-order: a tensor runs after every consumer has added its
  // share. Its grad and saved tensors are dropped right after, which keeps
  // the peak memory of backward near that of forward.
  for (std::size_t step = 0; step < order.size(); ++step) {
    const Tensor& tensor = order[order.size() - 1 - step];
    Node& node = *tensor.grad_fn();
    if (!tensor.grad().empty()) {
      run_hooks(tensor);
      const LeafLocks locks(node);
      node.backward(tensor);
    }
    node.backward = nullptr;
    node.inputs.clear();
    tensor.zero_grad();
    for (const Tensor& leaf : final_after[step]) run_hooks(leaf);
  }
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  TINYLLM_CHECK(callbacks != nullptr, "queue_callback outside backward");
  callbacks->push_back(std::move(fn));
}

void run_backward(const Tensor& root) {
  // A backward started from a hook keeps callbacks of its own.
  std::vector<std::function<void()>> queued;
  struct Restore {
    std::vector<std::function<void()>>* previous;
    ~Restore() { callbacks = previous; }
  } restore{std::exchange(callbacks, &queued)};
  run_graph(root);
  callbacks = restore.previous;
  for (std::size_t i = 0; i < queued.size(); ++i) queued[i]();
}

}  // namespace tinyllm::autograd
