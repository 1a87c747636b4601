#include "tinyllm/distributed/chunk.h"

#include <gtest/gtest.h>

#include <cstdint>

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

TEST(WindowPartTest, TenOverFourWindowTwoToSevenHandValues) {
  const Window w{10, 2, 5};
  EXPECT_EQ(window_part(w, 4, 0), Bounds(2, 3));
  EXPECT_EQ(window_part(w, 4, 1), Bounds(3, 6));
  EXPECT_EQ(window_part(w, 4, 2), Bounds(6, 7));
  EXPECT_EQ(window_part(w, 4, 3), Bounds(7, 7));
}

TEST(WindowPartTest, TheWholeVectorIsTheChunks) {
  for (int r = 0; r < 4; ++r) EXPECT_EQ(window_part({10, 0, 10}, 4, r), chunk_bounds(10, 4, r)) << "rank " << r;
}

TEST(WindowPartTest, AWindowInsideOneChunkIsThatRanksAlone) {
  const Window w{10, 4, 2};  // inside rank 1's [3, 6)
  EXPECT_EQ(window_part(w, 4, 0), Bounds(4, 4));
  EXPECT_EQ(window_part(w, 4, 1), Bounds(4, 6));
  EXPECT_EQ(window_part(w, 4, 2), Bounds(6, 6));
  EXPECT_EQ(window_part(w, 4, 3), Bounds(6, 6));
}

TEST(WindowPartTest, AnEmptyWindowHasEmptyParts) {
  for (int r = 0; r < 4; ++r) {
    auto [first, last] = window_part({10, 5, 0}, 4, r);
    EXPECT_EQ(first, last) << "rank " << r;
  }
  EXPECT_EQ(window_part({0, 0, 0}, 3, 2), Bounds(0, 0));
}

// Over many (n, p, window): the parts tile the window in rank order, and
// each is the window's overlap with that rank's chunk.
TEST(WindowPartTest, PartsTileTheWindowInRankOrder) {
  for (int p = 1; p <= 6; ++p) {
    for (std::size_t n = 0; n <= 13; ++n) {
      for (std::size_t begin = 0; begin <= n; ++begin) {
        for (std::size_t length = 0; begin + length <= n; ++length) {
          std::size_t next = begin;
          for (int r = 0; r < p; ++r) {
            auto [first, last] = window_part({n, begin, length}, p, r);
            auto [a, b] = chunk_bounds(n, p, r);
            ASSERT_EQ(first, next) << "n " << n << " p " << p << " window [" << begin << ", +" << length << ") r " << r;
            ASSERT_LE(first, last);
            for (std::size_t i = begin; i < begin + length; ++i) {
              ASSERT_EQ(first <= i && i < last, a <= i && i < b) << "index " << i;
            }
            next = last;
          }
          ASSERT_EQ(next, begin + length);
        }
      }
    }
  }
}

TEST(WindowPartTest, RejectsAWindowBeyondTheVector) {
  EXPECT_THROW_WITH(window_part({10, 8, 3}, 4, 0), std::invalid_argument,
                    "window at 8 of length 3 must lie inside the 10 values");
  EXPECT_THROW_WITH(window_part({10, 11, 0}, 4, 0), std::invalid_argument, "window at 11 of length 0");
  // begin + length would wrap around to 4, inside n, were it computed.
  EXPECT_THROW_WITH(window_part({10, 5, SIZE_MAX}, 4, 0), std::invalid_argument, "must lie inside the 10 values");
  EXPECT_THROW_WITH(window_part({10, 0, 10}, 4, 4), std::invalid_argument, "rank must be in [0, 4) (got 4)");
}

}  // namespace
}  // namespace tinyllm::dist
