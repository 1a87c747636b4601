// tinyllm._C: the compiled half of the tinyllm package. The Python files in
// python/tinyllm/ re-export it under the public names (tinyllm.Tensor,
// tinyllm.nn, tinyllm.optim, tinyllm.dist, tinyllm.dist.zero).
#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "tinyllm's C++ library: tensors with autograd, a GPT, SGD and AdamW, collectives, DDP and ZeRO";
  auto nn = m.def_submodule("nn", "Modules");
  auto optim = m.def_submodule("optim", "Optimizers");
  auto dist = m.def_submodule("dist", "Collectives, DDP and ZeRO");
  tinyllm::python::bind_tensor(m);
  tinyllm::python::bind_nn(nn);
  tinyllm::python::bind_optim(optim);
  tinyllm::python::bind_dist(dist);
}
