#include "blas.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace tinyllm::detail {
namespace {

// BLAS counts in int; a product too large for it is refused, never truncated.
blasint blas_dim(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw std::invalid_argument(fmt::format("BLAS: a matrix dim must fit in an int (got {})", n));
  }
  return static_cast<blasint>(n);
}

}  // namespace

// c[m, n] = alpha · op(a) · op(b) + beta · c, all row-major with the given
// leading dims. BLAS rejects a leading dim of 0 even for empty matrices, hence
// the max with 1; an empty result needs no call at all.
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, double alpha, const double* a,
          std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blas_dim(m),
              blas_dim(n), blas_dim(k), alpha, a, blas_dim(std::max<std::size_t>(lda, 1)), b,
              blas_dim(std::max<std::size_t>(ldb, 1)), beta, c, blas_dim(std::max<std::size_t>(ldc, 1)));
}

void set_blas_threads(int threads) { openblas_set_num_threads(std::max(threads, 1)); }

}  // namespace tinyllm::detail
