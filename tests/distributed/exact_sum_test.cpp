#include "tinyllm/distributed/exact_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include "support/expect_throw.h"
#include "tinyllm/distributed/threads_comm.h"

namespace tinyllm::dist {
namespace {

using Vector = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same_bits(const Vector& a, const Vector& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) {
           return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
         });
}

// Mixed magnitudes 1e-30..1e5 with both signs, and some zeros and subnormals.
double random_value(std::mt19937_64& rng) {
  const int kind = std::uniform_int_distribution<int>(0, 19)(rng);
  if (kind == 0) return 0.0;
  const double sign = rng() % 2 ? 1.0 : -1.0;
  if (kind == 1) return sign * std::numeric_limits<double>::denorm_min() * static_cast<double>(rng() % 1000 + 1);
  return sign * std::pow(10.0, std::uniform_real_distribution<double>(-30, 5)(rng));
}

std::vector<Vector> random_terms(std::mt19937_64& rng, std::size_t count, std::size_t n) {
  std::vector<Vector> terms(count, Vector(n));
  for (Vector& term : terms) std::generate(term.begin(), term.end(), [&] { return random_value(rng); });
  return terms;
}

// A random split of the terms among p ranks, each adding its own in a random
// order into its own sum; then the ranks' limbs added elementwise in plain
// doubles, as a collective would, two random ranks' partial sums at a time
// (any order and any tree of additions).
Vector split_sum(std::mt19937_64& rng, const std::vector<Vector>& terms, int p) {
  const std::size_t n = terms[0].size();
  std::vector<ExactSum> ranks(static_cast<std::size_t>(p), ExactSum(n));
  std::vector<std::size_t> order(terms.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (const std::size_t t : order) ranks[rng() % ranks.size()].add(terms[t]);
  std::vector<Vector> partial;
  for (const ExactSum& rank : ranks) partial.emplace_back(rank.limbs().begin(), rank.limbs().end());
  while (partial.size() > 1) {
    std::shuffle(partial.begin(), partial.end(), rng);
    Vector last = std::move(partial.back());
    partial.pop_back();
    for (std::size_t i = 0; i < last.size(); ++i) partial[0][i] += last[i];
  }
  const std::span<const double> limbs = partial[0];
  Vector out(n);
  exact_sum_value(limbs.first(n), limbs.subspan(n, n), limbs.subspan(2 * n), out);
  return out;
}

// The same terms in the same order, summed in plain doubles.
Vector plain_sum(std::mt19937_64& rng, const std::vector<Vector>& terms) {
  std::vector<std::size_t> order(terms.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  Vector sum(terms[0].size(), 0.0);
  for (const std::size_t t : order) {
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += terms[t][i];
  }
  return sum;
}

TEST(ExactSumTest, AnyOrderAndAnySplitAmongRanksGivesTheSameBits) {
  std::mt19937_64 rng(19);
  for (const std::size_t count : {1, 2, 7, 16, 64}) {
    const std::vector<Vector> terms = random_terms(rng, count, 97);
    const Vector one_rank = split_sum(rng, terms, 1);
    for (int p = 1; p <= 8; ++p) {
      for (int trial = 0; trial < 4; ++trial) {
        EXPECT_TRUE(same_bits(split_sum(rng, terms, p), one_rank)) << count << " terms, " << p << " ranks";
      }
    }
  }
}

TEST(ExactSumTest, PlainDoubleSumsOfTheSameTermsDifferWithTheOrder) {
  // Without this the test above would prove nothing about the orders it tries.
  std::mt19937_64 rng(19);
  const std::vector<Vector> terms = random_terms(rng, 16, 97);
  const Vector first = plain_sum(rng, terms);
  int differing = 0;
  for (int trial = 0; trial < 8; ++trial) differing += same_bits(plain_sum(rng, terms), first) ? 0 : 1;
  EXPECT_GE(differing, 6);
}

// The exact sum of doubles as a non-overlapping expansion (Shewchuk's
// grow-expansion, built of error-free two-sums).
struct Expansion {
  Vector parts;
  void add(double x) {
    Vector next;
    for (const double part : parts) {
      const double sum = x + part;
      const double virtual_part = sum - x;
      const double error = (x - (sum - virtual_part)) + (part - virtual_part);
      if (error != 0) next.push_back(error);
      x = sum;
    }
    next.push_back(x);
    parts = std::move(next);
  }
  // Nearly the value: the parts are summed smallest first.
  double approximate() const { return std::accumulate(parts.begin(), parts.end(), 0.0); }
};

TEST(ExactSumTest, TheSumIsWithinTheGridOfTheExactSumAndTwoRoundings) {
  std::mt19937_64 rng(7);
  for (const std::size_t count : {1, 3, 64}) {
    const std::vector<Vector> terms = random_terms(rng, count, 501);
    const Vector sum = split_sum(rng, terms, 3);
    for (std::size_t i = 0; i < sum.size(); ++i) {
      Expansion exact;
      for (const Vector& term : terms) exact.add(term[i]);
      const double reference = exact.approximate();
      exact.add(-sum[i]);
      const double tolerance = static_cast<double>(count) * 0x1p-99 + 0x1p-52 * std::abs(reference);
      EXPECT_LE(std::abs(exact.approximate()), tolerance) << "element " << i << " of " << count << " terms";
    }
  }
}

TEST(ExactSumTest, TheFinestGridSurvivesCancellation) {
  // In plain doubles, in this order, 2^-100 is lost against 2^19 and the sum is 0.
  ExactSum sum(1);
  for (const double x : {0x1p19 + 0x1p-33, 0x1p-100, -0x1p19, -0x1p-33}) sum.add(Vector{x});
  Vector out(1);
  sum.result(out);
  EXPECT_EQ(out[0], 0x1p-100);
}

TEST(ExactSumTest, ElementsOutOfRangeOrNotFiniteBecomeNaNAlone) {
  const double below = std::nextafter(ExactSum::kMaxMagnitude, 0.0);
  const double inf = std::numeric_limits<double>::infinity();
  const Vector x{below, -below, ExactSum::kMaxMagnitude, -ExactSum::kMaxMagnitude, 1e300, inf, -inf, kNaN, 1.5};
  ExactSum sum(x.size());
  sum.add(x);
  sum.add(x);
  Vector out(x.size());
  sum.result(out);
  EXPECT_EQ(out[0], 2 * below);
  EXPECT_EQ(out[1], -2 * below);
  for (std::size_t i = 2; i < 8; ++i) EXPECT_TRUE(std::isnan(out[i])) << "element " << i << " = " << x[i];
  EXPECT_EQ(out[8], 3.0);
}

TEST(ExactSumTest, AChunkOfEachLimbGivesThatChunkOfTheSum) {
  std::mt19937_64 rng(3);
  ExactSum sum(10);
  for (const Vector& term : random_terms(rng, 5, 10)) sum.add(term);
  Vector whole(10), chunk(4);
  sum.result(whole);
  exact_sum_value(sum.limb(0).subspan(3, 4), sum.limb(1).subspan(3, 4), sum.limb(2).subspan(3, 4), chunk);
  EXPECT_TRUE(same_bits(chunk, Vector(whole.begin() + 3, whole.begin() + 7)));
}

TEST(ExactSumTest, ATermAddedInPartsEqualsTheWholeTerm) {
  std::mt19937_64 rng(5);
  const std::vector<Vector> terms = random_terms(rng, 4, 9);
  ExactSum whole(9), parts(9);
  for (const Vector& term : terms) {
    whole.add(term);
    const std::span<const double> x = term;
    parts.add_part(5, x.subspan(5));  // in any order of the parts
    parts.add_part(0, x.first(5));
    parts.end_term();
  }
  Vector a(9), b(9);
  whole.result(a);
  parts.result(b);
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_EQ(parts.terms(), 4u);
  EXPECT_THROW_WITH(parts.add_part(7, Vector(3)), std::out_of_range,
                    "ExactSum::add_part: elements [7, 10) of a sum of size 9");
}

TEST(ExactSumTest, ClearKeepsTheSizeAndStartsFromZero) {
  ExactSum sum(2);
  sum.add(Vector{1.0, 2.0});
  sum.clear();
  sum.add(Vector{0.5, 0.25});
  Vector out(2);
  sum.result(out);
  EXPECT_EQ(sum.size(), 2u);
  EXPECT_EQ(out, (Vector{0.5, 0.25}));
}

TEST(ExactSumTest, RefusesATermOfAnotherSizeAndTermsPastTheLimit) {
  ExactSum sum(2);
  EXPECT_THROW_WITH(sum.add(Vector{1.0}), std::invalid_argument,
                    "ExactSum::add: a term of size 1 added to a sum of size 2");
  for (std::size_t t = 0; t < ExactSum::kMaxTerms; ++t) sum.add(Vector{1.0, 1.0});
  EXPECT_THROW_WITH(sum.add(Vector{1.0, 1.0}), std::length_error,
                    "ExactSum: more than 2048 terms would no longer sum exactly");
  EXPECT_THROW_WITH(sum.end_term(), std::length_error, "ExactSum: more than 2048 terms would no longer sum exactly");
  Vector out(2);
  sum.result(out);
  EXPECT_EQ(out[0], 2048.0);
  Vector three(3);
  EXPECT_THROW_WITH(exact_sum_value(sum.limb(0), sum.limb(1), sum.limb(2), three), std::invalid_argument,
                    "exact_sum_value: limbs of 2, 2 and 2 values for 3 values");
}

TEST(ExactSumTest, AllReduceOfTheLimbsGivesTheSameBitsOnEveryRankForEveryWorldSize) {
  std::mt19937_64 rng(11);
  const std::vector<Vector> terms = random_terms(rng, 12, 301);
  Vector one_process(terms[0].size());
  {
    ExactSum sum(terms[0].size());
    for (const Vector& term : terms) sum.add(term);
    sum.result(one_process);
  }
  for (int p = 1; p <= 4; ++p) {
    std::mutex mutex;
    std::vector<Vector> results;
    run_threads(p, [&](Comm& comm) {
      ExactSum sum(terms[0].size());
      // Rank r adds terms r, r + p, …: another split for every p.
      for (std::size_t t = static_cast<std::size_t>(comm.rank()); t < terms.size(); t += static_cast<std::size_t>(p)) {
        sum.add(terms[t]);
      }
      comm.all_reduce(sum.limbs(), ReduceOp::Sum);
      Vector out(terms[0].size());
      sum.result(out);
      const std::lock_guard lock(mutex);
      results.push_back(std::move(out));
    });
    ASSERT_EQ(results.size(), static_cast<std::size_t>(p));
    for (const Vector& result : results) EXPECT_TRUE(same_bits(result, one_process)) << p << " ranks";
  }
}

// The ranks' square limbs added in plain doubles in a random rank order.
double split_sum_of_squares(std::mt19937_64& rng, const Vector& x, std::vector<std::size_t> cuts) {
  std::vector<std::array<double, kSquareLimbs>> ranks;
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(x.size());
  for (std::size_t q = 0; q + 1 < cuts.size(); ++q) {
    ranks.push_back(exact_sum_of_squares(std::span(x).subspan(cuts[q], cuts[q + 1] - cuts[q])));
  }
  std::shuffle(ranks.begin(), ranks.end(), rng);
  std::array<double, kSquareLimbs> summed{};
  for (const auto& limbs : ranks) {
    for (std::size_t j = 0; j < kSquareLimbs; ++j) summed[j] += limbs[j];
  }
  return exact_sum_of_squares_value(summed);
}

std::vector<std::size_t> random_cuts(std::mt19937_64& rng, std::size_t n, int p) {
  std::vector<std::size_t> cuts(static_cast<std::size_t>(p - 1));
  for (std::size_t& cut : cuts) cut = rng() % (n + 1);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

Vector random_vector(std::mt19937_64& rng, std::size_t n) {
  Vector x(n);
  std::generate(x.begin(), x.end(), [&] { return random_value(rng); });
  return x;
}

TEST(SumOfSquaresTest, AnySplitIntoChunksGivesTheSameBits) {
  std::mt19937_64 rng(5);
  const Vector x = random_vector(rng, 2000);
  const double one_rank = split_sum_of_squares(rng, x, {});
  for (int p = 2; p <= 8; ++p) {
    for (int trial = 0; trial < 4; ++trial) {
      const double split = split_sum_of_squares(rng, x, random_cuts(rng, x.size(), p));
      EXPECT_EQ(std::bit_cast<std::uint64_t>(split), std::bit_cast<std::uint64_t>(one_rank)) << p << " ranks";
    }
  }
}

TEST(SumOfSquaresTest, PlainDoubleSumsOfTheSameChunksDiffer) {
  std::mt19937_64 rng(5);
  const Vector x = random_vector(rng, 2000);
  const auto chunked = [&](std::size_t chunk) {
    Vector partial;
    for (std::size_t a = 0; a < x.size(); a += chunk) {
      double s = 0;
      for (std::size_t i = a; i < std::min(x.size(), a + chunk); ++i) s += x[i] * x[i];
      partial.push_back(s);
    }
    return std::accumulate(partial.begin(), partial.end(), 0.0);
  };
  const double whole = chunked(x.size());
  int differing = 0;
  for (const std::size_t chunk : {1000, 667, 500, 400, 334, 286, 250}) differing += chunked(chunk) != whole ? 1 : 0;
  EXPECT_GE(differing, 3);
}

TEST(SumOfSquaresTest, IsTheExactSumCorrectlyRounded) {
  std::mt19937_64 rng(9);
  for (const std::size_t n : {1, 10, 1000}) {
    const Vector x = random_vector(rng, n);
    Expansion exact;
    for (const double xi : x) {
      const double square = xi * xi;
      exact.add(square);
      exact.add(std::fma(xi, xi, -square));  // x² = square + this, exactly
    }
    const double value = split_sum_of_squares(rng, x, random_cuts(rng, n, 3));
    const double reference = exact.approximate();
    exact.add(-value);
    EXPECT_LE(std::abs(exact.approximate()), 0x1p-53 * reference + static_cast<double>(n) * 0x1p-200) << n;
  }
  EXPECT_EQ(split_sum_of_squares(rng, Vector{0x1p-90, 0x1p-100}, {1}), 0x1p-180 + 0x1p-200);
  // 1 + 2^-53 + 2^-200: 2^-200 above the tie between 1 and 1 + 2^-52, so it rounds up.
  EXPECT_EQ(split_sum_of_squares(rng, Vector{1.0, 0x1p-27, 0x1p-27, 0x1p-100}, {2}), 1.0 + 0x1p-52);
  EXPECT_EQ(split_sum_of_squares(rng, Vector{0x1p-101, 0.0}, {}), 0.0) << "below the grid";
  EXPECT_EQ(split_sum_of_squares(rng, Vector{}, {}), 0.0);
}

TEST(SumOfSquaresTest, ValuesOutOfRangeOrNotFiniteMakeItNaN) {
  const double below = std::nextafter(kMaxSquaredMagnitude, 0.0);
  std::mt19937_64 rng(1);
  EXPECT_EQ(split_sum_of_squares(rng, Vector{below, -below}, {1}), 2 * below * below);
  for (const double bad :
       {kMaxSquaredMagnitude, -kMaxSquaredMagnitude, std::numeric_limits<double>::infinity(), kNaN}) {
    EXPECT_TRUE(std::isnan(split_sum_of_squares(rng, Vector{1.0, bad, 2.0}, {1}))) << bad;
  }
  std::array<double, kSquareLimbs> not_whole{};
  not_whole[0] = 0.5;
  EXPECT_TRUE(std::isnan(exact_sum_of_squares_value(not_whole)));
}

}  // namespace
}  // namespace tinyllm::dist
