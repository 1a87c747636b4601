// Deferred initialisation, as PyTorch's meta device and torchdistx's
// deferred_init do it: a model built under a DeferredInitGuard gets its
// shapes but no values, and each tensor remembers how its values are made
// (normal_ from a snapshot of the generator, full, a checkpoint's range).
// ZeroOptimizer then makes only its own chunk of every parameter, bit for
// bit the values of an eager build: at stage 3 no rank ever holds the whole
// model, and at stages 1 and 2 none holds it twice while it builds.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm {

// Writes elements [begin, begin + out.size()) of a tensor's values.
using InitFn = std::function<void(std::size_t begin, std::span<double> out)>;

// While one is alive on this thread, Tensor::empty, full and zeros make
// deferred tensors and normal_ records its draws instead of making them.
// Nests; ops are not meant to run under it.
class DeferredInitGuard {
 public:
  DeferredInitGuard();
  ~DeferredInitGuard();
  DeferredInitGuard(const DeferredInitGuard&) = delete;
  DeferredInitGuard& operator=(const DeferredInitGuard&) = delete;

 private:
  bool previous_;
};

bool deferred_init_enabled();

// True while t has a shape and a recipe but no values.
bool is_deferred(const Tensor& t);
// Drops t's values (if any) and makes it deferred with `init` as its recipe.
void set_deferred_init(const Tensor& t, InitFn init);
// Elements [begin, begin + out.size()) of a deferred t's values; std::out_of_range past its end.
void initial_values(const Tensor& t, std::size_t begin, std::span<double> out);
// Gives a deferred tensor its values and forgets the recipe; others are left alone.
void materialize(const Tensor& t);
void materialize(const std::vector<Tensor>& tensors);

}  // namespace tinyllm
