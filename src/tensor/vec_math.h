// vexp(x): exp(x) for doubles as branch-free inline arithmetic, so that g++
// -O3 vectorises the loops that call it (GELU, the attention softmax, cross-
// entropy). glibc's exp is a scalar library call, and g++ vectorises a loop
// calling std::exp only under -ffast-math, which this library does not use.
// Not a general libm: only exp, only round-to-nearest. Private to the tensor
// layer (not installed). Accuracy: at most 1 ulp from std::exp over the whole
// range, subnormal results included (tests/tensor/vec_math_test.cpp); under
// 0.96 ulp from the true value on 300k points checked against mpmath.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "../support/target_clones.h"  // loops that call vexp are built as AVX2 clones too, as AdamW's update is

namespace tinyllm::detail {

// Cody and Waite's scheme, as in fdlibm's e_exp.c, in four steps:
//   1. Clamp |x| to 746. exp is already 0 below −745.14 and +inf above
//      709.79, and stays so at ±746, so the clamp changes no result; it
//      keeps k below in range. NaN fails the compare and stays NaN. The
//      bound is copysign(746, x), not a literal: with a constant on the
//      clamped path g++ folds the rest to a constant there, the paths no
//      longer merge without running FP operations speculatively (which
//      -ftrapping-math forbids), and the loop does not vectorise.
//   2. x = k·ln2 + r, k = round(x/ln2), |r| <= ln2/2. Adding the 1.5·2^52
//      shifter rounds x/ln2 to an integer held in the low mantissa bits, so
//      no double-to-int64 conversion is needed (SSE2 and AVX2 have none).
//      ln2 = kLn2Hi + kLn2Lo with 32 significant bits in kLn2Hi, so that
//      k·kLn2Hi (|k| <= 1076) and x − k·kLn2Hi are exact.
//   3. e^r = 1 + r + r²·tail(r), tail the Taylor series Σ r^(n−2)/n! for
//      n = 2..13: the first term left out is below (ln2/2)¹⁴/14! < 2^−57.
//      tail is evaluated by Estrin's scheme (pairs, then pairs of pairs):
//      Horner's would be a chain of 24 dependent operations that bounds the
//      loop by latency. r²·tail is added to r before the 1, so its rounding
//      errors are scaled down by r².
//   4. e^x = e^r · 2^k1 · 2^k2, k1 = ⌊k/2⌋, k2 = k − k1, each power built in
//      the exponent field. A single 2^k would not do: k reaches ±1076,
//      outside the normal exponents. The first product is exact; the second
//      rounds once, to a subnormal, a normal or +inf.
inline double vexp(double x) {
  constexpr double kLimit = 746.0;
  constexpr double kInvLn2 = 0x1.71547652b82fep0;
  constexpr double kLn2Hi = 0x1.62e42feep-1;
  constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
  constexpr double kShifter = 0x1.8p52;
  constexpr std::uint64_t kShifterBits = std::bit_cast<std::uint64_t>(kShifter);

  x = std::fabs(x) > kLimit ? std::copysign(kLimit, x) : x;

  const double shifted = x * kInvLn2 + kShifter;
  const double k = shifted - kShifter;
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;

  const double r2 = r * r;
  const double r4 = r2 * r2;
  const double r8 = r4 * r4;
  const double p2to3 = 1.0 / 2.0 + r * (1.0 / 6.0);
  const double p4to5 = 1.0 / 24.0 + r * (1.0 / 120.0);
  const double p6to7 = 1.0 / 720.0 + r * (1.0 / 5040.0);
  const double p8to9 = 1.0 / 40320.0 + r * (1.0 / 362880.0);
  const double p10to11 = 1.0 / 3628800.0 + r * (1.0 / 39916800.0);
  const double p12to13 = 1.0 / 479001600.0 + r * (1.0 / 6227020800.0);
  const double p2to5 = p2to3 + r2 * p4to5;
  const double p6to9 = p6to7 + r2 * p8to9;
  const double p10to13 = p10to11 + r2 * p12to13;
  const double tail = (p2to5 + r4 * p6to9) + r8 * p10to13;
  const double er = (r2 * tail + r) + 1.0;

  // k modulo 2^64, and ⌊k/2⌋ by a logical shift of k + 2048 > 0: SSE2 and
  // AVX2 have no 64-bit arithmetic shift.
  const std::uint64_t k_bits = std::bit_cast<std::uint64_t>(shifted) - kShifterBits;
  const std::uint64_t k1 = ((k_bits + 2048) >> 1) - 1024;
  const std::uint64_t k2 = k_bits - k1;
  const double scale1 = std::bit_cast<double>((k1 + 1023) << 52);
  const double scale2 = std::bit_cast<double>((k2 + 1023) << 52);
  return (er * scale1) * scale2;
}

}  // namespace tinyllm::detail
