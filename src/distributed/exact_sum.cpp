#include "tinyllm/distributed/exact_sum.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "../support/target_clones.h"

namespace tinyllm::dist {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// (x + c) − c with c = 1.5·2^52·u rounds x to a multiple of u (nearest, ties
// to even) when |x| < 2^51·u: x + c then lies in [2^52·u, 2^53·u), where the
// doubles are exactly the multiples of u, and the subtraction is exact. Without
// -ffast-math (-fassociative-math) the compiler may not fold it to x; it
// assumes the default rounding, to nearest. The limbs' ranges: |x| < 2^20 =
// 2^40·u0; |x − q0| <= u0/2 = 2^39·u1; |r − q1| <= u1/2 = 2^39·u2. Each
// remainder is exact: it is a multiple of x's own ulp no larger than |x|.
constexpr double kRound0 = 0x1.8p52 * 0x1p-20;
constexpr double kRound1 = 0x1.8p52 * 0x1p-60;
constexpr double kRound2 = 0x1.8p52 * 0x1p-100;

// x·2^1004 overflows to inf exactly when |x| >= 2^20 (scaling by a power of
// two is exact), and 0·inf and 0·NaN are NaN, else ±0: the range check in
// arithmetic. A select (|x| < 2^20 ? q0 : NaN) would be simpler, but GCC 12
// does not vectorise a loop with one.
constexpr double kOverflowsOutOfRange = 0x1p1004;
static_assert(ExactSum::kMaxMagnitude * (kOverflowsOutOfRange / 2) == 0x1p1023,
              "2^20 · 2^1004 = 2^1024, the first overflow");

// The limbs of x added into s0, s1, s2; with Zero, x is set to zero in the
// same pass (the next backward's gradient then starts from zero without a
// second pass over memory).
template <bool Zero>
TINYLLM_CLONES void add_limbs(std::conditional_t<Zero, double, const double>* __restrict x, double* __restrict s0,
                              double* __restrict s1, double* __restrict s2, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double xi = x[i];
    const double q0 = ((xi + kRound0) - kRound0) + 0.0 * (xi * kOverflowsOutOfRange);
    const double r1 = xi - q0;
    const double q1 = (r1 + kRound1) - kRound1;
    const double r2 = r1 - q1;
    const double q2 = (r2 + kRound2) - kRound2;
    s0[i] += q0;
    s1[i] += q1;
    s2[i] += q2;
    if constexpr (Zero) x[i] = 0.0;
  }
}

// An unsigned integer of 6·64 bits, least significant word first: room for
// Σ x² on the grid 2^-200 (each x² < 2^80, so below 2^280; 2^40 of them below 2^320)
// and for the ranks' 40-bit limb sums added back at bit 40j.
using u64 = std::uint64_t;
using u128 = unsigned __int128;
using Wide = std::array<u64, 6>;
constexpr int kSquareGrid = 200;  // x² is counted in units of 2^-200
constexpr int kLimbBits = 40;

// Σ v·2^s as a Wide, with the carries left for the end: each word adds the
// 64-bit pieces that land on it in 128 bits (room for 2^64 of them), so an
// add has no carry chain to follow.
class WideSum {
 public:
  // v < 2^128 and v·2^s < 2^384.
  void add(u128 v, unsigned s) {
    const std::size_t w = s / 64;
    const unsigned b = s % 64;
    const u128 low = v << b;
    words_[w] += static_cast<u64>(low);
    words_[w + 1] += static_cast<u64>(low >> 64);
    words_[w + 2] += static_cast<u64>((v >> 1) >> (127 - b));  // v >> (128 − b), 0 for b = 0
  }

  WideSum& operator+=(const WideSum& other) {
    for (std::size_t i = 0; i < words_.size(); ++i) words_[i] += other.words_[i];
    return *this;
  }

  Wide carried() const {
    Wide a{};
    u128 carry = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const u128 t = words_[i] + carry;
      a[i] = static_cast<u64>(t);
      carry = t >> 64;
    }
    return a;
  }

 private:
  std::array<u128, 8> words_{};  // two past a Wide, for the pieces of an add at its top word
};

// The 64 bits of a from bit `from` up.
u64 bits_from(const Wide& a, unsigned from) {
  const std::size_t w = from / 64;
  const unsigned b = from % 64;
  const u64 high = w + 1 < a.size() && b ? a[w + 1] << (64 - b) : 0;
  return (a[w] >> b) | high;
}

// x² on the grid, into a: x = m·2^e with m the 53-bit significand, so
// x²·2^200 = m²·2^(2e + 200), truncated below 1. False when x is out of range.
bool add_square(WideSum& a, double x) {
  if (!(std::abs(x) < kMaxSquaredMagnitude)) return false;
  const u64 bits = std::bit_cast<u64>(x);
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  const u64 m = (bits & ((u64{1} << 52) - 1)) | (biased ? u64{1} << 52 : 0);
  const int s = 2 * ((biased ? biased : 1) - 1075) + kSquareGrid;
  const u128 square = u128{m} * m;
  if (s >= 0) {
    a.add(square, static_cast<unsigned>(s));
  } else if (s > -128) {
    a.add(square >> -s, 0);
  }
  return true;
}

// a·2^-200, correctly rounded: the top 64 bits with a sticky bit for the rest
// round once, in the conversion to double.
double wide_value(const Wide& a) {
  int top = static_cast<int>(a.size()) - 1;
  while (top >= 0 && a[top] == 0) --top;
  if (top < 0) return 0.0;
  const int highest_bit = 64 * top + 63 - std::countl_zero(a[top]);
  if (highest_bit < 64) return std::ldexp(static_cast<double>(a[0]), -kSquareGrid);
  const auto from = static_cast<unsigned>(highest_bit - 63);
  bool sticky = (a[from / 64] & ((u64{1} << (from % 64)) - 1)) != 0;
  for (std::size_t i = 0; i < from / 64; ++i) sticky |= a[i] != 0;
  const u64 mantissa = bits_from(a, from) | (sticky ? 1 : 0);
  return std::ldexp(static_cast<double>(mantissa), static_cast<int>(from) - kSquareGrid);
}

}  // namespace

void ExactSum::resize(std::size_t n) {
  limbs_.assign(kLimbs * n, 0.0);
  n_ = n;
  terms_ = 0;
}

void ExactSum::clear() {
  std::fill(limbs_.begin(), limbs_.end(), 0.0);
  terms_ = 0;
}

void ExactSum::check_room() const {
  if (terms_ == kMaxTerms) {
    throw std::length_error(fmt::format("ExactSum: more than {} terms would no longer sum exactly", kMaxTerms));
  }
}

void ExactSum::add(std::span<const double> x) {
  if (x.size() != size()) {
    throw std::invalid_argument(
        fmt::format("ExactSum::add: a term of size {} added to a sum of size {}", x.size(), size()));
  }
  add_part(0, x);
  end_term();
}

void ExactSum::add_part(std::size_t offset, std::span<const double> x) {
  double* s0 = part_limbs(offset, x.size(), "add_part");
  add_limbs<false>(x.data(), s0, s0 + n_, s0 + 2 * n_, x.size());
}

void ExactSum::take_part(std::size_t offset, std::span<double> x) {
  double* s0 = part_limbs(offset, x.size(), "take_part");
  add_limbs<true>(x.data(), s0, s0 + n_, s0 + 2 * n_, x.size());
}

double* ExactSum::part_limbs(std::size_t offset, std::size_t size, const char* who) {
  if (offset > n_ || size > n_ - offset) {
    throw std::out_of_range(
        fmt::format("ExactSum::{}: elements [{}, {}) of a sum of size {}", who, offset, offset + size, n_));
  }
  check_room();
  return limbs_.data() + offset;
}

void ExactSum::end_term() {
  check_room();
  ++terms_;
}

void ExactSum::result(std::span<double> out) const {
  const std::span<const double> all = limbs_;
  exact_sum_value(all.first(n_), all.subspan(n_, n_), all.subspan(2 * n_), out);
}

void exact_sum_value(std::span<const double> s0, std::span<const double> s1, std::span<const double> s2,
                     std::span<double> out) {
  if (s0.size() != out.size() || s1.size() != out.size() || s2.size() != out.size()) {
    throw std::invalid_argument(fmt::format("exact_sum_value: limbs of {}, {} and {} values for {} values", s0.size(),
                                            s1.size(), s2.size(), out.size()));
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = (s0[i] + s1[i]) + s2[i];
}

std::array<double, kSquareLimbs> exact_sum_of_squares(std::span<const double> x) {
  // Four sums, one for each element mod 4, so that their adds need not wait for each other.
  std::array<WideSum, 4> sums;
  bool in_range = true;
  for (std::size_t i = 0; i < x.size(); ++i) in_range &= add_square(sums[i % 4], x[i]);
  if (!in_range) {
    std::array<double, kSquareLimbs> nan;
    nan.fill(kNaN);
    return nan;
  }
  for (std::size_t k = 1; k < sums.size(); ++k) sums[0] += sums[k];
  const Wide total = sums[0].carried();
  std::array<double, kSquareLimbs> limbs;
  for (std::size_t j = 0; j < kSquareLimbs; ++j) {
    limbs[j] = static_cast<double>(bits_from(total, kLimbBits * j) & ((u64{1} << kLimbBits) - 1));
  }
  return limbs;
}

double exact_sum_of_squares_value(const std::array<double, kSquareLimbs>& summed_limbs) {
  WideSum sum;
  for (std::size_t j = 0; j < kSquareLimbs; ++j) {
    const double limb = summed_limbs[j];
    // A sum of up to 2^13 limbs below 2^40 is a whole number below 2^53.
    if (!(limb >= 0 && limb < 0x1p53 && limb == std::floor(limb))) return kNaN;
    sum.add(static_cast<u64>(limb), kLimbBits * j);
  }
  return wide_value(sum.carried());
}

}  // namespace tinyllm::dist
