// tinyllm._C.Tensor and the ops: Tensor with its operators, autograd's
// backward and no_grad, and the differentiable functions of ops.h. Values
// cross into NumPy without a copy (Tensor.numpy()) and come from NumPy with
// one (tinyllm.tensor), as in torch.
#include <pybind11/stl.h>

#include <climits>
#include <memory>
#include <optional>
#include <vector>

#include "bindings.h"
#include "tinyllm/tensor/autograd.h"
#include "tinyllm/tensor/ops.h"
#include "tinyllm/tensor/random.h"

namespace tinyllm::python {

namespace {

py::tuple shape_tuple(const Shape& shape) {
  py::tuple out(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) out[i] = shape[i];
  return out;
}

Shape shape_of(const py::array& a) { return Shape(a.shape(), a.shape() + a.ndim()); }

// The grad as a new tensor holding a copy: the grad's buffer can be dropped
// (zero_grad) or moved (DDP, ZeRO) while Python still holds the result.
py::object grad_copy(const Tensor& t) {
  std::span<const double> g = t.grad();
  if (g.empty()) return py::none();
  return py::cast(Tensor::from(std::vector<double>(g.begin(), g.end()), t.shape()));
}

// no_grad's C++ half: a NoGradGuard alive between enter() and exit(), on the
// thread that entered.
class NoGrad {
 public:
  void enter() { guard_ = std::make_unique<autograd::NoGradGuard>(); }
  void exit() { guard_.reset(); }

 private:
  std::unique_ptr<autograd::NoGradGuard> guard_;
};

}  // namespace

py::array values_view(const Tensor& t, bool writable) {
  std::span<double> values = t.data();
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  // The array holds the memory, not the tensor: DDP, ZeRO and stage 3's
  // release may move the tensor's values elsewhere, and the array must not
  // dangle when they do.
  using Owner = std::shared_ptr<const void>;
  py::capsule owner(new Owner(t.impl().data.owner()), [](void* p) { delete static_cast<Owner*>(p); });
  py::array out(py::dtype::of<double>(), shape, values.data(), owner);
  if (!writable) out.attr("setflags")(py::arg("write") = false);
  return out;
}

py::array numpy_view(const Tensor& t) {
  // As torch refuses .numpy() on a tensor that requires grad, a write that
  // autograd would not see is refused: the view is read-only while it
  // records. Under no_grad it is writable, and the version moves on so that
  // a backward through an older forward refuses to run.
  if (t.requires_grad() && autograd::is_grad_enabled()) return values_view(t, false);
  if (!autograd::is_grad_enabled()) ++t.impl().version;
  return values_view(t, true);
}

Tensor tensor_from_array(const py::object& data, bool requires_grad) {
  // NumPy's cast would parse strings ("1.5") and call float() on objects.
  const py::array given = py::array::ensure(data);
  const char kind = given ? given.dtype().kind() : 'O';
  if (kind != 'b' && kind != 'i' && kind != 'u' && kind != 'f') {
    const std::string got = given ? "dtype " + std::string(py::str(given.dtype()))
                                  : std::string(py::str(py::type::of(data).attr("__name__")));
    throw py::type_error("tinyllm.tensor: data must be booleans, integers or floats (got " + got + ": " +
                         std::string(py::repr(data)).substr(0, 80) + ")");
  }
  using Float64 = py::array_t<double, py::array::c_style | py::array::forcecast>;
  const Float64 values = Float64::ensure(given);
  std::vector<double> copy(values.data(), values.data() + values.size());
  return Tensor::from(std::move(copy), shape_of(values), requires_grad);
}

std::span<double> float64_span(const py::array& a, const std::string& who) {
  if (!a.dtype().is(py::dtype::of<double>())) {
    throw py::value_error(who + ": the array must be float64 (got " + std::string(py::str(a.dtype())) +
                          "); convert it first with .astype(numpy.float64)");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(
        who + ": the array must be C-contiguous (got strides " +
        std::string(py::str(py::cast(std::vector<py::ssize_t>(a.strides(), a.strides() + a.ndim())))) +
        "); copy it first with numpy.ascontiguousarray");
  }
  if (!a.writeable()) throw py::value_error(who + ": the array must be writable (got a read-only array)");
  return {static_cast<double*>(const_cast<void*>(a.data())), static_cast<std::size_t>(a.size())};
}

IntArray int_array(const py::object& ids, const std::string& who) {
  py::array a = py::array::ensure(ids);
  if (!a) throw py::type_error(who + ": token ids must be an integer array");
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    throw py::value_error(who + ": token ids must be integers (got " + std::string(py::str(a.dtype())) + ")");
  }
  if (a.size() > 0 && !(kind == 'i' && a.itemsize() <= 4) && !(kind == 'u' && a.itemsize() < 4)) {
    py::object lo = a.attr("min")(), hi = a.attr("max")();
    if (lo < py::int_(INT_MIN) || hi > py::int_(INT_MAX)) {
      throw py::value_error(who + ": token ids must fit in int32 (got values from " + std::string(py::str(lo)) +
                            " to " + std::string(py::str(hi)) + ")");
    }
  }
  return IntArray::ensure(a);
}

std::vector<Tensor> tensor_list(const py::iterable& items, const std::string& who) {
  std::vector<Tensor> out;
  for (py::handle item : items) {
    if (!py::isinstance<Tensor>(item)) {
      throw py::type_error(who + ": parameters must be tinyllm.Tensor (item " + std::to_string(out.size()) + " is " +
                           std::string(py::str(py::type::of(item).attr("__name__"))) + ")");
    }
    out.push_back(item.cast<Tensor>());
  }
  return out;
}

namespace {

// Tensor: values, shape, grad, autograd, arithmetic.
void bind_tensor_class(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", "A float64 array with a shape, a .grad and reverse-mode autograd")
      .def_property_readonly("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("dim", &Tensor::dim)
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool requires_grad) { t.set_requires_grad(requires_grad); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad", &grad_copy, "A copy of the gradient as a new Tensor, or None")
      .def("numpy", &numpy_view,
           "A NumPy view sharing this tensor's memory: read-only while the tensor requires grad and grad mode is "
           "on, writable otherwise")
      .def_property_readonly("_version", [](const Tensor& t) { return t.impl().version; })
      .def(
          "__array__", [](const Tensor& t, py::object) { return numpy_view(t); }, py::arg("dtype") = py::none())
      .def("item", &Tensor::item)
      .def("tolist", [](const Tensor& t) { return values_view(t, false).attr("tolist")(); })
      .def(
          "_values", [](const Tensor& t) { return values_view(t, false); }, "A read-only view, for repr")
      .def("clone", &Tensor::clone, Release())
      .def("zero_grad", &Tensor::zero_grad)
      .def(
          "backward",
          [](const Tensor& t, std::optional<Tensor> gradient) {
            if (gradient) {
              t.backward(*gradient);
            } else {
              t.backward();
            }
          },
          py::arg("gradient") = py::none(), Release())
      .def("sum", &Tensor::sum, Release())
      .def("mean", &Tensor::mean, Release())
      .def("reshape", &Tensor::reshape, Release())
      .def("transpose", &Tensor::transpose, Release())
      .def("slice", &Tensor::slice, py::arg("dim"), py::arg("start"), py::arg("end"), Release())
      .def("matmul", &Tensor::matmul, Release())
      .def(
          "__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, py::is_operator(), Release())
      .def(
          "__add__", [](const Tensor& a, const Tensor& b) { return a + b; }, py::is_operator(), Release())
      .def(
          "__add__", [](const Tensor& a, double s) { return a + Tensor::scalar(s); }, py::is_operator(), Release())
      .def(
          "__radd__", [](const Tensor& a, double s) { return Tensor::scalar(s) + a; }, py::is_operator(), Release())
      .def(
          "__sub__", [](const Tensor& a, const Tensor& b) { return a - b; }, py::is_operator(), Release())
      .def(
          "__sub__", [](const Tensor& a, double s) { return a - Tensor::scalar(s); }, py::is_operator(), Release())
      .def(
          "__rsub__", [](const Tensor& a, double s) { return Tensor::scalar(s) - a; }, py::is_operator(), Release())
      .def(
          "__mul__", [](const Tensor& a, const Tensor& b) { return a * b; }, py::is_operator(), Release())
      .def(
          "__mul__", [](const Tensor& a, double s) { return a * s; }, py::is_operator(), Release())
      .def(
          "__rmul__", [](const Tensor& a, double s) { return s * a; }, py::is_operator(), Release())
      .def(
          "__neg__", [](const Tensor& a) { return -a; }, Release())
      .def("_same", &Tensor::same, "Whether both handles share one tensor");
}

// The factories, the ops and grad mode.
void bind_functions(py::module_& m) {
  m.def("tensor", &tensor_from_array, py::arg("data"), py::arg("requires_grad") = false,
        "A new leaf tensor holding a float64 copy of data (any numeric array or nested list)");
  m.def(
      "zeros", [](const Shape& shape, bool requires_grad) { return Tensor::zeros(shape, requires_grad); },
      py::arg("shape"), py::arg("requires_grad") = false);
  m.def(
      "full",
      [](const Shape& shape, double value, bool requires_grad) { return Tensor::full(shape, value, requires_grad); },
      py::arg("shape"), py::arg("value"), py::arg("requires_grad") = false);
  m.def(
      "randn",
      [](const Shape& shape, std::uint64_t seed, bool requires_grad) {
        Generator gen(seed);
        return randn(shape, gen, requires_grad);
      },
      py::arg("shape"), py::arg("seed") = 0, py::arg("requires_grad") = false);

  m.def(
      "matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, Release());
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) { return linear(x, w, b.value_or(Tensor())); },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), Release());
  m.def("gelu", &gelu, Release());
  m.def("layer_norm", &layer_norm, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps") = 1e-5, Release());
  m.def("causal_attention", &causal_attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("n_head"), Release());
  m.def(
      "cross_entropy",
      [](const Tensor& logits, const py::object& target_ids) {
        const IntArray targets = int_array(target_ids, "cross_entropy");
        std::span<const int> ids(targets.data(), static_cast<std::size_t>(targets.size()));
        py::gil_scoped_release release;
        return cross_entropy(logits, ids);
      },
      py::arg("logits"), py::arg("targets"));
  m.def(
      "embedding",
      [](const Tensor& weight, const py::object& token_ids) {
        const IntArray ids = int_array(token_ids, "embedding");
        std::span<const int> span(ids.data(), static_cast<std::size_t>(ids.size()));
        const Shape shape = shape_of(ids);
        py::gil_scoped_release release;
        return embedding(weight, span, shape);
      },
      py::arg("weight"), py::arg("ids"));

  py::class_<NoGrad>(m, "_NoGrad").def(py::init<>()).def("enter", &NoGrad::enter).def("exit", &NoGrad::exit);
  m.def("is_grad_enabled", &autograd::is_grad_enabled);
  m.def("empty_cache", &empty_cache, "Gives every cached storage block back to the system; the bytes freed");
}

}  // namespace

void bind_tensor(py::module_& m) {
  bind_tensor_class(m);
  bind_functions(m);
}

}  // namespace tinyllm::python
