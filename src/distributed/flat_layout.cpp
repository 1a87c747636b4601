#include "tinyllm/distributed/flat_layout.h"

#include <algorithm>

namespace tinyllm::dist {

FlatLayout::FlatLayout(const std::vector<Tensor>& params) {
  offsets_.reserve(params.size() + 1);
  for (const Tensor& p : params) offsets_.push_back(offsets_.back() + p.numel());
}

FlatLayout::FlatLayout(std::span<const std::size_t> numels) {
  offsets_.reserve(numels.size() + 1);
  for (std::size_t numel : numels) offsets_.push_back(offsets_.back() + numel);
}

std::vector<Overlap> FlatLayout::overlaps(std::size_t a, std::size_t b) const {
  std::vector<Overlap> out;
  // The first parameter that ends past a: offsets_ is sorted.
  const auto after = std::upper_bound(offsets_.begin() + 1, offsets_.end(), a);
  for (std::size_t i = static_cast<std::size_t>(after - offsets_.begin()) - 1; i < size() && begin(i) < b; ++i) {
    const std::size_t first = std::max(a, begin(i)), last = std::min(b, begin(i + 1));
    if (first < last) out.push_back({.index = i, .begin = begin(i), .first = first, .last = last});
  }
  return out;
}

}  // namespace tinyllm::dist
