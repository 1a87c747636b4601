// The one door to OpenBLAS inside the tensor layer (private, not installed):
// row-major dgemm with size_t sizes, checked against BLAS's int.
#pragma once

#include <cstddef>

namespace tinyllm::detail {

// c[m, n] = alpha · op(a) · op(b) + beta · c, row-major with the given
// leading dims; op transposes when asked. Empty products are fine.
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, double alpha, const double* a,
          std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc);

}  // namespace tinyllm::detail
