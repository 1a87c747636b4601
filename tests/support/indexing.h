// Row-major multi-index helpers for tests that check ops element by element.
#pragma once

#include <tinyllm/tensor/tensor.h>

#include <vector>

namespace tinyllm::testing {

// Row-major multi-index of flat position `flat` in `shape`.
inline std::vector<std::size_t> unravel(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

}  // namespace tinyllm::testing
