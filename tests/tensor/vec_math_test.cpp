// detail::vexp against std::exp: the ulp distance over dense sweeps of the
// whole finite range, the reduction interval and the subnormal results; the
// special values and the overflow and underflow thresholds; and the same bits
// from a vectorised loop as from single calls.
#include "../../src/tensor/vec_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

namespace tinyllm {
namespace {

using detail::vexp;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Position of x on the number line in units of one ulp: adjacent doubles
// differ by 1, and -0.0 and +0.0 coincide. Subnormals count like any other.
std::int64_t ordinal(double x) {
  const auto bits = std::bit_cast<std::int64_t>(x);
  return bits < 0 ? std::numeric_limits<std::int64_t>::min() - bits : bits;
}

std::int64_t ulps_between(double a, double b) {
  const std::int64_t d = ordinal(a) - ordinal(b);
  return d < 0 ? -d : d;
}

// Never inlined, so this is the scalar code whatever the loops around it do.
[[gnu::noinline]] double vexp_one(double x) { return vexp(x); }

// The loop g++ -O3 vectorises, as in the ops.
[[gnu::noinline]] void vexp_all(const std::vector<double>& x, std::vector<double>& y) {
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = vexp(x[i]);
}

struct Worst {
  std::int64_t ulps = 0;
  double x = 0.0;
};

// The largest distance from std::exp over xs, through the vectorised loop.
Worst worst_over(const std::vector<double>& xs) {
  std::vector<double> ys(xs.size());
  vexp_all(xs, ys);
  Worst worst;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::int64_t d = ulps_between(ys[i], std::exp(xs[i]));
    if (d > worst.ulps) worst = {d, xs[i]};
  }
  return worst;
}

// n evenly spaced points from lo to hi, both ends included.
std::vector<double> sweep(double lo, double hi, std::size_t n) {
  std::vector<double> xs(n);
  for (std::size_t i = 0; i < n; ++i) xs[i] = lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(n - 1);
  return xs;
}

std::vector<double> uniform(double lo, double hi, std::size_t n, unsigned seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> xs(n);
  for (double& x : xs) x = dist(engine);
  return xs;
}

// exp's last finite value and its last nonzero one, and the doubles past them.
constexpr double kLastFinite = 0x1.62e42fefa39efp+9;    // 709.782712893384
constexpr double kLastNonzero = -0x1.74910d52d3051p+9;  // -745.1332191019411

TEST(VexpTest, WithinOneUlpOfStdExpOverTheWholeRange) {
  const std::vector<std::vector<double>> sets{
      sweep(-745.0, 709.7, 1u << 22),
      uniform(-745.2, 709.8, 1u << 21, 1),
      // The reduction interval |x| <= ln2/2 and its first neighbours, where
      // the result is near 1 and every polynomial error shows.
      sweep(-1.04, 1.04, 1u << 20),
      uniform(-20.0, 20.0, 1u << 20, 2),
  };
  for (const std::vector<double>& xs : sets) {
    const Worst worst = worst_over(xs);
    EXPECT_LE(worst.ulps, 1) << "at x = " << std::hexfloat << worst.x;
  }
}

TEST(VexpTest, SubnormalResultsWithinOneUlp) {
  // exp(x) < 2^−1022 below x ≈ −708.40; each result is one rounding of the
  // polynomial's value onto the subnormal grid.
  const Worst worst = worst_over(sweep(-745.14, -708.3, 1u << 20));
  EXPECT_LE(worst.ulps, 1) << "at x = " << std::hexfloat << worst.x;
}

TEST(VexpTest, SpecialValues) {
  EXPECT_EQ(vexp_one(0.0), 1.0);
  EXPECT_EQ(vexp_one(-0.0), 1.0);
  EXPECT_EQ(vexp_one(kInf), kInf);
  EXPECT_EQ(vexp_one(-kInf), 0.0);
  EXPECT_FALSE(std::signbit(vexp_one(-kInf)));
  EXPECT_TRUE(std::isnan(vexp_one(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(vexp_one(-std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(vexp_one(std::numeric_limits<double>::max()), kInf);
  EXPECT_EQ(vexp_one(std::numeric_limits<double>::lowest()), 0.0);
  EXPECT_LE(ulps_between(vexp_one(1.0), std::numbers::e), 1);
  // Tiny arguments: exp(x) rounds to 1 (or its neighbour below) like std::exp.
  for (double x : {1e-300, -1e-300, 0x1p-53, -0x1p-54, std::numeric_limits<double>::denorm_min()}) {
    EXPECT_EQ(vexp_one(x), std::exp(x)) << "x " << x;
  }
}

TEST(VexpTest, OverflowsAndUnderflowsWhereStdExpDoes) {
  ASSERT_TRUE(std::isfinite(std::exp(kLastFinite)));
  ASSERT_EQ(std::exp(std::nextafter(kLastFinite, kInf)), kInf);
  ASSERT_GT(std::exp(kLastNonzero), 0.0);
  ASSERT_EQ(std::exp(std::nextafter(kLastNonzero, -kInf)), 0.0);

  EXPECT_EQ(vexp_one(kLastFinite), std::exp(kLastFinite));
  EXPECT_EQ(vexp_one(std::nextafter(kLastFinite, kInf)), kInf);
  EXPECT_EQ(vexp_one(709.79), kInf);
  EXPECT_EQ(vexp_one(710.0), kInf);
  EXPECT_EQ(vexp_one(746.0), kInf);
  EXPECT_EQ(vexp_one(1e4), kInf);

  EXPECT_EQ(vexp_one(kLastNonzero), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(vexp_one(std::nextafter(kLastNonzero, -kInf)), 0.0);
  EXPECT_EQ(vexp_one(-745.2), 0.0);
  EXPECT_EQ(vexp_one(-746.0), 0.0);
  EXPECT_EQ(vexp_one(-1e4), 0.0);

  // A thousand doubles either side of each threshold, and of the clamp at ±746.
  for (double edge : {kLastFinite, kLastNonzero, 746.0, -746.0}) {
    std::vector<double> xs;
    double below = edge, above = edge;
    for (int i = 0; i < 1000; ++i) {
      xs.push_back(below = std::nextafter(below, -kInf));
      xs.push_back(above = std::nextafter(above, kInf));
    }
    const Worst worst = worst_over(xs);
    EXPECT_LE(worst.ulps, 1) << "near " << edge << ", at x = " << std::hexfloat << worst.x;
  }
}

TEST(VexpTest, VectorisedLoopGivesTheSameBitsAsSingleCalls) {
  std::vector<double> xs = uniform(-750.0, 715.0, 1u << 16, 3);
  xs.insert(xs.end(), {0.0, -0.0, kInf, -kInf, std::numeric_limits<double>::quiet_NaN(), kLastFinite, kLastNonzero});
  std::vector<double> ys(xs.size());
  vexp_all(xs, ys);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double one = vexp_one(xs[i]);
    if (std::isnan(one)) {
      EXPECT_TRUE(std::isnan(ys[i])) << "x " << xs[i];
    } else {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(ys[i]), std::bit_cast<std::uint64_t>(one)) << "x " << xs[i];
    }
  }
}

}  // namespace
}  // namespace tinyllm
