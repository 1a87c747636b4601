// The one reduction every backend uses, so that threads, processes and MPI
// all leave the same bits: terms summed in rank order, then divided by p
// for Mean. Internal, not installed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist::detail {

// target[i] = ((x_0[i] + x_1[i]) + …) + x_{p−1}[i], then / p for Mean, with
// x_q = terms[q]. Blocks of kBlock values keep the running sum in L1 and the
// adds vectorised without changing their order. target may be a term
// itself, but must not partly overlap one.
inline void reduce_in_rank_order(std::span<const double* const> terms, std::size_t count, ReduceOp op, double* target) {
  constexpr std::size_t kBlock = 512;
  const double p = static_cast<double>(terms.size());
  double sum[kBlock];
  for (std::size_t s = 0; s < count; s += kBlock) {
    const std::size_t m = std::min(kBlock, count - s);
    std::copy_n(terms[0] + s, m, sum);
    for (std::size_t q = 1; q < terms.size(); ++q) {
      const double* x = terms[q] + s;
      for (std::size_t i = 0; i < m; ++i) sum[i] += x[i];
    }
    if (op == ReduceOp::Mean) {
      for (std::size_t i = 0; i < m; ++i) sum[i] /= p;
    }
    std::copy_n(sum, m, target + s);
  }
}

}  // namespace tinyllm::dist::detail
