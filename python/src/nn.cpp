// tinyllm._C.nn: Module (subclassable from Python: python/tinyllm/nn.py adds
// attribute registration and __call__), Linear, LayerNorm, Embedding, and
// GPT with GPTConfig. Token ids come in as NumPy integer arrays [B, T].
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.h"
#include "tinyllm/nn/embedding.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/nn/layer_norm.h"
#include "tinyllm/nn/linear.h"
#include "tinyllm/nn/module.h"

namespace tinyllm::python {

namespace {

// Opens Module's protected registration to the binding, for modules written
// in Python: the member pointers are formed here, where they are accessible,
// and work on any Module. An assignment (python/tinyllm/nn.py) replaces a
// registration of its kind in place, and one of the other kind is dropped
// first, as torch's __setattr__ does.
struct ModuleAccess : nn::Module {
  static bool has_parameter(const nn::Module& m, const std::string& name) {
    return (m.*&ModuleAccess::is_parameter)(name);
  }
  static bool has_child(const nn::Module& m, const std::string& name) {
    const auto& children = m.named_children();
    return std::any_of(children.begin(), children.end(), [&](const auto& c) { return c.first == name; });
  }
  static bool drop(nn::Module& m, const std::string& name) { return (m.*&ModuleAccess::unregister)(name); }
  static void assign_parameter(nn::Module& m, std::string name, Tensor t) {
    if (has_parameter(m, name)) {
      (m.*&ModuleAccess::replace_parameter)(name, std::move(t));
      return;
    }
    drop(m, name);
    (m.*&ModuleAccess::register_parameter)(std::move(name), std::move(t));
  }
  static void assign_module(nn::Module& m, std::string name, std::shared_ptr<nn::Module> child) {
    using Register = std::shared_ptr<nn::Module> (nn::Module::*)(std::string, std::shared_ptr<nn::Module>);
    using Replace = std::shared_ptr<nn::Module> (nn::Module::*)(const std::string&, std::shared_ptr<nn::Module>);
    if (has_child(m, name)) {
      const Replace replace = &ModuleAccess::replace_module<nn::Module>;
      (m.*replace)(name, std::move(child));
      return;
    }
    drop(m, name);
    const Register add = &ModuleAccess::register_module<nn::Module>;
    (m.*add)(std::move(name), std::move(child));
  }
};

// pybind11 hands a method an instance whose __init__ never ran (a Python
// subclass that forgot super().__init__()) as allocated but unconstructed
// memory, and a call on it would crash. So every method of these classes
// takes self as a handle and goes through this check first, which raises
// AttributeError as torch does: "cannot <doing> before Module.__init__() call".
bool constructed(py::handle self) {  // self: a pybind11 instance
  auto* instance = reinterpret_cast<py::detail::instance*>(self.ptr());
  for (const auto& v_h : py::detail::values_and_holders(instance))
    if (!v_h.holder_constructed()) return false;
  return true;
}
template <class T>
T& self_as(py::handle self, const std::string& doing) {
  if (!py::isinstance<T>(self)) {
    throw py::type_error("cannot " + doing + " on an object of type " +
                         std::string(py::str(py::type::handle_of(self).attr("__name__"))) + " (a " +
                         std::string(py::str(py::type::of<T>().attr("__name__"))) + " expected)");
  }
  if (!constructed(self)) {
    const std::string type = py::str(py::type::handle_of(self).attr("__name__"));
    throw py::attribute_error("cannot " + doing + " before Module.__init__() call (" + type +
                              ".__init__ must call super().__init__() first)");
  }
  return self.cast<T&>();
}

// A value for messages: its type and the start of its repr, "str '3'".
std::string describe(const py::handle& value) {
  std::string repr = py::repr(value);
  if (repr.size() > 40) repr = repr.substr(0, 37) + "...";
  return std::string(py::str(py::type::handle_of(value).attr("__name__"))) + " " + repr;
}

// A state dict from Python: tensors as they are, numeric arrays copied into
// tensors, and a TypeError naming the key for anything else.
std::vector<std::pair<std::string, Tensor>> state_entries(const py::handle& self, const py::dict& state) {
  const std::string who = std::string(py::str(py::type::handle_of(self).attr("__name__"))) + ".load_state_dict: ";
  std::vector<std::pair<std::string, Tensor>> entries;
  for (auto [key, value] : state) {
    if (!py::isinstance<py::str>(key)) throw py::type_error(who + "keys must be str (got " + describe(key) + ")");
    std::string name = key.cast<std::string>();
    const bool numeric_array = py::isinstance<py::array>(value) &&
                               std::string_view("biuf").find(py::reinterpret_borrow<py::array>(value).dtype().kind()) !=
                                   std::string_view::npos;
    if (py::isinstance<Tensor>(value)) {
      entries.emplace_back(std::move(name), value.cast<Tensor>());
    } else if (numeric_array) {
      entries.emplace_back(std::move(name), tensor_from_array(py::reinterpret_borrow<py::object>(value), false));
    } else {
      throw py::type_error(who + "'" + name + "' must be a Tensor or a numeric array (got " + describe(value) + ")");
    }
  }
  return entries;
}

py::object optional_tensor(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

// Token ids [B, T] as the span and sizes GPT takes; ids_array owns the
// converted array (release the GIL only while a Tokens is alive).
struct Tokens {
  IntArray ids_array;
  std::span<const int> ids;
  std::size_t batch = 0, seq = 0;
};
Tokens tokens(const py::object& token_ids, const char* who) {
  IntArray ids = int_array(token_ids, std::string("GPT.") + who);
  if (ids.ndim() != 2) {
    throw py::value_error(std::string("GPT.") + who + ": token ids must be a 2-d array [B, T] (got " +
                          std::to_string(ids.ndim()) + " dims)");
  }
  const std::span<const int> span(ids.data(), static_cast<std::size_t>(ids.size()));
  const auto batch = static_cast<std::size_t>(ids.shape(0)), seq = static_cast<std::size_t>(ids.shape(1));
  return {std::move(ids), span, batch, seq};
}

// Module: parameters, children, hooks, state dicts.
void bind_module(py::module_& m) {
  py::class_<nn::Module, std::shared_ptr<nn::Module>>(m, "Module", "Parameters and submodules, in registration order")
      .def(py::init<>())
      .def("parameters", [](py::handle self) { return self_as<nn::Module>(self, "call parameters()").parameters(); })
      .def("named_parameters",
           [](py::handle self) { return self_as<nn::Module>(self, "call named_parameters()").named_parameters(); })
      .def("num_parameters",
           [](py::handle self) { return self_as<nn::Module>(self, "call num_parameters()").num_parameters(); })
      .def("zero_grad", [](py::handle self) { self_as<nn::Module>(self, "call zero_grad()").zero_grad(); })
      .def("state_dict",
           [](py::handle self) {
             py::dict out;
             for (const auto& [name, t] : self_as<nn::Module>(self, "call state_dict()").state_dict()) {
               out[py::str(name)] = t;
             }
             return out;
           })
      .def(
          "load_state_dict",
          [](py::handle self, const py::dict& state) {
            nn::Module& module = self_as<nn::Module>(self, "call load_state_dict()");
            const auto entries = state_entries(self, state);
            py::gil_scoped_release release;
            module.load_state_dict(entries);
          },
          py::arg("state_dict"))
      .def("_registered",
           [](py::handle self, const std::string& name) -> py::object {
             // Nothing is registered before __init__, and assigning a plain
             // attribute then is allowed, as in torch.
             if (py::isinstance<nn::Module>(self) && !constructed(self)) return py::none();
             const nn::Module& module = self_as<nn::Module>(self, "look up attributes");
             if (ModuleAccess::has_parameter(module, name)) return py::str("parameter");
             if (ModuleAccess::has_child(module, name)) return py::str("module");
             return py::none();
           })
      .def(
          "_register_parameter",
          [](py::handle self, std::string name, Tensor t) {
            nn::Module& module = self_as<nn::Module>(self, "assign parameters");
            ModuleAccess::assign_parameter(module, std::move(name), std::move(t));
          },
          py::arg("name"), py::arg("tensor"))
      .def(
          "_register_module",
          [](py::handle self, std::string name, std::shared_ptr<nn::Module> child) {
            ModuleAccess::assign_module(self_as<nn::Module>(self, "assign module"), std::move(name), std::move(child));
          },
          py::arg("name"), py::arg("module"))
      .def(
          "_unregister",
          [](py::handle self, const std::string& name) {
            return ModuleAccess::drop(self_as<nn::Module>(self, "delete attributes"), name);
          },
          py::arg("name"));
}

// The layers GPT is made of.
void bind_layers(py::module_& m) {
  py::class_<nn::Linear, nn::Module, std::shared_ptr<nn::Linear>>(m, "Linear", "y = x · weightᵀ + bias")
      .def(py::init([](std::size_t in, std::size_t out, bool bias, double std, std::uint64_t seed) {
             Generator gen(seed);
             return std::make_shared<nn::Linear>(in, out, gen, bias, std);
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::kw_only(),
           py::arg("std") = 0.02, py::arg("seed") = 0)
      .def("forward",
           [](py::handle self, const Tensor& x) {
             const nn::Linear& l = self_as<nn::Linear>(self, "call forward()");
             py::gil_scoped_release release;
             return l.forward(x);
           })
      .def_property_readonly("weight", [](py::handle self) { return self_as<nn::Linear>(self, "read weight").weight; })
      .def_property_readonly(
          "bias", [](py::handle self) { return optional_tensor(self_as<nn::Linear>(self, "read bias").bias); });

  py::class_<nn::LayerNorm, nn::Module, std::shared_ptr<nn::LayerNorm>>(m, "LayerNorm", "LayerNorm over the last dim")
      .def(py::init<std::size_t, double>(), py::arg("normalized_shape"), py::arg("eps") = 1e-5)
      .def("forward",
           [](py::handle self, const Tensor& x) {
             const nn::LayerNorm& ln = self_as<nn::LayerNorm>(self, "call forward()");
             py::gil_scoped_release release;
             return ln.forward(x);
           })
      .def_property_readonly("weight",
                             [](py::handle self) { return self_as<nn::LayerNorm>(self, "read weight").weight; })
      .def_property_readonly("bias", [](py::handle self) { return self_as<nn::LayerNorm>(self, "read bias").bias; })
      .def_property_readonly("eps", [](py::handle self) { return self_as<nn::LayerNorm>(self, "read eps").eps; });

  py::class_<nn::Embedding, nn::Module, std::shared_ptr<nn::Embedding>>(m, "Embedding", "A table of rows by token id")
      .def(py::init([](std::size_t num, std::size_t dim, double std, std::uint64_t seed) {
             Generator gen(seed);
             return std::make_shared<nn::Embedding>(num, dim, gen, std);
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::kw_only(), py::arg("std") = 0.02,
           py::arg("seed") = 0)
      .def("forward",
           [](py::handle self, const py::object& token_ids) {
             const nn::Embedding& e = self_as<nn::Embedding>(self, "call forward()");
             const IntArray ids = int_array(token_ids, "Embedding.forward");
             std::span<const int> span(ids.data(), static_cast<std::size_t>(ids.size()));
             const Shape shape(ids.shape(), ids.shape() + ids.ndim());
             py::gil_scoped_release release;
             return e.forward(span, shape);
           })
      .def_property_readonly("weight",
                             [](py::handle self) { return self_as<nn::Embedding>(self, "read weight").weight; });
}

void bind_gpt(py::module_& m) {
  py::class_<nn::GPTConfig>(m, "GPTConfig", "GPT's sizes: V, T, L, H, C")
      .def(py::init([](std::size_t V, std::size_t T, std::size_t L, std::size_t H, std::size_t C) {
             return nn::GPTConfig{.vocab_size = V, .block_size = T, .n_layer = L, .n_head = H, .n_embd = C};
           }),
           py::kw_only(), py::arg("vocab_size") = 256, py::arg("block_size") = 64, py::arg("n_layer") = 4,
           py::arg("n_head") = 4, py::arg("n_embd") = 128)
      .def_readwrite("vocab_size", &nn::GPTConfig::vocab_size)
      .def_readwrite("block_size", &nn::GPTConfig::block_size)
      .def_readwrite("n_layer", &nn::GPTConfig::n_layer)
      .def_readwrite("n_head", &nn::GPTConfig::n_head)
      .def_readwrite("n_embd", &nn::GPTConfig::n_embd)
      .def("check", &nn::GPTConfig::check)
      .def("num_parameters", &nn::GPTConfig::num_parameters)
      .def("__repr__", [](const nn::GPTConfig& c) {
        return "GPTConfig(vocab_size=" + std::to_string(c.vocab_size) + ", block_size=" + std::to_string(c.block_size) +
               ", n_layer=" + std::to_string(c.n_layer) + ", n_head=" + std::to_string(c.n_head) +
               ", n_embd=" + std::to_string(c.n_embd) + ")";
      });

  py::class_<nn::GPT, nn::Module, std::shared_ptr<nn::GPT>>(m, "GPT", "GPT-2's architecture, nanoGPT's names")
      .def(py::init<const nn::GPTConfig&, std::uint64_t>(), py::arg("config") = nn::GPTConfig{}, py::arg("seed") = 1337,
           Release())
      .def_property_readonly("config", [](py::handle self) { return self_as<nn::GPT>(self, "read config").config(); })
      .def(
          "forward",
          [](py::handle self, const py::object& idx) {
            const nn::GPT& model = self_as<nn::GPT>(self, "call forward()");
            const Tokens t = tokens(idx, "forward");
            py::gil_scoped_release release;
            return model.forward(t.ids, t.batch, t.seq);
          },
          py::arg("idx"), "logits [B, T, V] of token ids [B, T]")
      .def(
          "loss",
          [](py::handle self, const py::object& inputs, const py::object& targets) {
            const nn::GPT& model = self_as<nn::GPT>(self, "call loss()");
            const Tokens in = tokens(inputs, "loss"), out = tokens(targets, "loss");
            if (in.batch != out.batch || in.seq != out.seq) {
              throw py::value_error("GPT.loss: targets must have the inputs' shape [" + std::to_string(in.batch) +
                                    ", " + std::to_string(in.seq) + "] (got [" + std::to_string(out.batch) + ", " +
                                    std::to_string(out.seq) + "])");
            }
            py::gil_scoped_release release;
            return model.loss(in.ids, out.ids, in.batch, in.seq);
          },
          py::arg("inputs"), py::arg("targets"), "mean cross-entropy over all B·T positions");
}

}  // namespace

void bind_nn(py::module_& m) {
  bind_module(m);
  bind_layers(m);
  bind_gpt(m);
}

}  // namespace tinyllm::python
