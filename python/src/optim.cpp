// tinyllm._C.optim: SGD and AdamW with torch.optim's keyword names and
// defaults, their state_dict as a dict of tensors and floats by name
// ("0.exp_avg", "0.step"), and the factories ZeroOptimizer builds its inner
// optimizer with (tinyllm.dist.zero maps opt_cls and **kw onto them).
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "bindings.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/optimizer.h"
#include "tinyllm/optim/sgd.h"

namespace tinyllm::python {

namespace {

py::dict to_dict(const optim::StateDict& state) {
  py::dict out;
  for (const auto& [name, tensor] : state.tensors) out[py::str(name)] = tensor;
  for (const auto& [name, value] : state.scalars) out[py::str(name)] = value;
  return out;
}

// A value for messages: its type and the start of its repr, "str '3'".
std::string describe(const py::handle& value) {
  std::string repr = py::repr(value);
  if (repr.size() > 40) repr = repr.substr(0, 37) + "...";
  return std::string(py::str(py::type::handle_of(value).attr("__name__"))) + " " + repr;
}

bool is_numeric_array(const py::handle& value) {
  if (!py::isinstance<py::array>(value)) return false;
  const char kind = py::reinterpret_borrow<py::array>(value).dtype().kind();
  return std::string_view("biuf").find(kind) != std::string_view::npos;
}

// A Python or NumPy int or float, not a bool (which would load as 1).
bool real_number(const py::handle& value) {
  const py::module_ np = py::module_::import("numpy");
  if (py::isinstance<py::bool_>(value) || py::isinstance(value, np.attr("bool_"))) return false;
  return py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value) ||
         py::isinstance(value, np.attr("integer")) || py::isinstance(value, np.attr("floating"));
}

// Tensors stay tensors, numeric arrays are copied into tensors, numbers are
// scalars. The state names (sgd.cpp and adamw.cpp keep PyTorch's) fix the
// type each entry must have, so that a wrong one is named here rather than
// reaching the optimizer as a missing and an unexpected name; an unknown
// name is left for the optimizer to report.
optim::StateDict from_dict(const py::handle& self, const py::dict& state) {
  const std::string who = std::string(py::str(py::type::handle_of(self).attr("__name__"))) + ".load_state_dict: ";
  optim::StateDict out;
  for (auto [key, value] : state) {
    if (!py::isinstance<py::str>(key)) throw py::type_error(who + "keys must be str (got " + describe(key) + ")");
    std::string name = key.cast<std::string>();
    const std::string_view field = std::string_view(name).substr(name.find('.') + 1);
    const bool is_tensor = py::isinstance<Tensor>(value) || is_numeric_array(value);
    const bool is_number = real_number(value);
    auto refuse = [&](const char* expected) {
      return py::type_error(who + "'" + name + "' must be " + expected + " (got " + describe(value) + ")");
    };
    if (field == "step") {
      if (!is_number) throw refuse("an int");
    } else if (field == "exp_avg" || field == "exp_avg_sq" || field == "momentum_buffer") {
      if (!is_tensor) throw refuse("a Tensor or a numeric array");
    } else if (!is_tensor && !is_number) {
      throw refuse("a Tensor, a numeric array or a number");
    }
    if (py::isinstance<Tensor>(value)) {
      out.tensors.emplace_back(std::move(name), value.cast<Tensor>());
    } else if (is_tensor) {
      out.tensors.emplace_back(std::move(name), tensor_from_array(py::reinterpret_borrow<py::object>(value), false));
    } else {
      out.scalars.emplace_back(std::move(name), value.cast<double>());
    }
  }
  return out;
}

}  // namespace

void bind_optim(py::module_& m) {
  py::class_<Factory>(m, "_Factory", "An optimizer and its hyperparameters, to be built over any parameters");

  py::class_<optim::Optimizer>(m, "Optimizer", "step, zero_grad, state_dict and load_state_dict")
      .def("step", &optim::Optimizer::step, Release())
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def("state_dict", [](const optim::Optimizer& o) { return to_dict(o.state_dict()); })
      .def(
          "load_state_dict",
          [](py::handle self, const py::dict& state) {
            self.cast<optim::Optimizer&>().load_state_dict(from_dict(self, state));
          },
          py::arg("state_dict"))
      .def("parameters", &optim::Optimizer::parameters);

  const optim::SGDOptions sgd;
  py::class_<optim::SGD, optim::Optimizer>(m, "SGD", "torch.optim.SGD: momentum, dampening, L2 decay, Nesterov")
      .def(py::init([](const py::iterable& params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov) {
             return std::make_unique<optim::SGD>(tensor_list(params, "SGD"),
                                                 optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov});
           }),
           py::arg("params"), py::arg("lr") = sgd.lr, py::arg("momentum") = sgd.momentum,
           py::arg("dampening") = sgd.dampening, py::arg("weight_decay") = sgd.weight_decay,
           py::arg("nesterov") = sgd.nesterov)
      .def_static(
          "_factory",
          [](double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
            return Factory{optim::SGD::factory({lr, momentum, dampening, weight_decay, nesterov})};
          },
          py::kw_only(), py::arg("lr") = sgd.lr, py::arg("momentum") = sgd.momentum,
          py::arg("dampening") = sgd.dampening, py::arg("weight_decay") = sgd.weight_decay,
          py::arg("nesterov") = sgd.nesterov)
      .def_property_readonly("lr", [](const optim::SGD& o) { return o.options().lr; });
  m.attr("SGD").attr("hyperparameters") = py::make_tuple("lr", "momentum", "dampening", "weight_decay", "nesterov");

  const optim::AdamWOptions adamw;
  py::class_<optim::AdamW, optim::Optimizer>(m, "AdamW", "torch.optim.AdamW: decoupled decay, eps after the sqrt")
      .def(py::init([](const py::iterable& params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay) {
             return std::make_unique<optim::AdamW>(tensor_list(params, "AdamW"),
                                                   optim::AdamWOptions{lr, betas, eps, weight_decay});
           }),
           py::arg("params"), py::arg("lr") = adamw.lr, py::arg("betas") = adamw.betas, py::arg("eps") = adamw.eps,
           py::arg("weight_decay") = adamw.weight_decay)
      .def_static(
          "_factory",
          [](double lr, std::pair<double, double> betas, double eps, double weight_decay) {
            return Factory{optim::AdamW::factory({lr, betas, eps, weight_decay})};
          },
          py::kw_only(), py::arg("lr") = adamw.lr, py::arg("betas") = adamw.betas, py::arg("eps") = adamw.eps,
          py::arg("weight_decay") = adamw.weight_decay)
      .def_property_readonly("lr", [](const optim::AdamW& o) { return o.options().lr; });
  m.attr("AdamW").attr("hyperparameters") = py::make_tuple("lr", "betas", "eps", "weight_decay");
}

}  // namespace tinyllm::python
