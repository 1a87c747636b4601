// The flat parameter vector that DDP and ZeroOptimizer share (docs/ZERO.md's
// w ∈ R^n: every parameter laid end to end in parameters() order), and the
// checks that every rank holds the same list before any large collective.
// Every copy between the tensors and a flat vector, and every view of one,
// takes its offsets from one FlatLayout (flat_layout.h), so flattening and
// unflattening cannot disagree on the order (pitfall 9 in docs/ZERO.md).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "tinyllm/distributed/comm.h"
#include "tinyllm/distributed/flat_layout.h"
#include "tinyllm/optim/optimizer.h"
#include "tinyllm/tensor/storage.h"
#include "tinyllm/tensor/tensor.h"

namespace tinyllm::dist {

std::size_t flat_length(const std::vector<Tensor>& params);  // n

void flatten_data(const std::vector<Tensor>& params, std::span<double> flat);
void unflatten_data(std::span<const double> flat, const std::vector<Tensor>& params);

// The gradients as one flat vector, each .grad a view of its segment
// (PyTorch DDP's gradient_as_bucket_view): backward adds straight into the
// vector, and the collective runs on it in place, with no copy in or out.
// ZeRO stages 2 and 3 release the vector after each reduce-scatter.
class FlatGrads {
 public:
  // Takes the vector (see allocate()).
  explicit FlatGrads(std::vector<Tensor> params);
  // Grads still viewing the vector become the tensors' own copies.
  ~FlatGrads();
  FlatGrads(const FlatGrads&) = delete;
  FlatGrads& operator=(const FlatGrads&) = delete;

  // Every .grad of parameters [first, last) becomes a view of its segment:
  // one held elsewhere is copied in, a missing one becomes zeros. Returns
  // their part of the vector (by default, all of it).
  std::span<double> adopt(std::size_t first = 0, std::size_t last = static_cast<std::size_t>(-1));
  // Drops every .grad and gives the vector back to the storage cache.
  void release();
  // Takes the vector if it was released, and points each parameter's
  // grad_home at its segment. Grads that exist already stay where they are
  // until adopt().
  void allocate();
  // Values held: the vector, and any grad outside it.
  std::size_t held() const;

 private:
  std::vector<Tensor> params_;
  FlatLayout layout_;
  Storage flat_;
};

// The parameters' values as one flat vector, each tensor's data a view of
// its segment (FSDP's flat parameter): an all_gather writes straight into
// the parameters. ZeRO stage 3 releases the vector between steps.
class FlatParams {
 public:
  // Copies the values into the vector and makes them views of it. Deferred
  // parameters (tensor/deferred_init.h) start released instead.
  explicit FlatParams(std::vector<Tensor> params);
  // Values still viewing the vector become the tensors' own copies.
  ~FlatParams();
  FlatParams(const FlatParams&) = delete;
  FlatParams& operator=(const FlatParams&) = delete;

  std::span<double> span() const { return flat_.span(); }  // empty while released
  // The vector goes back to the storage cache; the tensors hold no values.
  void release();
  // Takes the vector again, its values unset (for an all_gather to fill),
  // and makes the tensors views of it.
  void allocate();

 private:
  void view_values();

  std::vector<Tensor> params_;
  FlatLayout layout_;
  Storage flat_;
};

// Every rank's parameters become rank 0's, in one broadcast of the flat vector.
void broadcast_params(Comm& comm, const std::vector<Tensor>& params);

// Throws std::invalid_argument on every rank, prefixed by `who`, when the
// list is empty, holds an undefined tensor or one tensor twice, or when the
// ranks disagree on the number of parameters, their shapes or `stage` (the
// ZeRO stage, 0 for DDP). One small all_gather, before any collective of
// length n.
// Also when they disagree on which are frozen (requires_grad false), or
// every one is.
void check_same_parameters(Comm& comm, const std::vector<Tensor>& params, const char* who, int stage);

// Moves the frozen parameters out of the list, in order, and returns them:
// DDP and ZeroOptimizer leave them whole and untouched on every rank, as
// torch's DDP and optimizers skip a parameter that never gets a grad.
std::vector<Tensor> take_frozen(std::vector<Tensor>& params);

// Throws std::invalid_argument on every rank, prefixed by `who`, when the
// ranks' optimizers differ in class or hyperparameters (describe()): each
// would step its own chunk by its own rule. One small all_gather, and two
// broadcasts of the descriptions when they differ.
void check_same_optimizer(Comm& comm, const optim::Optimizer& optimizer, const char* who);

// Throws std::invalid_argument on every rank, naming the ranks, when some
// rank brings no gradient at all to a reduction (backward() never ran):
// no parameter has a grad, and none was reduced during backward (`reduced`).
void check_every_rank_has_grads(Comm& comm, const std::vector<Tensor>& params, bool reduced, const char* who);

// What stands in for the initial broadcast when the ranks make their own
// chunks of a deferred model: their recipes must give the same values (one
// seed, one checkpoint), compared by the first value of every parameter.
void check_same_start(Comm& comm, const std::vector<Tensor>& params, const char* who);

// Elements [a, a + chunk.size()) of the flat vector of deferred
// parameters, made from their recipes; the parameters then forget them and
// stay released, as stage 3 keeps them between steps.
void init_chunk(const std::vector<Tensor>& params, std::size_t a, std::span<double> chunk);

// Copies the grads of params [first, last) end to end into flat (zeros
// where a parameter has none) and drops them; `layout` is the params'.
void take_grads(const std::vector<Tensor>& params, const FlatLayout& layout, std::size_t first, std::size_t last,
                std::span<double> flat);

}  // namespace tinyllm::dist
