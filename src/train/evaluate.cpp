#include "tinyllm/train/evaluate.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "tinyllm/distributed/chunk.h"

namespace tinyllm::train {

std::size_t num_eval_windows(const Corpus& val, std::size_t batch, std::size_t seq, std::size_t eval_batches) {
  const std::size_t all = val.num_windows(seq);
  return eval_batches == 0 ? all : std::min(all, eval_batches * batch);
}

double evaluate(dist::Comm& comm, Replica& replica, const Corpus& val, std::size_t batch, std::size_t seq,
                std::size_t eval_batches) {
  const std::size_t windows = num_eval_windows(val, batch, seq, eval_batches);
  if (windows == 0) throw std::invalid_argument(fmt::format("{} holds no window of {} + 1 tokens", val.name(), seq));
  const std::size_t rows = std::max<std::size_t>(1, batch / static_cast<std::size_t>(comm.size()));
  const auto [first, last] = dist::chunk_bounds(windows, comm.size(), comm.rank());
  const auto [first0, last0] = dist::chunk_bounds(windows, comm.size(), 0);  // the longest run
  const std::size_t rounds = (last0 - first0 + rows - 1) / rows;
  double sum = 0;  // of the windows' mean losses
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t begin = std::min(last, first + k * rows), end = std::min(last, begin + rows);
    if (begin == end) {
      replica.eval_loss(val.windows(0, 1, seq));  // in step with the others' forwards
      continue;
    }
    sum += replica.eval_loss(val.windows(begin, end - begin, seq)) * static_cast<double>(end - begin);
  }
  comm.all_reduce({&sum, 1}, dist::ReduceOp::Sum);
  return sum / static_cast<double>(windows);
}

}  // namespace tinyllm::train
