#include "tinyllm/distributed/flat_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include "tinyllm/distributed/chunk.h"

namespace tinyllm::dist {
namespace {

std::vector<std::size_t> begins(const FlatLayout& layout) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i <= layout.size(); ++i) out.push_back(layout.begin(i));
  return out;
}

// Parameters of 3, 0, 5 and 2 values: end to end in list order.
TEST(FlatLayoutTest, ParametersLieEndToEndInListOrder) {
  const std::vector<std::size_t> numels{3, 0, 5, 2};
  const FlatLayout layout(numels);
  EXPECT_EQ(layout.size(), 4u);
  EXPECT_EQ(layout.numel(), 10u);
  EXPECT_EQ(begins(layout), (std::vector<std::size_t>{0, 3, 3, 8, 10}));
  EXPECT_EQ(layout.numel(2), 5u);
  const FlatLayout of_tensors({Tensor::zeros({3}), Tensor::zeros({0}), Tensor::zeros({5}), Tensor::zeros({1, 2})});
  EXPECT_EQ(begins(of_tensors), begins(layout));
}

TEST(FlatLayoutTest, ARangeMeetsThePartsOfTheParametersInIt) {
  const std::vector<std::size_t> numels{3, 0, 5, 2};
  const FlatLayout layout(numels);
  const std::vector<Overlap> parts = layout.overlaps(2, 9);
  ASSERT_EQ(parts.size(), 3u);  // the empty parameter meets nothing
  EXPECT_EQ(parts[0].index, 0u);
  EXPECT_EQ(parts[0].begin, 0u);
  EXPECT_EQ(parts[0].first, 2u);
  EXPECT_EQ(parts[0].last, 3u);
  EXPECT_EQ(parts[1].index, 2u);
  EXPECT_EQ(parts[1].first, 3u);
  EXPECT_EQ(parts[1].last, 8u);
  EXPECT_EQ(parts[2].index, 3u);
  EXPECT_EQ(parts[2].begin, 8u);
  EXPECT_EQ(parts[2].first, 8u);
  EXPECT_EQ(parts[2].last, 9u);
  EXPECT_TRUE(layout.overlaps(4, 4).empty());
  EXPECT_TRUE(layout.overlaps(10, 10).empty());
  EXPECT_TRUE(FlatLayout().overlaps(0, 0).empty());
}

// Over random layouts and worlds: the ranks' chunks meet every value of
// every parameter exactly once, in order.
TEST(FlatLayoutTest, TheChunksMeetEveryValueOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> numels(1 + rng() % 8);
    for (std::size_t& k : numels) k = rng() % 6;
    const FlatLayout layout(numels);
    const int p = 1 + static_cast<int>(rng() % 9);
    std::vector<int> seen(layout.numel(), 0);
    std::size_t next = 0;
    for (int r = 0; r < p; ++r) {
      const auto [a, b] = chunk_bounds(layout.numel(), p, r);
      for (const Overlap& o : layout.overlaps(a, b)) {
        ASSERT_EQ(o.begin, layout.begin(o.index));
        ASSERT_LE(o.begin, o.first);
        ASSERT_LE(o.last, o.begin + numels[o.index]);
        ASSERT_EQ(o.first, next) << "trial " << trial << " rank " << r;
        for (std::size_t i = o.first; i < o.last; ++i) ++seen[i];
        next = o.last;
      }
    }
    EXPECT_EQ(next, layout.numel());
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(layout.numel()));
  }
}

}  // namespace
}  // namespace tinyllm::dist
