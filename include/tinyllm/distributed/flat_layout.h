// FlatLayout: where each parameter lies in the flat vector (docs/ZERO.md's
// w ∈ R^n: every parameter end to end in parameters() order), and which
// part of each a range of it, a rank's chunk, holds. Every walk over the
// flat vector's offsets asks it (the flat copies and views, the buckets,
// bitwise mode's sums, ZeRO's groups, a checkpoint's regions, AdamW's
// state and weight decay by range), so that flattening and unflattening
// cannot disagree on the order (pitfall 9 in docs/ZERO.md) anywhere but
// here.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "tinyllm/tensor/tensor.h"

namespace tinyllm::dist {

// Parameter `index` (which starts at `begin` of the flat vector) meets a
// range at [first, last), in the flat vector's coordinates.
struct Overlap {
  std::size_t index = 0;
  std::size_t begin = 0;
  std::size_t first = 0, last = 0;
};

class FlatLayout {
 public:
  FlatLayout() = default;
  explicit FlatLayout(const std::vector<Tensor>& params);
  explicit FlatLayout(std::span<const std::size_t> numels);

  std::size_t size() const { return offsets_.size() - 1; }  // parameters
  std::size_t numel() const { return offsets_.back(); }     // n
  // Where parameter i starts; begin(size()) is n, so parameters
  // [first, last) lie at [begin(first), begin(last)).
  std::size_t begin(std::size_t i) const { return offsets_[i]; }
  std::size_t numel(std::size_t i) const { return offsets_[i + 1] - offsets_[i]; }
  // The parameters that meet [a, b), in order, each with its part of it.
  std::vector<Overlap> overlaps(std::size_t a, std::size_t b) const;

 private:
  std::vector<std::size_t> offsets_{0};  // size() + 1 of them
};

}  // namespace tinyllm::dist
