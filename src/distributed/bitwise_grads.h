// The gradients of bitwise mode (BucketOptions::bitwise, docs/BITWISE.md),
// which the Reducer keeps for DDP and ZeroOptimizer alike: each leaf's gradient (one window's
// backward, with the same shapes whatever the world size) is added into an
// ExactSum of the flat vector, bucket by bucket as backward finishes them
// (GradBuckets' "reduce"), and the step's reduction sums the limbs of
// every rank and divides by the number of leaves of every rank. The mean
// is then a function of the set of leaves alone: the same bits for any
// world size, any split of the leaves among the ranks, and any order.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "grad_buckets.h"
#include "tinyllm/distributed/comm.h"
#include "tinyllm/distributed/exact_sum.h"
#include "tinyllm/distributed/flat_layout.h"
#include "tinyllm/tensor/tensor.h"

namespace tinyllm::dist {

class BitwiseGrads {
 public:
  // The limbs of the flat vector of these parameters, and for a chunk of
  // `chunk` values the three limb chunks a reduce_scatter leaves.
  // drop_grads: add() drops the grads it has added (ZeRO stages 2 and 3,
  // which hold no full gradient) rather than zeroing them in place (DDP and
  // stage 1, whose grads are views of one flat vector).
  BitwiseGrads(std::vector<Tensor> params, std::size_t chunk, bool drop_grads);

  // Adds the grads of parameters [first, last) (none counts as zeros) at
  // their offsets into the current leaf, then zeroes or drops them, so that
  // the next backward starts from zero.
  void add(std::size_t first, std::size_t last);
  // The current leaf is complete: the buckets backward has not added are
  // added (buckets.flush()). std::logic_error, prefixed by `who`, when no
  // backward ran since the last leaf (a second add_leaf() would count an
  // empty leaf and shrink the mean); std::length_error past
  // ExactSum::kMaxTerms.
  void end_leaf(GradBuckets& buckets, const char* who);
  // Drops the leaves added so far (a step that was not taken).
  void clear() { sum_.clear(); }
  // Collective. flat (n values) becomes the mean over every rank's leaves:
  // one all_reduce of the 3n limbs. std::invalid_argument, prefixed by
  // `who`, on every rank when no rank added a leaf; std::range_error on
  // every rank when the mean is not finite (a gradient NaN, infinite or
  // beyond the exact range, ExactSum::kMaxMagnitude).
  void all_reduce_mean(Comm& comm, std::span<double> flat, const char* who);
  // Collective. chunk (this rank's chunk_bounds of n) becomes that part of
  // the mean: one reduce_scatter per limb. The same errors, on every rank
  // (one more all_reduce, of a flag, tells them all).
  void reduce_scatter_mean(Comm& comm, std::span<double> chunk, const char* who);
  // Values held: the limbs and the limb chunks.
  std::size_t held() const { return sum_.limbs().size() + chunk_limbs_.size(); }

 private:
  // The number of leaves over every rank (an all_reduce); the error when 0.
  double leaves(Comm& comm, const char* who);

  std::vector<Tensor> params_;
  FlatLayout layout_;
  bool drop_grads_;
  ExactSum sum_;
  std::vector<double> chunk_limbs_;  // 3 × the chunk, limb-major
};

// Collective. sqrt(Σ x²) over every rank's x (its chunk of a vector), the
// same bits for any split (exact_sum_of_squares).
double exact_norm(Comm& comm, std::span<const double> x);

}  // namespace tinyllm::dist
