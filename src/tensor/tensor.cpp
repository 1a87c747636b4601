#include "tinyllm/tensor/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "../support/check.h"
#include "tinyllm/tensor/autograd.h"
#include "tinyllm/tensor/deferred_init.h"
#include "tinyllm/tensor/ops.h"

namespace tinyllm {

std::string to_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::size_t numel_of(const Shape& shape) {
  // The one product of sizes every tensor's length comes from: it and its
  // bytes must fit in a size_t, or a wrapped product would allocate too little.
  constexpr std::size_t kMaxNumel = std::numeric_limits<std::size_t>::max() / sizeof(double);
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::size_t n = 1;
  for (std::size_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxNumel) {
      throw std::invalid_argument(
          fmt::format("shape {} holds more values than memory can address (at most {})", to_string(shape), kMaxNumel));
    }
  }
  return n;
}

Tensor Tensor::empty(Shape shape) {
  auto impl = std::make_shared<TensorImpl>();
  impl->numel = numel_of(shape);
  impl->shape = std::move(shape);
  if (deferred_init_enabled()) {
    impl->deferred_init = [](std::size_t, std::span<double>) {
      throw std::logic_error("Tensor: a deferred Tensor::empty has no values to make (fill it with normal_ or full)");
    };
  } else {
    impl->data = Storage(impl->numel);
  }
  return Tensor(std::move(impl));
}

Tensor Tensor::from(std::vector<double> values, Shape shape, bool requires_grad) {
  if (values.size() != numel_of(shape)) {
    throw std::invalid_argument(fmt::format("Tensor::from: {} values do not fill shape {} ({} elements)", values.size(),
                                            to_string(shape), numel_of(shape)));
  }
  Tensor t = empty(std::move(shape));
  if (is_deferred(t)) {
    set_deferred_init(t, [values = std::move(values)](std::size_t begin, std::span<double> out) {
      std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(begin), out.size(), out.begin());
    });
  } else {
    std::copy(values.begin(), values.end(), t.data().begin());
  }
  t.impl_->requires_grad = requires_grad;
  return t;
}

Tensor Tensor::full(Shape shape, double value, bool requires_grad) {
  Tensor t = empty(std::move(shape));
  if (is_deferred(t)) {
    set_deferred_init(t, [value](std::size_t, std::span<double> out) { std::fill(out.begin(), out.end(), value); });
  } else {
    std::fill(t.data().begin(), t.data().end(), value);
  }
  t.impl_->requires_grad = requires_grad;
  return t;
}

Tensor Tensor::zeros(Shape shape, bool requires_grad) { return full(std::move(shape), 0.0, requires_grad); }

Tensor Tensor::scalar(double value, bool requires_grad) { return full({}, value, requires_grad); }

TensorImpl& Tensor::impl() const {
  if (!impl_) throw std::invalid_argument("Tensor: use of an undefined tensor");
  return *impl_;
}

const Shape& Tensor::shape() const { return impl().shape; }

std::size_t Tensor::numel() const { return impl().numel; }

std::size_t Tensor::size(int dim) const {
  const int rank = static_cast<int>(this->dim());
  const int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    throw std::invalid_argument(
        fmt::format("Tensor::size: dim {} is out of range for shape {}", dim, to_string(shape())));
  }
  return shape()[static_cast<std::size_t>(d)];
}

std::span<double> Tensor::data() const {
  const TensorImpl& self = impl();
  if (self.data.size() != self.numel && self.deferred_init) {
    throw std::invalid_argument(
        fmt::format("Tensor: the values of this {} tensor are deferred (built under a DeferredInitGuard): call "
                    "materialize() or hand it to a ZeroOptimizer",
                    to_string(self.shape)));
  }
  if (self.data.size() != self.numel) {
    throw std::invalid_argument(
        fmt::format("Tensor: the values of this {} tensor are released (a ZeRO stage-3 parameter between steps: call "
                    "ZeroOptimizer::gather() before using it)",
                    to_string(self.shape)));
  }
  return self.data.span();
}

std::span<double> Tensor::grad() const { return impl().grad.span(); }

std::span<double> Tensor::mutable_grad() const {
  TensorImpl& self = impl();
  if (self.grad.empty() && self.numel > 0) {
    self.grad = self.grad_home.empty() ? Storage(self.numel) : self.grad_home.view(0, self.numel);
    std::fill(self.grad.span().begin(), self.grad.span().end(), 0.0);
  }
  return self.grad.span();
}

void Tensor::zero_grad() const { impl().grad = Storage(); }

bool Tensor::requires_grad() const { return impl().requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  if (!is_leaf()) {
    throw std::invalid_argument(
        "Tensor::set_requires_grad: only leaves can change requires_grad (this tensor has a grad_fn)");
  }
  impl().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return impl().grad_fn == nullptr; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const { return impl().grad_fn; }

namespace {

RemovableHandle add_hook(TensorImpl& impl, TensorHook hook, const char* who) {
  if (!hook) throw std::invalid_argument(fmt::format("Tensor::{}: the hook must not be empty", who));
  if (!impl.hooks) impl.hooks = std::make_shared<HookList<TensorHook>>();
  return HookList<TensorHook>::add(impl.hooks, std::move(hook));
}

}  // namespace

RemovableHandle Tensor::register_post_accumulate_grad_hook(TensorHook hook) const {
  if (!is_leaf() || !requires_grad()) {
    throw std::invalid_argument(
        "Tensor::register_post_accumulate_grad_hook: only a leaf that requires grad accumulates a grad (use "
        "register_hook on a non-leaf)");
  }
  return add_hook(impl(), std::move(hook), "register_post_accumulate_grad_hook");
}

RemovableHandle Tensor::register_hook(TensorHook hook) const {
  if (is_leaf()) {
    throw std::invalid_argument(
        "Tensor::register_hook: this tensor is a leaf; use register_post_accumulate_grad_hook for a leaf's grad");
  }
  return add_hook(impl(), std::move(hook), "register_hook");
}

double Tensor::item() const {
  if (numel() != 1) {
    throw std::invalid_argument(
        fmt::format("Tensor::item: needs exactly one element (got shape {})", to_string(shape())));
  }
  return data()[0];
}

std::vector<double> Tensor::to_vector() const { return {data().begin(), data().end()}; }

Tensor Tensor::clone() const {
  Tensor copy = empty(shape());
  std::copy(data().begin(), data().end(), copy.data().begin());
  return copy;
}

void Tensor::backward() const {
  if (numel() != 1) {
    throw std::invalid_argument(
        fmt::format("Tensor::backward: the root must have one element without a gradient argument (got shape {})",
                    to_string(shape())));
  }
  backward(Tensor::full(shape(), 1.0));
}

void Tensor::backward(const Tensor& gradient) const {
  if (!requires_grad()) {
    throw std::invalid_argument("Tensor::backward: this tensor does not require grad and has no grad_fn");
  }
  if (gradient.shape() != shape()) {
    throw std::invalid_argument(fmt::format("Tensor::backward: gradient of shape {} for a tensor of shape {}",
                                            to_string(gradient.shape()), to_string(shape())));
  }
  std::span<double> seed = mutable_grad();
  std::transform(seed.begin(), seed.end(), gradient.data().begin(), seed.begin(), std::plus<>());
  autograd::run_backward(*this);
}

Tensor Tensor::sum() const { return tinyllm::sum(*this); }
Tensor Tensor::mean() const { return tinyllm::mean(*this); }
Tensor Tensor::reshape(Shape shape) const { return tinyllm::reshape(*this, std::move(shape)); }
Tensor Tensor::transpose(int dim0, int dim1) const { return tinyllm::transpose(*this, dim0, dim1); }
Tensor Tensor::slice(int dim, std::size_t start, std::size_t end) const {
  return tinyllm::slice(*this, dim, start, end);
}
Tensor Tensor::matmul(const Tensor& other) const { return tinyllm::matmul(*this, other); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator-(const Tensor& a) { return mul(a, -1.0); }

}  // namespace tinyllm
