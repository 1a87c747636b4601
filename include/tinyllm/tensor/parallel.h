// The threads behind the tensor ops' matrix products (OpenBLAS's), as
// at::set_num_threads sets them in libtorch, and what one of them can do.
#pragma once

namespace tinyllm {

// How many threads the matrix products may use from now on, in this
// process (a forked rank takes its share of the cores); below 1 counts as 1.
void set_num_threads(int threads);
int get_num_threads();

// The double-precision matrix-product rate of one thread of this machine,
// in GFLOP/s: the best of a few square dgemm calls, timed now (tens of
// milliseconds). The peak that the model FLOP utilisation (MFU) of
// `tinyllm train` and bench/matmul_bench compare against.
double dgemm_peak_gflops();

}  // namespace tinyllm
