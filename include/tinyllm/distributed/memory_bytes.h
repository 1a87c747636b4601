// MemoryBytes: the model state one rank holds, in bytes, split as the ZeRO
// paper splits it (docs/ZERO.md's byte table): parameters, gradients,
// optimizer state. ZeroOptimizer::memory_bytes() measures it; the trainer's
// predictions (train/metrics.h) compute it without building anything.
#pragma once

#include <cstddef>

namespace tinyllm::dist {

struct MemoryBytes {
  std::size_t params = 0;
  std::size_t grads = 0;
  std::size_t optimizer = 0;
  std::size_t total() const { return params + grads + optimizer; }
};

}  // namespace tinyllm::dist
