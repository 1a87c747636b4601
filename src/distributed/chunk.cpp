#include "tinyllm/distributed/chunk.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tinyllm::dist {

std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, int p, int r) {
  if (p < 1) throw std::invalid_argument("chunk_bounds: world size must be at least 1 (got " + std::to_string(p) + ")");
  if (r < 0 || r >= p) {
    throw std::invalid_argument("chunk_bounds: rank must be in [0, " + std::to_string(p) + ") (got " +
                                std::to_string(r) + ")");
  }
  const std::size_t ranks = static_cast<std::size_t>(p), rank = static_cast<std::size_t>(r);
  const std::size_t base = n / ranks, longer = n % ranks;
  const std::size_t a = rank * base + std::min(rank, longer);
  return {a, a + base + (rank < longer ? 1 : 0)};
}

std::pair<std::size_t, std::size_t> window_part(const Window& w, int p, int r) {
  // Written so that begin + length cannot overflow.
  if (w.begin > w.n || w.length > w.n - w.begin) {
    throw std::invalid_argument("window_part: window at " + std::to_string(w.begin) + " of length " +
                                std::to_string(w.length) + " must lie inside the " + std::to_string(w.n) + " values");
  }
  auto [a, b] = chunk_bounds(w.n, p, r);
  const std::size_t end = w.begin + w.length;
  return {std::clamp(a, w.begin, end), std::clamp(b, w.begin, end)};
}

}  // namespace tinyllm::dist
