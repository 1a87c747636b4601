// tinyllm._C.nn: Module (subclassable from Python: python/tinyllm/nn.py adds
// attribute registration and __call__), Linear, LayerNorm, Embedding, and
// GPT with GPTConfig. Token ids come in as NumPy integer arrays [B, T].
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "tinyllm/nn/embedding.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/nn/layer_norm.h"
#include "tinyllm/nn/linear.h"
#include "tinyllm/nn/module.h"

namespace tinyllm::python {

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// Opens Module's protected registration to the binding, for modules written
// in Python: the member pointers are formed here, where they are accessible,
// and work on any Module.
struct ModuleAccess : nn::Module {
  static Tensor& add_parameter(nn::Module& m, std::string name, Tensor t) {
    return (m.*&ModuleAccess::register_parameter)(std::move(name), std::move(t));
  }
  static void add_module(nn::Module& m, std::string name, std::shared_ptr<nn::Module> child) {
    using Register = std::shared_ptr<nn::Module> (nn::Module::*)(std::string, std::shared_ptr<nn::Module>);
    const Register add = &ModuleAccess::register_module<nn::Module>;
    (m.*add)(std::move(name), std::move(child));
  }
};

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

}  // namespace

void bind_nn(py::module_& m) {
  py::class_<nn::Module, std::shared_ptr<nn::Module>>(m, "Module", "Parameters and submodules, in registration order")
      .def(py::init<>())
      .def("parameters", &nn::Module::parameters)
      .def("named_parameters", &nn::Module::named_parameters)
      .def("num_parameters", &nn::Module::num_parameters)
      .def("zero_grad", &nn::Module::zero_grad)
      .def(
          "_register_parameter",
          [](nn::Module& self, std::string name, Tensor t) {
            return ModuleAccess::add_parameter(self, std::move(name), std::move(t));
          },
          py::arg("name"), py::arg("tensor"))
      .def(
          "_register_module",
          [](nn::Module& self, std::string name, std::shared_ptr<nn::Module> child) {
            ModuleAccess::add_module(self, std::move(name), std::move(child));
          },
          py::arg("name"), py::arg("module"));

  py::class_<nn::Linear, nn::Module, std::shared_ptr<nn::Linear>>(m, "Linear", "y = x · weightᵀ + bias")
      .def(py::init([](std::size_t in, std::size_t out, bool bias, double std, std::uint64_t seed) {
             Generator gen(seed);
             return std::make_shared<nn::Linear>(in, out, gen, bias, std);
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::kw_only(),
           py::arg("std") = 0.02, py::arg("seed") = 0)
      .def("forward", &nn::Linear::forward, Release())
      .def_readonly("weight", &nn::Linear::weight)
      .def_property_readonly("bias", [](const nn::Linear& l) { return optional_tensor(l.bias); });

  py::class_<nn::LayerNorm, nn::Module, std::shared_ptr<nn::LayerNorm>>(m, "LayerNorm", "LayerNorm over the last dim")
      .def(py::init<std::size_t, double>(), py::arg("normalized_shape"), py::arg("eps") = 1e-5)
      .def("forward", &nn::LayerNorm::forward, Release())
      .def_readonly("weight", &nn::LayerNorm::weight)
      .def_readonly("bias", &nn::LayerNorm::bias)
      .def_readonly("eps", &nn::LayerNorm::eps);

  py::class_<nn::Embedding, nn::Module, std::shared_ptr<nn::Embedding>>(m, "Embedding", "A table of rows by token id")
      .def(py::init([](std::size_t num, std::size_t dim, double std, std::uint64_t seed) {
             Generator gen(seed);
             return std::make_shared<nn::Embedding>(num, dim, gen, std);
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::kw_only(), py::arg("std") = 0.02,
           py::arg("seed") = 0)
      .def("forward",
           [](const nn::Embedding& e, const py::object& token_ids) {
             const IntArray ids = int_array(token_ids, "Embedding.forward");
             std::span<const int> span(ids.data(), static_cast<std::size_t>(ids.size()));
             const Shape shape(ids.shape(), ids.shape() + ids.ndim());
             py::gil_scoped_release release;
             return e.forward(span, shape);
           })
      .def_readonly("weight", &nn::Embedding::weight);

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
      .def_property_readonly("config", &nn::GPT::config)
      .def(
          "forward",
          [](const nn::GPT& model, const py::object& idx) {
            const Tokens t = tokens(idx, "forward");
            py::gil_scoped_release release;
            return model.forward(t.ids, t.batch, t.seq);
          },
          py::arg("idx"), "logits [B, T, V] of token ids [B, T]")
      .def(
          "loss",
          [](const nn::GPT& model, const py::object& inputs, const py::object& targets) {
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

}  // namespace tinyllm::python
