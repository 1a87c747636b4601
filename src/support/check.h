// TINYLLM_CHECK: the one way this library reports its own bugs (never user
// input, which gets std::invalid_argument). It throws std::logic_error with
// file:line, so a broken invariant surfaces as an exception, not a crash.
#pragma once

#include <sstream>
#include <string>

namespace tinyllm::detail {

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);

}  // namespace tinyllm::detail

#define TINYLLM_CHECK(condition, ...)                                                                          \
  do {                                                                                                         \
    if (!(condition)) {                                                                                        \
      ::tinyllm::detail::check_failed(__FILE__, __LINE__, #condition, ::tinyllm::detail::concat(__VA_ARGS__)); \
    }                                                                                                          \
  } while (false)
