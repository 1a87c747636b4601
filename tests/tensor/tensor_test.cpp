#include <gtest/gtest.h>
#include <tinyllm/tensor/storage.h>
#include <tinyllm/tensor/tensor.h>

#include <algorithm>
#include <memory>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "support/expect_throw.h"

namespace tinyllm {
namespace {

TEST(TensorTest, FromKeepsValuesAndShape) {
  Tensor w = Tensor::from({1, 2, 3, 4, 5, 6}, {3, 2}, /*requires_grad=*/true);
  EXPECT_EQ(w.shape(), (Shape{3, 2}));
  EXPECT_EQ(w.numel(), 6u);
  EXPECT_EQ(w.dim(), 2u);
  EXPECT_EQ(w.size(0), 3u);
  EXPECT_EQ(w.size(-1), 2u);
  EXPECT_EQ(w.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.grad().empty());
}

TEST(TensorTest, ScalarHasEmptyShapeAndOneElement) {
  Tensor s = Tensor::scalar(2.5);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.numel(), 1u);
  EXPECT_EQ(s.item(), 2.5);
}

TEST(TensorTest, ZeroSizedDimsHaveNoElements) {
  Tensor t = Tensor::zeros({4, 0, 3});
  EXPECT_EQ(t.numel(), 0u);
  EXPECT_TRUE(t.data().empty());
}

// A product of sizes that would wrap is refused, never a short allocation.
TEST(TensorTest, AShapeWhoseProductOverflowsIsRefused) {
  const std::size_t big = std::size_t{1} << 32;
  EXPECT_THROW_WITH(Tensor::zeros({big, big}), std::invalid_argument,
                    "shape [4294967296, 4294967296] holds more values than memory can address");
  EXPECT_THROW_WITH(Tensor::zeros({(std::size_t{1} << 63) + 1, 2}), std::invalid_argument, "more values than");
  EXPECT_THROW(Tensor::zeros({std::size_t{1} << 62}), std::invalid_argument);  // its bytes overflow
  EXPECT_EQ(numel_of({big, big, 0}), 0u);
  EXPECT_EQ(numel_of({big, 3}), 3 * big);
}

TEST(TensorTest, CopiesShareOneArray) {
  Tensor a = Tensor::zeros({2});
  Tensor b = a;
  b.data()[1] = 7;
  EXPECT_EQ(a.data()[1], 7);
  EXPECT_TRUE(a.same(b));
  Tensor c = a.clone();
  c.data()[1] = 1;
  EXPECT_EQ(a.data()[1], 7);
  EXPECT_FALSE(c.requires_grad());
}

TEST(TensorTest, MutableGradStartsAtZeroAndZeroGradDropsIt) {
  Tensor w = Tensor::zeros({3}, true);
  auto g = w.mutable_grad();
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0], 0.0);
  g[2] = 5;
  EXPECT_EQ(w.grad()[2], 5);
  w.zero_grad();
  EXPECT_TRUE(w.grad().empty());
}

TEST(TensorTest, RejectsBadInput) {
  EXPECT_THROW_WITH(Tensor::from({1, 2, 3}, {2, 2}), std::invalid_argument, "3 values do not fill shape [2, 2]");
  EXPECT_THROW_WITH(Tensor::zeros({2, 3}).size(2), std::invalid_argument, "dim 2 is out of range for shape [2, 3]");
  EXPECT_THROW_WITH(Tensor::zeros({2}).item(), std::invalid_argument, "got shape [2]");
  EXPECT_THROW_WITH(Tensor().numel(), std::invalid_argument, "undefined tensor");
  EXPECT_THROW_WITH(Tensor::zeros({2}).backward(), std::invalid_argument, "one element");
  EXPECT_THROW_WITH(Tensor::zeros({1}).backward(), std::invalid_argument, "does not require grad");
}

TEST(TensorTest, BackwardOnALeafAccumulatesTheSeed) {
  Tensor w = Tensor::zeros({2}, true);
  w.backward(Tensor::from({1, 2}, {2}));
  w.backward(Tensor::from({10, 20}, {2}));
  EXPECT_EQ(w.to_vector(), (std::vector<double>{0, 0}));
  EXPECT_EQ(std::vector<double>(w.grad().begin(), w.grad().end()), (std::vector<double>{11, 22}));
}

// A view shares its buffer's memory: dropping the view leaves the buffer
// whole, and dropping the buffer first leaves the view readable (a use
// after free here would be reported by ASan, which poisons cached blocks).
TEST(StorageTest, AViewSharesItsBuffersMemory) {
  Storage owner(1 << 14);
  owner.data()[5] = 2.5;
  {
    Storage view = owner.view(4, 8);
    EXPECT_TRUE(view.is_view());
    EXPECT_EQ(view.data(), owner.data() + 4);
    EXPECT_EQ(view.size(), 8u);
    Storage moved(std::move(view));
    EXPECT_TRUE(moved.is_view());
    Storage assigned(3);
    assigned = std::move(moved);
    EXPECT_TRUE(assigned.is_view());
    EXPECT_EQ(assigned.data()[1], 2.5);
  }
  EXPECT_FALSE(owner.is_view());
  EXPECT_EQ(owner.data()[5], 2.5);

  const std::size_t before = allocated_bytes();
  Storage view = owner.view(5, 1);
  std::shared_ptr<const void> lent = owner.owner();
  owner = Storage();
  EXPECT_EQ(allocated_bytes(), before) << "the memory lives while a view or an owner() does";
  Storage reuse(1 << 14);  // would take the same cached block if it had been given back
  EXPECT_NE(reuse.data(), view.data() - 5);
  EXPECT_EQ(view.data()[0], 2.5);
  view = Storage();
  EXPECT_EQ(allocated_bytes(), before + (1 << 14) * sizeof(double));
  lent.reset();
  EXPECT_EQ(allocated_bytes(), before) << "given back with the last holder";
  EXPECT_THROW((void)reuse.view(1, 1 << 14), std::out_of_range);
}

// DDP and ZeRO give each parameter a grad home in their flat vector:
// backward then adds straight into it, starting from zeros, and
// zero_grad() drops the grad but not the home.
TEST(TensorTest, AGradHomeReceivesTheGradStartingFromZeros) {
  Storage flat(4);
  std::fill(flat.data(), flat.data() + 4, 7.0);
  const auto values = [&flat] { return std::vector<double>(flat.span().begin(), flat.span().end()); };
  Tensor w = Tensor::from({1, 2}, {2}, true);
  w.impl().grad_home = flat.view(1, 2);
  for (int round = 0; round < 2; ++round) {
    (w * w).sum().backward();
    ASSERT_EQ(w.grad().data(), flat.data() + 1);
    EXPECT_EQ(values(), (std::vector<double>{7, 2, 4, 7}));
    w.zero_grad();
    EXPECT_TRUE(w.grad().empty());
  }
  w.impl().grad_home = Storage();
  (w * w).sum().backward();
  EXPECT_NE(w.grad().data(), flat.data() + 1);
  EXPECT_EQ(std::vector<double>(w.grad().begin(), w.grad().end()), (std::vector<double>{2, 4}));
}

TEST(StorageTest, LargeBlocksAreReusedFromTheCache) {
  empty_cache();
  const std::size_t n = 1 << 20;  // 8 MiB
  double* first = nullptr;
  {
    Storage s(n);
    first = s.data();
    s.data()[n - 1] = 1.0;
  }
  EXPECT_EQ(cached_bytes(), n * sizeof(double));
  Storage again(n);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(cached_bytes(), 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(again.data()) % 64, 0u);
}

TEST(StorageTest, EmptyCacheReturnsEveryCachedByte) {
  empty_cache();
  { Storage a(1 << 16), b(1 << 17); }
  EXPECT_GE(cached_bytes(), (3u << 16) * sizeof(double));
  EXPECT_EQ(empty_cache(), (3u << 16) * sizeof(double));
  EXPECT_EQ(cached_bytes(), 0u);
}

#if defined(__SANITIZE_ADDRESS__)
// The cache must not hide a use after free from AddressSanitizer.
TEST(StorageDeathTest, UseOfACachedBlockIsReported) {
  double* stale = nullptr;
  {
    Storage s(1 << 16);
    stale = s.data();
  }
  EXPECT_DEATH(stale[5] = 1.0, "use-after-poison");
}
#endif

// ZeRO stage 3 empties a parameter's storage between steps; every op then
// refuses it instead of reading a missing array, and it works again once
// the storage is back.
TEST(TensorTest, ReleasedValuesAreRefusedByEveryReader) {
  Tensor w = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}, true);
  w.impl().data = Storage();
  EXPECT_EQ(w.numel(), 6u);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_THROW_WITH(w.data(), std::invalid_argument, "the values of this [2, 3] tensor are released");
  EXPECT_THROW_WITH(w.sum(), std::invalid_argument, "released");
  EXPECT_THROW_WITH(w.clone(), std::invalid_argument, "released");
  w.impl().data = Storage(6);
  std::fill(w.data().begin(), w.data().end(), 1.0);
  EXPECT_EQ(w.sum().item(), 6.0);
}

}  // namespace
}  // namespace tinyllm
