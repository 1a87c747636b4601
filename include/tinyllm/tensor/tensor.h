// Tensor: a float64, row-major, contiguous array with a shape, an optional
// .grad and the autograd node that produced it. Copies of a Tensor share one
// array, like libtorch's; there are no strided views. The ops live in ops.h,
// the graph in autograd.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tinyllm/tensor/hooks.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm {

using Shape = std::vector<std::size_t>;

std::string to_string(const Shape& shape);  // "[3, 2]"
// The product of the sizes; std::invalid_argument where it, or its bytes
// as doubles, would overflow a size_t.
std::size_t numel_of(const Shape& shape);

namespace autograd {
struct Node;
}

class Tensor;
using TensorHook = std::function<void(const Tensor&)>;

struct TensorImpl {
  Shape shape;
  std::size_t numel = 0;
  Storage data;  // empty while released (numel > 0): see Tensor::data()
  Storage grad;  // empty until a backward reaches this tensor
  // Where a new grad is placed: a view of a segment of DDP's or ZeRO's flat
  // gradient vector, so that backward adds straight into it; empty: a fresh
  // buffer.
  Storage grad_home;
  bool requires_grad = false;
  // Counts the writes to the values that the library cannot see coming (a
  // writable NumPy view, taken under no_grad): a backward through an op that
  // saw an older version refuses to run (torch's version counter).
  std::uint64_t version = 0;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  // A leaf's post-accumulate-grad hooks, or a non-leaf's grad hooks (see
  // Tensor::register_hook); null until the first is registered.
  std::shared_ptr<HookList<TensorHook>> hooks;
  // Set while the values are deferred (tensor/deferred_init.h): writes
  // elements [begin, begin + out.size()) of the values this tensor would have.
  std::function<void(std::size_t begin, std::span<double> out)> deferred_init;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no array at all

  static Tensor from(std::vector<double> values, Shape shape, bool requires_grad = false);
  static Tensor zeros(Shape shape, bool requires_grad = false);
  static Tensor full(Shape shape, double value, bool requires_grad = false);
  static Tensor scalar(double value, bool requires_grad = false);
  // Values are not initialised: for op outputs that write every element.
  static Tensor empty(Shape shape);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::size_t dim() const { return shape().size(); }
  std::size_t size(int dim) const;  // negative counts from the end
  std::size_t numel() const;

  // std::invalid_argument while the values are released (impl().data emptied,
  // as ZeRO stage 3 does between steps), so no op reads a missing array.
  std::span<double> data() const;
  // Empty until a backward reaches this tensor, and again after zero_grad().
  std::span<double> grad() const;
  // The grad buffer, zeros if it was absent (in impl().grad_home where one is
  // set, else fresh): what backward functions add into.
  std::span<double> mutable_grad() const;
  // Drops the grad buffer (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad() const;

  bool requires_grad() const;
  // Only on leaves, like torch.Tensor.requires_grad_.
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;

  double item() const;  // the value of a one-element tensor
  std::vector<double> to_vector() const;
  Tensor clone() const;  // a new leaf with a copy of the values

  // Leaves only (torch's register_post_accumulate_grad_hook): hook(*this)
  // runs once per backward that reaches this tensor, after the backward has
  // added its last contribution to .grad, so .grad is final for that
  // backward. Gradient accumulation fires it once per backward.
  RemovableHandle register_post_accumulate_grad_hook(TensorHook hook) const;
  // Non-leaves only (torch's register_hook): hook(*this) runs once backward
  // has computed this tensor's whole gradient, before it flows on to the
  // inputs of the op that produced it.
  RemovableHandle register_hook(TensorHook hook) const;

  // Reverse-mode autograd from this tensor: scalar, or seeded with `gradient`
  // of the same shape. Accumulates into the leaves' .grad and frees the graph.
  void backward() const;
  void backward(const Tensor& gradient) const;

  // Method forms of the ops in ops.h, spelled as in libtorch.
  Tensor sum() const;
  Tensor mean() const;
  Tensor reshape(Shape shape) const;
  Tensor transpose(int dim0, int dim1) const;
  Tensor slice(int dim, std::size_t start, std::size_t end) const;
  Tensor matmul(const Tensor& other) const;

  TensorImpl& impl() const;
  bool same(const Tensor& other) const { return impl_ == other.impl_; }
  long use_count() const { return impl_.use_count(); }  // handles sharing this array

 private:
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<TensorImpl> impl_;
};

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

}  // namespace tinyllm
