// chunk_bounds: how a flat vector of n values is split among p ranks. Every
// collective and every ZeRO shard uses this one layout, so a rank's chunk
// means the same thing everywhere. A Window is a stretch of that vector (a
// ZeRO bucket or unit); each rank's part of it is where it meets its chunk.
#pragma once

#include <cstddef>
#include <utility>

namespace tinyllm::dist {

// Rank r's chunk [a, b) of n values over p ranks: the first n % p chunks are
// one longer, so (10, 4) gives 3, 3, 2, 2 and n < p leaves empty chunks at
// the end. Throws std::invalid_argument unless p >= 1 and 0 <= r < p.
std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, int p, int r);

// A window [begin, begin + length) of a vector of n values laid out by chunk_bounds(n, p, ·).
struct Window {
  std::size_t n = 0;
  std::size_t begin = 0;
  std::size_t length = 0;
};

// Rank r's part of the window, [first, last) in the full vector's indices (first == last when empty).
// The parts tile the window in rank order: (n 10, p 4) and [2, 7) give [2, 3), [3, 6), [6, 7), [7, 7).
// Throws std::invalid_argument when the window does not lie inside [0, n), or as chunk_bounds does.
std::pair<std::size_t, std::size_t> window_part(const Window& w, int p, int r);

}  // namespace tinyllm::dist
