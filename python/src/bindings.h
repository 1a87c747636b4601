// The pybind11 binding of tinyllm: one bind_* function per layer, called in
// order by module.cpp. The binding converts types and releases the GIL
// around C++ work; every rule it enforces is the C++ library's, surfacing as
// Python exceptions (std::invalid_argument as ValueError,
// dist::CommError as tinyllm.dist.CommError).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <span>
#include <string>
#include <vector>

#include "tinyllm/optim/optimizer.h"
#include "tinyllm/tensor/tensor.h"

namespace tinyllm::python {

namespace py = pybind11;

// The one rule for the GIL: C++ work runs without it. Where pybind11 has
// converted every argument, the binding says so with Release(); where the
// body still reads Python objects (arrays, callables), it converts them
// first and then opens a py::gil_scoped_release of its own.
using Release = py::call_guard<py::gil_scoped_release>;

// An optimizer's class and hyperparameters, the `opt_cls, **kw` of docs/ZERO.md
// (tinyllm.optim.AdamW._factory(lr=0.5) makes one), for ZeroOptimizer.
struct Factory {
  optim::OptimizerFactory make;
};

void bind_tensor(py::module_& m);
void bind_nn(py::module_& m);
void bind_optim(py::module_& m);
void bind_dist(py::module_& m);

// A NumPy array over the tensor's values, sharing their memory and keeping
// it alive (Tensor.numpy(): read-only while the tensor requires grad and
// grad mode is on). ValueError while the values are released.
py::array numpy_view(const Tensor& t);
py::array values_view(const Tensor& t, bool writable);
// A new leaf tensor holding a float64 copy of any array or nested list of
// booleans, integers or floats; TypeError for anything else (strings,
// objects, complex numbers), which a cast would parse or truncate.
Tensor tensor_from_array(const py::object& data, bool requires_grad);
// The memory of an array a collective or an optimizer works on in place: it
// must be a writable, C-contiguous float64 array (a copy would silently lose
// the result), else ValueError naming what it got. `who` leads the message.
std::span<double> float64_span(const py::array& a, const std::string& who);
// Token ids as the int32 array the C++ takes: any integer array or nested
// list, converted when it is of another integer type; ValueError for
// non-integers (floats would be truncated) or values beyond int32.
using IntArray = py::array_t<int, py::array::c_style | py::array::forcecast>;
IntArray int_array(const py::object& ids, const std::string& who);
// Any iterable of tensors (a list, a generator), in order; TypeError naming
// the first item that is not a tensor.
std::vector<Tensor> tensor_list(const py::iterable& items, const std::string& who);

}  // namespace tinyllm::python
