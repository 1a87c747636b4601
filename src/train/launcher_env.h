// What mpirun (Open MPI, or MPICH's and PMIx's launchers) tells its ranks
// through the environment, read before MPI starts.
#pragma once

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace tinyllm::train {

// The first of the variables that is set, as a number; nothing when none
// is set, or the first one set is not a number.
inline std::optional<int> launcher_number(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string_view text(value);
    int number = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return number;
  }
  return std::nullopt;
}

}  // namespace tinyllm::train
