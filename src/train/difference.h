// Differences that keep a NaN. std::max(worst, d) drops a NaN d (every
// comparison with NaN is false), so a checkpoint or a step whose values
// went NaN would compare as equal; here a NaN wins, and `worst <= tolerance`
// then fails as it must.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

namespace tinyllm::train {

inline double max_keeping_nan(double a, double b) { return std::isnan(a) || a > b ? a : b; }

// The largest |x[i] − y[i]|, NaN when any is (a NaN on either side, or ∞ − ∞).
inline double max_abs_diff(std::span<const double> x, std::span<const double> y) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = max_keeping_nan(std::abs(x[i] - y[i]), worst);
  return worst;
}

}  // namespace tinyllm::train
