#include "tinyllm/tensor/deferred_init.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace tinyllm {
namespace {

thread_local bool deferring = false;

}  // namespace

DeferredInitGuard::DeferredInitGuard() : previous_(std::exchange(deferring, true)) {}

DeferredInitGuard::~DeferredInitGuard() { deferring = previous_; }

bool deferred_init_enabled() { return deferring; }

bool is_deferred(const Tensor& t) { return static_cast<bool>(t.impl().deferred_init); }

void set_deferred_init(const Tensor& t, InitFn init) {
  if (!init) throw std::invalid_argument("set_deferred_init: the recipe must not be empty");
  TensorImpl& impl = t.impl();
  impl.data = Storage();
  impl.deferred_init = std::move(init);
}

void initial_values(const Tensor& t, std::size_t begin, std::span<double> out) {
  const TensorImpl& impl = t.impl();
  if (!impl.deferred_init) {
    throw std::invalid_argument(
        fmt::format("initial_values: this {} tensor is not deferred (it was built eagerly)", to_string(impl.shape)));
  }
  if (begin > impl.numel || out.size() > impl.numel - begin) {
    throw std::out_of_range(fmt::format("initial_values: elements [{}, {}) lie beyond this {} tensor's {}", begin,
                                        begin + out.size(), to_string(impl.shape), impl.numel));
  }
  impl.deferred_init(begin, out);
}

void materialize(const Tensor& t) {
  TensorImpl& impl = t.impl();
  if (!impl.deferred_init) return;
  Storage values(impl.numel);
  impl.deferred_init(0, values.span());
  impl.data = std::move(values);
  impl.deferred_init = nullptr;
}

void materialize(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) materialize(t);
}

}  // namespace tinyllm
