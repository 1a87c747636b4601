// The flat parameter vector that DDP and ZeroOptimizer share (the seed's
// w ∈ R^n: every parameter laid end to end in parameters() order), and the
// checks that every rank holds the same list before any large collective.
// Every copy between the tensors and the flat vector walks the same
// offsets, so flattening and unflattening cannot disagree on the order
// (seed pitfall 9).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "tinyllm/dist/comm.h"
#include "tinyllm/tensor/tensor.h"

namespace tinyllm::dist {

std::size_t flat_length(const std::vector<Tensor>& params);  // n

// A parameter without a grad contributes zeros: it counts as a zero gradient.
void flatten_grads(const std::vector<Tensor>& params, std::span<double> flat);
// Every parameter gets a grad (allocated where it had none).
void unflatten_grads(std::span<const double> flat, const std::vector<Tensor>& params);
void flatten_data(const std::vector<Tensor>& params, std::span<double> flat);
void unflatten_data(std::span<const double> flat, const std::vector<Tensor>& params);

// Every rank's parameters become rank 0's, in one broadcast of the flat vector.
void broadcast_params(Comm& comm, const std::vector<Tensor>& params);

// Throws std::invalid_argument on every rank, prefixed by `who`, when the
// list is empty, holds an undefined tensor or one tensor twice, or when the
// ranks disagree on the number of parameters, their shapes or `stage` (the
// ZeRO stage, 0 for DDP). One small all_gather, before any collective of
// length n.
void check_same_parameters(Comm& comm, const std::vector<Tensor>& params, const char* who, int stage);

// Throws std::invalid_argument on every rank, naming the ranks, when some
// rank brings no gradient at all to a reduction (backward() never ran).
void check_every_rank_has_grads(Comm& comm, const std::vector<Tensor>& params, const char* who);

}  // namespace tinyllm::dist
