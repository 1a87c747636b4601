#include "tinyllm/dist/chunk.h"

#include <gtest/gtest.h>

#include "support/expect_throw.h"

namespace tinyllm::dist {
namespace {

using Bounds = std::pair<std::size_t, std::size_t>;

TEST(ChunkBoundsTest, TenOverFourIsThreeThreeTwoTwo) {
  EXPECT_EQ(chunk_bounds(10, 4, 0), Bounds(0, 3));
  EXPECT_EQ(chunk_bounds(10, 4, 1), Bounds(3, 6));
  EXPECT_EQ(chunk_bounds(10, 4, 2), Bounds(6, 8));
  EXPECT_EQ(chunk_bounds(10, 4, 3), Bounds(8, 10));
}

TEST(ChunkBoundsTest, FewerValuesThanRanksLeaveEmptyChunksAtTheEnd) {
  EXPECT_EQ(chunk_bounds(2, 4, 0), Bounds(0, 1));
  EXPECT_EQ(chunk_bounds(2, 4, 1), Bounds(1, 2));
  EXPECT_EQ(chunk_bounds(2, 4, 2), Bounds(2, 2));
  EXPECT_EQ(chunk_bounds(2, 4, 3), Bounds(2, 2));
  EXPECT_EQ(chunk_bounds(0, 3, 1), Bounds(0, 0));
}

// Over many (n, p): the chunks tile [0, n) in rank order, and lengths
// differ by at most one, longer ones first.
TEST(ChunkBoundsTest, ChunksTileTheVectorInRankOrder) {
  for (int p = 1; p <= 9; ++p) {
    for (std::size_t n = 0; n <= 40; ++n) {
      std::size_t next = 0, previous_length = n + 1;
      for (int r = 0; r < p; ++r) {
        auto [a, b] = chunk_bounds(n, p, r);
        ASSERT_EQ(a, next) << "n " << n << " p " << p << " r " << r;
        ASSERT_LE(b - a, previous_length);
        ASSERT_LE(b - a, n / p + 1);
        ASSERT_GE(b - a, n / p);
        previous_length = b - a;
        next = b;
      }
      ASSERT_EQ(next, n);
    }
  }
}

TEST(ChunkBoundsTest, RejectsABadWorldOrRank) {
  EXPECT_THROW_WITH(chunk_bounds(10, 0, 0), std::invalid_argument, "world size must be at least 1 (got 0)");
  EXPECT_THROW_WITH(chunk_bounds(10, 4, 4), std::invalid_argument, "rank must be in [0, 4) (got 4)");
  EXPECT_THROW_WITH(chunk_bounds(10, 4, -1), std::invalid_argument, "(got -1)");
}

}  // namespace
}  // namespace tinyllm::dist
