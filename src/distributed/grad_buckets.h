// GradBuckets: the parameters in buckets, and the hooks that hand each
// bucket to a reduction as soon as backward has finished every gradient in
// it. The Reducer (reducer.h) owns it for DDP and ZeroOptimizer alike;
// what "reduce" means (an all_reduce in place, a reduce_scatter into the
// chunk, an exact sum) is the Reducer's.
//
// A round runs from one flush() to the next. In each backward of a round,
// a bucket is reduced once all its parameters' gradients of that backward
// are final, and buckets are reduced strictly in bucket order, so every
// rank issues the same collectives in the same order. A bucket that an
// earlier backward of the round reduced is reduced again with the new
// gradients added: DDP and stage 1 all-reduce the sum of the averaged and
// the new gradients, which is still the mean of every rank's total; stages
// 2 and 3 add the new mean into the chunk. flush() then reduces every
// bucket that the round's backwards did not (unused parameters, gradients
// set by hand, a backward that threw). Inside no_sync() the hooks only
// note that a bucket changed; its gradients accumulate locally until a
// later backward or flush() reduces them.
//
// "Reduce" may only enqueue its collective on the owner's CommStream. A
// backward that enqueued any then waits for them as its last act (PyTorch's
// reducer finalises the same way), so the next backward never adds into a
// gradient a collective still reads; flush() waits likewise.
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "comm_stream.h"
#include "tinyllm/distributed/buckets.h"
#include "tinyllm/tensor/hooks.h"
#include "tinyllm/tensor/tensor.h"

namespace tinyllm::dist {

// The buckets over `params` (make_buckets over their lengths).
std::vector<Bucket> make_buckets(const std::vector<Tensor>& params, const BucketOptions& options, const char* who,
                                 const std::vector<std::pair<std::size_t, std::size_t>>& whole = {});

class GradBuckets {
 public:
  using Reduce = std::function<void(const Bucket&)>;

  GradBuckets(std::vector<Tensor> params, std::vector<Bucket> buckets, CommStream& stream, Reduce reduce);
  ~GradBuckets();  // removes the hooks
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Reduces what the round left (see above), in bucket order, and starts a new round.
  void flush();
  // Starts a new round without reducing: the gradients were dropped.
  void clear();
  // Whether any gradient reached a hook this round.
  bool touched() const { return touched_; }
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  const std::vector<Bucket>& buckets() const { return buckets_; }
  std::size_t largest() const;  // values in the longest bucket

 private:
  void on_grad_ready(std::size_t param);
  void reduce_ready_in_order();
  void restart_count();  // for the next backward

  std::vector<Tensor> params_;
  CommStream& stream_;
  Reduce reduce_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // by parameter
  std::vector<char> ready_;             // by parameter, this backward
  std::vector<std::size_t> pending_;    // by bucket: parameters not yet ready this backward
  std::vector<char> reduced_;           // by bucket: reduced this round and unchanged since
  std::size_t next_ = 0;                // the next bucket to reduce during this backward
  bool counting_ = false;               // a backward has counted a gradient and will restart the count
  bool touched_ = false;
  bool sync_ = true;
  std::vector<RemovableHandle> handles_;
};

}  // namespace tinyllm::dist
