#include "blas.h"

#include <cblas.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <stdexcept>
#include <vector>

#include "tinyllm/tensor/parallel.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm::detail {
namespace {

// BLAS counts in int; a product too large for it is refused, never truncated.
blasint blas_dim(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw std::invalid_argument(fmt::format("BLAS: a matrix dim must fit in an int (got {})", n));
  }
  return static_cast<blasint>(n);
}

// OpenBLAS maps a work buffer of some 128 MiB for each thread that calls
// it, on its first call, and when the system refuses, it retries forever
// (or exits the process). So a thread's first product first makes sure the
// address space is there, and throws OutOfMemory where it is not.
constexpr std::size_t kBlasBuffer = std::size_t{132} << 20;
thread_local bool blas_buffer_checked = false;

void check_blas_buffer() {
  if (blas_buffer_checked) return;
  void* probe = mmap(nullptr, kBlasBuffer, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) throw OutOfMemory(kBlasBuffer, "OpenBLAS's work buffer");
  munmap(probe, kBlasBuffer);
  blas_buffer_checked = true;
}

}  // namespace

// c[m, n] = alpha · op(a) · op(b) + beta · c, all row-major with the given
// leading dims. BLAS rejects a leading dim of 0 even for empty matrices, hence
// the max with 1; an empty result needs no call at all.
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, double alpha, const double* a,
          std::size_t lda, const double* b, std::size_t ldb, double beta, double* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  check_blas_buffer();
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blas_dim(m),
              blas_dim(n), blas_dim(k), alpha, a, blas_dim(std::max<std::size_t>(lda, 1)), b,
              blas_dim(std::max<std::size_t>(ldb, 1)), beta, c, blas_dim(std::max<std::size_t>(ldc, 1)));
}

}  // namespace tinyllm::detail

namespace tinyllm {

void set_num_threads(int threads) { openblas_set_num_threads(std::max(threads, 1)); }

int get_num_threads() { return openblas_get_num_threads(); }

// Squares of 384 fill the cores' caches the way a large product does (about
// 5 ms a call at 45 GFLOP/s), and the best of six calls after a warm-up
// leaves out the first touch of the pages and any preemption.
double dgemm_peak_gflops() {
  constexpr std::size_t n = 384;
  constexpr int calls = 6;
  std::vector<double> a(n * n, 0.5), b(n * n, 0.25), c(n * n, 0.0);
  const int threads = get_num_threads();
  set_num_threads(1);
  double best = 0;
  for (int i = 0; i <= calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    detail::gemm(false, false, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) best = std::max(best, 2.0 * n * n * n / seconds * 1e-9);
  }
  set_num_threads(threads);
  return best;
}

}  // namespace tinyllm
