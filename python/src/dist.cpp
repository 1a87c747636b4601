// tinyllm._C.dist: Comm and its collectives on tensors and NumPy arrays,
// chunk_bounds, the two launchers (ranks as threads, ranks as forked
// processes) running a Python function on every rank, mpi_comm() under
// mpirun, DDP and ZeroOptimizer. Every collective releases the GIL, so rank
// threads waiting for each other never wait for the GIL as well.
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/comm.h"
#include "tinyllm/distributed/ddp.h"
#include "tinyllm/distributed/errors.h"
#include "tinyllm/distributed/procs_comm.h"
#include "tinyllm/distributed/threads_comm.h"
#include "tinyllm/distributed/zero.h"
#if TINYLLM_WITH_MPI
#include "tinyllm/distributed/mpi_comm.h"
#endif

namespace tinyllm::python {

namespace {

// Python's handle on one rank's Comm. A launcher's Comm lives only while the
// rank's function runs; the handle is cut when it returns, so a Comm kept
// beyond it raises instead of touching freed memory.
class CommHandle {
 public:
  explicit CommHandle(dist::Comm* comm, std::shared_ptr<void> owner = {}) : comm_(comm), owner_(std::move(owner)) {}
  dist::Comm& get() const {
    if (comm_ == nullptr) throw py::value_error("Comm: used after the spawn that made it returned");
    return *comm_;
  }
  void cut() { comm_ = nullptr; }

 private:
  dist::Comm* comm_;
  std::shared_ptr<void> owner_;
};
using CommPtr = std::shared_ptr<CommHandle>;

dist::ReduceOp reduce_op(const std::string& op) {
  if (op == "sum") return dist::ReduceOp::Sum;
  if (op == "mean") return dist::ReduceOp::Mean;
  throw py::value_error("Comm: op must be 'sum' or 'mean' (got '" + op + "')");
}

// A tensor's values or an array's memory, for a collective to work on in place.
std::span<double> values_of(const py::object& x, const std::string& who) {
  if (py::isinstance<Tensor>(x)) return x.cast<Tensor>().data();
  if (py::isinstance<py::array>(x)) return float64_span(x.cast<py::array>(), who);
  throw py::type_error(who + ": expected a tinyllm.Tensor or a numpy.ndarray (got " +
                       std::string(py::str(py::type::of(x).attr("__name__"))) + ")");
}

// A new output of length n shaped like x's kind: a tensor for a tensor, an array otherwise.
py::object new_like(const py::object& x, std::size_t n) {
  if (py::isinstance<Tensor>(x)) return py::cast(Tensor::zeros({n}));
  return py::array_t<double>(static_cast<py::ssize_t>(n));
}

dist::CommOptions options(double timeout_s) {
  return {.timeout = dist::timeout_from_seconds(timeout_s, "spawn: timeout")};
}

// Runs fn(comm) as this rank, holding the GIL; a Python exception leaves as
// a C++ one carrying its text, so the launcher fails the other ranks fast.
void run_rank(const py::function& fn, dist::Comm& comm) {
  auto handle = std::make_shared<CommHandle>(&comm);
  try {
    fn(handle);
    handle->cut();
  } catch (py::error_already_set& error) {
    handle->cut();
    throw std::runtime_error(error.what());
  }
}

// DDP and ZeroOptimizer keep the handle beside the C++ object, so they too
// raise once their Comm is gone.
dist::BucketOptions bucket_options(bool bitwise) {
  dist::BucketOptions options;
  options.bitwise = bitwise;
  return options;
}

struct BoundDDP : dist::DDP {
  BoundDDP(std::shared_ptr<nn::Module> model, CommPtr c, bool bitwise)
      : dist::DDP(std::move(model), c->get(), bucket_options(bitwise)), comm(std::move(c)) {}
  CommPtr comm;
};

dist::ZeroOptions zero_options(bool bitwise) {
  dist::ZeroOptions options;
  options.buckets = bucket_options(bitwise);
  return options;
}

struct BoundZero {
  BoundZero(const Factory& make_inner, std::vector<Tensor> params, CommPtr c, int stage, bool bitwise)
      : comm(std::move(c)), zero(make_inner.make, std::move(params), comm->get(), stage, zero_options(bitwise)) {}
  CommPtr comm;
  dist::ZeroOptimizer zero;
  dist::ZeroOptimizer& get() {
    comm->get();
    return zero;
  }
};

#if TINYLLM_WITH_MPI
struct MpiState {
  dist::MpiSession session;
  dist::MpiComm comm;
};
#endif

// chunk_bounds and Comm, its collectives on arrays and tensors.
void bind_comm(py::module_& m) {
  m.def(
      "chunk_bounds", [](std::size_t n, int p, int r) { return dist::chunk_bounds(n, p, r); }, py::arg("n"),
      py::arg("p"), py::arg("r"), "Rank r's chunk [a, b) of n values over p ranks; the first n % p are one longer");

  py::class_<CommHandle, CommPtr>(m, "Comm", "One rank's handle on a group; every call is collective")
      .def_property_readonly("rank", [](const CommHandle& c) { return c.get().rank(); })
      .def_property_readonly("size", [](const CommHandle& c) { return c.get().size(); })
      .def(
          "broadcast",
          [](const CommHandle& c, py::object x, int root) {
            std::span<double> buf = values_of(x, "broadcast");
            dist::Comm& comm = c.get();
            py::gil_scoped_release release;
            comm.broadcast(buf, root);
            return x;
          },
          py::arg("x"), py::arg("root") = 0, "x becomes root's x, in place; returns x")
      .def(
          "all_reduce",
          [](const CommHandle& c, py::object x, const std::string& op) {
            std::span<double> buf = values_of(x, "all_reduce");
            const dist::ReduceOp reduce = reduce_op(op);
            dist::Comm& comm = c.get();
            py::gil_scoped_release release;
            comm.all_reduce(buf, reduce);
            return x;
          },
          py::arg("x"), py::arg("op") = "sum", "x becomes the sum (or mean) over ranks, in place; returns x")
      .def(
          "reduce_scatter",
          [](const CommHandle& c, py::object x, py::object out, const std::string& op) {
            std::span<double> in = values_of(x, "reduce_scatter");
            dist::Comm& comm = c.get();
            if (out.is_none()) {
              auto [a, b] = dist::chunk_bounds(in.size(), comm.size(), comm.rank());
              out = new_like(x, b - a);
            }
            std::span<double> chunk = values_of(out, "reduce_scatter");
            const dist::ReduceOp reduce = reduce_op(op);
            py::gil_scoped_release release;
            comm.reduce_scatter(in, chunk, reduce);
            return out;
          },
          py::arg("x"), py::arg("out") = py::none(), py::arg("op") = "sum",
          "this rank's chunk_bounds chunk of the sum (or mean) of every rank's x, into out; returns out")
      .def(
          "all_gather",
          [](const CommHandle& c, py::object chunk, py::object out) {
            std::span<double> mine = values_of(chunk, "all_gather"), all = values_of(out, "all_gather");
            dist::Comm& comm = c.get();
            py::gil_scoped_release release;
            comm.all_gather(mine, all);
            return out;
          },
          py::arg("chunk"), py::arg("out"), "every rank's chunk into out, laid out by chunk_bounds; returns out")
      .def("barrier", [](const CommHandle& c) {
        dist::Comm& comm = c.get();
        py::gil_scoped_release release;
        comm.barrier();
      });
}

// The launchers: ranks as threads or as forked processes.
void bind_launchers(py::module_& m) {
  // The launcher's poll (about every 50 ms) runs this thread's signal
  // handlers, so Ctrl-C raises here, then poll(), which raises at spawn's
  // deadline. Either error stops the run; on threads it is also raised
  // inside every rank still in Python (PyThreadState_SetAsyncExc), since a
  // rank thread cannot be killed.
  m.def(
      "run_threads",
      [](int world, const py::function& fn, double timeout_s, const py::function& poll) {
        const dist::CommOptions opts = options(timeout_s);
        // Each rank's Python thread id while its fn runs, 0 otherwise; read and written under the GIL.
        std::vector<unsigned long> running(static_cast<std::size_t>(world), 0);
        py::gil_scoped_release release;
        dist::run_threads(
            world,
            [&](dist::Comm& comm) {
              py::gil_scoped_acquire gil;
              unsigned long& id = running[static_cast<std::size_t>(comm.rank())];
              id = PyThread_get_thread_ident();
              try {
                run_rank(fn, comm);
              } catch (...) {
                id = 0;
                throw;
              }
              id = 0;
            },
            opts,
            [&] {
              py::gil_scoped_acquire gil;
              try {
                if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                poll();
              } catch (py::error_already_set& error) {
                for (unsigned long id : running) {
                  if (id != 0) PyThreadState_SetAsyncExc(id, error.type().ptr());
                }
                throw;
              }
            });
      },
      py::arg("world"), py::arg("fn"), py::arg("timeout_s"), py::arg("poll"));

  // The GIL stays held: fork() runs on this thread, so each child starts as
  // the GIL's only holder, which PyOS_AfterFork_Child (os.fork's own
  // child-side step) turns into a consistent interpreter.
  m.def(
      "run_procs",
      [](int world, const py::function& fn, double timeout_s, const py::function& poll) {
        dist::run_procs(
            world,
            [&](dist::Comm& comm) {
              PyOS_AfterFork_Child();
              run_rank(fn, comm);
            },
            options(timeout_s),
            [&] {
              if (PyErr_CheckSignals() != 0) throw py::error_already_set();
              poll();
            });
      },
      py::arg("world"), py::arg("fn"), py::arg("timeout_s"), py::arg("poll"));
}

// Under mpirun: the world's Comm, the job's abort, and whether mpirun started this process.
void bind_mpi(py::module_& m) {
  m.def("mpi_comm", []() -> CommPtr {
#if TINYLLM_WITH_MPI
    static std::shared_ptr<MpiState> state;
    if (!state) state = std::make_shared<MpiState>();
    return std::make_shared<CommHandle>(&state->comm, state);
#else
    throw std::runtime_error("mpi_comm: this tinyllm was built without MPI (TINYLLM_WITH_MPI=OFF)");
#endif
  });
  // MPI_Abort(MPI_COMM_WORLD, code) when MPI is running; nothing otherwise.
  m.def(
      "abort_mpi_job",
      []([[maybe_unused]] int code) {
#if TINYLLM_WITH_MPI
        dist::abort_mpi_job(code);
#endif
      },
      py::arg("code"));
  m.def("launched_by_mpirun", []() {
#if TINYLLM_WITH_MPI
    return dist::launched_by_mpirun();
#else
    return false;
#endif
  });
}

void bind_data_parallel(py::module_& m) {
  py::class_<BoundDDP, nn::Module, std::shared_ptr<BoundDDP>>(m, "DDP",
                                                              "Data parallelism: rank 0's weights, mean grads")
      .def(py::init([](std::shared_ptr<nn::Module> model, CommPtr comm, bool bitwise) {
             py::gil_scoped_release release;
             return std::make_shared<BoundDDP>(std::move(model), std::move(comm), bitwise);
           }),
           py::arg("model"), py::arg("comm"), py::arg("bitwise") = false, py::keep_alive<1, 2>())
      .def_property_readonly("module", [](const BoundDDP& d) { return d.named_children().front().second; })
      .def("sync_grads",
           [](BoundDDP& d) {
             d.comm->get();
             py::gil_scoped_release release;
             d.sync_grads();
           })
      .def(
          "add_leaf",
          [](BoundDDP& d) {
            d.comm->get();
            d.add_leaf();
          },
          "bitwise mode: after each leaf's backward (docs/BITWISE.md)")
      .def(
          "clip_grad_norm",
          [](BoundDDP& d, double max_norm) {
            d.comm->get();
            py::gil_scoped_release release;
            return d.clip_grad_norm(max_norm);
          },
          py::arg("max_norm"))
      .def("grad_bytes", &BoundDDP::grad_bytes);

  py::class_<BoundZero>(m, "ZeroOptimizer", "ZeRO stages 1 to 3 around an unchanged inner optimizer")
      .def(py::init([](const Factory& make_inner, const py::iterable& params, CommPtr comm, int stage, bool bitwise) {
             std::vector<Tensor> tensors = tensor_list(params, "ZeroOptimizer");
             py::gil_scoped_release release;
             return std::make_unique<BoundZero>(make_inner, std::move(tensors), std::move(comm), stage, bitwise);
           }),
           py::arg("make_inner"), py::arg("params"), py::arg("comm"), py::arg("stage"), py::arg("bitwise") = false)
      .def(
          "add_leaf", [](BoundZero& z) { z.get().add_leaf(); }, "bitwise mode: after each leaf's backward", Release())
      .def(
          "gather", [](BoundZero& z) { z.get().gather(); }, Release())
      .def(
          "step", [](BoundZero& z) { z.get().step(); }, Release())
      .def(
          "zero_grad", [](BoundZero& z) { z.get().zero_grad(); }, Release())
      .def(
          "clip_grad_norm", [](BoundZero& z, double max_norm) { return z.get().clip_grad_norm(max_norm); },
          py::arg("max_norm"), Release())
      .def("memory_bytes",
           [](const BoundZero& z) {
             const dist::MemoryBytes b = z.zero.memory_bytes();
             py::dict out;
             out["params"] = b.params;
             out["grads"] = b.grads;
             out["optimizer"] = b.optimizer;
             return out;
           })
      .def_property_readonly("stage", [](const BoundZero& z) { return z.zero.stage(); })
      .def_property_readonly("chunk", [](const BoundZero& z) { return z.zero.chunk(); })
      .def_property_readonly("master_chunk", [](const BoundZero& z) { return z.zero.master_chunk(); });
}

}  // namespace

void bind_dist(py::module_& m) {
  py::register_exception<dist::CommError>(m, "CommError", PyExc_RuntimeError);
  bind_comm(m);
  bind_launchers(m);
  bind_mpi(m);
  bind_data_parallel(m);
}

}  // namespace tinyllm::python
