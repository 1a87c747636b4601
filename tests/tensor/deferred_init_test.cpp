// Deferred initialisation: a tensor built under a DeferredInitGuard holds
// no values, and any range of the values it would have is made on demand,
// bit for bit those of an eager build.
#include "tinyllm/tensor/deferred_init.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/expect_throw.h"
#include "tinyllm/tensor/random.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm {
namespace {

std::vector<double> range_of(const Tensor& t, std::size_t begin, std::size_t count) {
  std::vector<double> out(count);
  initial_values(t, begin, out);
  return out;
}

TEST(DeferredInitTest, SkippingNormalsLeavesTheGeneratorAsDrawingThem) {
  for (int spare : {0, 1}) {
    for (std::size_t count = 0; count < 9; ++count) {
      Generator drawn(7), skipped(7);
      for (int i = 0; i < spare; ++i) drawn.normal(), skipped.normal();  // a pair's spare left waiting
      for (std::size_t i = 0; i < count; ++i) drawn.normal();
      skipped.skip_normals(count);
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(drawn.normal(), skipped.normal()) << "spare " << spare << ", count " << count;
    }
  }
}

TEST(DeferredInitTest, NormalRangesEqualAnEagerFillAndTheGeneratorMovesOn) {
  Generator eager_gen(11), deferred_gen(11);
  const Tensor eager = Tensor::empty({5, 7});
  normal_(eager, eager_gen, 0.5, 0.02);
  Tensor deferred;
  {
    DeferredInitGuard guard;
    deferred = Tensor::empty({5, 7});
    normal_(deferred, deferred_gen, 0.5, 0.02);
  }
  ASSERT_TRUE(is_deferred(deferred));
  EXPECT_EQ(eager_gen.normal(), deferred_gen.normal());  // the next tensor's draws start at the same place
  const std::vector<double> want(eager.data().begin(), eager.data().end());
  std::mt19937 pick(3);
  for (int trial = 0; trial < 50; ++trial) {
    const std::size_t begin = pick() % 36, count = pick() % (36 - begin);
    const std::vector<double> got = range_of(deferred, begin, count);
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], want[begin + i]) << "element " << begin + i;
  }
  materialize(deferred);
  EXPECT_FALSE(is_deferred(deferred));
  EXPECT_EQ(std::vector<double>(deferred.data().begin(), deferred.data().end()), want);
}

TEST(DeferredInitTest, FullZerosAndFromAreDeferredAndHoldNoStorage) {
  const std::size_t before = allocated_bytes();
  DeferredInitGuard guard;
  const Tensor ones = Tensor::full({1000}, 1.0, true), zeros = Tensor::zeros({1000});
  const Tensor given = Tensor::from({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(allocated_bytes(), before);
  EXPECT_TRUE(ones.requires_grad());
  EXPECT_EQ(range_of(ones, 998, 2), (std::vector<double>{1, 1}));
  EXPECT_EQ(range_of(zeros, 0, 3), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(range_of(given, 1, 3), (std::vector<double>{2, 3, 4}));
}

TEST(DeferredInitTest, TheGuardNestsAndEndsWithItsScope) {
  EXPECT_FALSE(deferred_init_enabled());
  {
    DeferredInitGuard outer;
    {
      DeferredInitGuard inner;
      EXPECT_TRUE(deferred_init_enabled());
    }
    EXPECT_TRUE(deferred_init_enabled());
  }
  EXPECT_FALSE(deferred_init_enabled());
  EXPECT_FALSE(is_deferred(Tensor::zeros({2})));
}

TEST(DeferredInitTest, MisuseIsRefusedByName) {
  Tensor t, blank;
  {
    DeferredInitGuard guard;
    t = Tensor::zeros({2, 3});
    blank = Tensor::empty({4});
  }
  EXPECT_THROW_WITH(t.data(), std::invalid_argument, "deferred (built under a DeferredInitGuard)");
  std::vector<double> out(2);
  EXPECT_THROW_WITH(initial_values(t, 5, out), std::out_of_range, "elements [5, 7) lie beyond this [2, 3] tensor's 6");
  EXPECT_THROW_WITH(initial_values(Tensor::zeros({3}), 0, out), std::invalid_argument, "is not deferred");
  EXPECT_THROW_WITH(materialize(blank), std::logic_error, "fill it with normal_ or full");
  EXPECT_THROW_WITH(set_deferred_init(t, nullptr), std::invalid_argument, "must not be empty");
}

TEST(DeferredInitTest, AllocatedBytesFollowTheLiveStorages) {
  reset_max_allocated_bytes();
  const std::size_t before = allocated_bytes();
  {
    const Tensor a = Tensor::zeros({1000});
    EXPECT_EQ(allocated_bytes(), before + 8000);
  }
  EXPECT_EQ(allocated_bytes(), before);
  EXPECT_GE(max_allocated_bytes(), before + 8000);
  reset_max_allocated_bytes();
  EXPECT_EQ(max_allocated_bytes(), before);
}

}  // namespace
}  // namespace tinyllm
