#include "check.h"

#include <stdexcept>

namespace tinyllm::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::string what = concat(file, ":", line, ": check failed: ", condition);
  if (!message.empty()) what += concat(": ", message);
  throw std::logic_error(what);
}

}  // namespace tinyllm::detail
