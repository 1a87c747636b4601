// Reverse-mode autograd, micrograd's algorithm on tensors: every op that
// sees an input requiring grad records a Node holding its inputs, in order,
// and a backward function beside its forward. backward() orders the nodes by
// a depth-first search over those ordered inputs (never a hash set, so the
// order of accumulation is the same on every run and every rank), runs each
// node once, and then frees the graph: nodes drop their saved tensors and
// the intermediate tensors their grads.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm::autograd {

// Reads out.grad() (and whatever the op saved) and adds into the inputs'
// mutable_grad(); it receives `out` rather than capturing it, which would
// make the node own itself.
using BackwardFn = std::function<void(const Tensor& out)>;

struct Node {
  // Releases a graph that is dropped without a backward iteratively, so a
  // chain of a million ops does not recurse a million frames deep.
  ~Node();

  std::vector<Tensor> inputs;
  BackwardFn backward;  // empty once the graph has been freed
  // Each input's TensorImpl::version when the op ran, and the output's.
  std::vector<std::uint64_t> input_versions;
  std::uint64_t output_version = 0;
};

// True unless a NoGradGuard is alive on this thread.
bool is_grad_enabled();

// While alive, ops record nothing (torch::NoGradGuard), e.g. for evaluation.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Whether an op on these inputs must record a node (undefined inputs, such
// as an absent bias, count as not requiring grad).
template <class... Tensors>
bool needs_grad(const Tensors&... inputs) {
  return is_grad_enabled() && (... || (inputs.defined() && inputs.requires_grad()));
}

// Makes `out` a non-leaf produced by `backward` from `inputs`. A no-op when
// no input requires grad or grad mode is off, so ops may always call it.
void record(Tensor& out, std::vector<Tensor> inputs, BackwardFn backward);

// Runs backward from `root`, whose grad buffer holds the seed, then the
// callbacks queued during it.
void run_backward(const Tensor& root);

// From a hook inside backward: runs fn once this backward has run every
// node and hook (PyTorch's Engine::queue_callback, by which its DDP reducer
// and FSDP wait for their reductions). Callbacks run in the order queued;
// a backward that throws drops its own. std::logic_error outside backward.
void queue_callback(std::function<void()> fn);

}  // namespace tinyllm::autograd
