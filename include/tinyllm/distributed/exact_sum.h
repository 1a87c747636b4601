// Sums whose bits do not depend on the order of their terms, nor on how the
// terms are split among ranks (docs/BITWISE.md): the sums under bitwise mode.
//
// ExactSum: each term ("leaf", one window's gradient) is split into three
// limbs on fixed grids, q0 + q1 + q2 with q_k an integer multiple of u_k
// (u0 = 2^-20, u1 = 2^-60, u2 = 2^-100). Sums of such integers are exact in
// doubles while they stay below 2^53 units, so the limb arrays of any
// number of ranks may be added in any order (an all_reduce or a
// reduce_scatter does it) and still hold the exact sums S0, S1, S2; the
// value is then the fixed expression (S0 + S1) + S2.
//
// Range: |term element| < 2^20 and at most 2^11 terms in all (over every
// rank). An element out of range, inf or NaN becomes NaN in its limbs and
// so in the sum. Resolution 2^-100: each term is rounded to that grid
// (nearest, ties to even) once, as a property of the term, not of the split.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace tinyllm::dist {

class ExactSum {
 public:
  static constexpr std::size_t kLimbs = 3;
  static constexpr double kMaxMagnitude = 0x1p20;  // |element| must be below it
  static constexpr std::size_t kMaxTerms = 2048;   // over every rank together

  explicit ExactSum(std::size_t n = 0) { resize(n); }

  // n values, all zero.
  void resize(std::size_t n);
  // Back to zero, keeping the size and the storage.
  void clear();
  std::size_t size() const { return n_; }
  std::size_t terms() const { return terms_; }

  // Adds one term of size() values. Throws std::invalid_argument when x has
  // another size, std::length_error past kMaxTerms terms on this rank.
  void add(std::span<const double> x);
  // A term given in parts: add_part adds x to elements [offset, offset +
  // x.size()) of the current term (elements no part names are zero), and
  // end_term counts it. std::out_of_range past size(); the same
  // std::length_error as add.
  void add_part(std::size_t offset, std::span<const double> x);
  // add_part, and x becomes zeros, in the same pass over it.
  void take_part(std::size_t offset, std::span<double> x);
  void end_term();

  // All 3·size() limbs, limb-major: limb(0), limb(1), limb(2) end to end, so
  // that one all_reduce carries them, and each limb's element chunk [a, b)
  // is a contiguous range that a reduce_scatter of limb(k) leaves on its rank.
  std::span<double> limbs() { return limbs_; }
  std::span<const double> limbs() const { return limbs_; }
  std::span<double> limb(std::size_t k) { return std::span(limbs_).subspan(k * n_, n_); }

  // out (size() values) becomes the sum; see exact_sum_value.
  void result(std::span<double> out) const;

 private:
  void check_room() const;  // the length_error past kMaxTerms
  // Limb 0 of element `offset`, after the range and room checks.
  double* part_limbs(std::size_t offset, std::size_t size, const char* who);

  std::vector<double> limbs_;
  std::size_t n_ = 0;
  std::size_t terms_ = 0;
};

// out[i] = (S0[i] + S1[i]) + S2[i]: the limbs of any run of elements summed
// over every rank, such as a rank's chunk of each limb after a reduce-scatter.
// Throws std::invalid_argument unless every span has out's size.
void exact_sum_value(std::span<const double> s0, std::span<const double> s1, std::span<const double> s2,
                     std::span<double> out);

// Σ x² over a rank's values, exact in a wide integer on the grid 2^-200 and
// handed out as kSquareLimbs doubles, each an integer below 2^40 (of the
// integer's bits [40j, 40j + 40)). The ranks add these in doubles in any
// order (exact for up to 2^13 ranks) and exact_sum_of_squares_value turns
// the sums into the same double, correctly rounded, for every split of the
// values among the ranks. Range: |x| < 2^40 and at most 2^40 values in all;
// each x² is truncated to the grid. Any x out of range, inf or NaN makes
// every limb NaN, and so the value.
inline constexpr std::size_t kSquareLimbs = 8;
inline constexpr double kMaxSquaredMagnitude = 0x1p40;  // |x| must be below it
std::array<double, kSquareLimbs> exact_sum_of_squares(std::span<const double> x);
double exact_sum_of_squares_value(const std::array<double, kSquareLimbs>& summed_limbs);

}  // namespace tinyllm::dist
