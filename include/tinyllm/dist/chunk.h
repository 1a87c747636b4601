// chunk_bounds: how a flat vector of n values is split among p ranks. Every
// collective and every ZeRO shard uses this one layout, so a rank's chunk
// means the same thing everywhere.
#pragma once

#include <cstddef>
#include <utility>

namespace tinyllm::dist {

// Rank r's chunk [a, b) of n values over p ranks: the first n % p chunks are
// one longer, so (10, 4) gives 3, 3, 2, 2 and n < p leaves empty chunks at
// the end. Throws std::invalid_argument unless p >= 1 and 0 <= r < p.
std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, int p, int r);

}  // namespace tinyllm::dist
