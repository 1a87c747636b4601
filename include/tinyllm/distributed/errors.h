// CommError: a collective failed (a peer disagreed, died, threw or timed
// out). Its message leads with this rank and names the operation, the peer
// and the cause: "rank 2/4: all_reduce #17 timed out after 60000 ms waiting
// for rank 0". Bad arguments of this rank's own are std::invalid_argument.
#pragma once

#include <stdexcept>
#include <string>

namespace tinyllm::dist {

class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace tinyllm::dist
