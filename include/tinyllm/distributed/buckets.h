// BucketOptions: how DDP and ZeroOptimizer group the gradients into buckets
// that are reduced during backward, as each fills (PyTorch DDP's
// bucket_cap_mb; Li et al., PyTorch Distributed, VLDB 2020, section 3.2.3).
// Buckets take the parameters in reverse order, the order backward
// finishes them. A parameter larger than a bucket gets a bucket of its own.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace tinyllm::dist {

class GradBuckets;

struct BucketOptions {
  std::size_t bucket_bytes = std::size_t{25} << 20;
  // The first bucket (the last parameters, whose gradients are ready
  // first) is smaller, so that the first reduction starts early.
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  // Run each bucket's collective on a communication thread of this rank
  // while backward computes the next (and stage 3's gathers beside the
  // compute): the same collectives in the same order, so the same bits and
  // bytes. Stages 2 and 3 then hold two buckets in flight instead of one.
  // Where the Comm allows no other thread (MPI below
  // MPI_THREAD_SERIALIZED), the collectives stay synchronous, said once
  // on stderr.
  bool overlap = false;
  // Bitwise mode (docs/BITWISE.md): the gradient is the same bits for any
  // number of ranks and any split of the batch. The batch is cut into
  // leaves of fixed shape (a window each, in tinyllm's trainer); after each
  // leaf's backward, add_leaf() adds its gradient to an exact sum and
  // zeroes it, and backward reduces nothing. The step's reduction sums the
  // leaves of every rank exactly and divides by their number; clip_grad_norm
  // takes Σg² exactly. At most ExactSum::kMaxTerms leaves per step in all.
  // The cost: three times the gradient's traffic, and the limbs (3n values,
  // and 3 chunks under ZeRO) beside a full gradient on every rank.
  bool bitwise = false;
};

struct Bucket {
  std::size_t first = 0, last = 0;  // parameters [first, last), in parameters() order
  std::size_t begin = 0, end = 0;   // their values' range in the flat vector
};

// The buckets over parameters of these lengths, in the order backward
// finishes them: from the last parameter back, each closing when the next
// parameter would take it past its size, except that each run [first,
// last) of `whole` (ZeRO's units) is one bucket of its own.
// std::invalid_argument, prefixed by `who`, for a bucket size of 0.
std::vector<Bucket> make_buckets(std::span<const std::size_t> numels, const BucketOptions& options, const char* who,
                                 const std::vector<std::pair<std::size_t, std::size_t>>& whole = {});

// While alive, backward reduces nothing (PyTorch's no_sync()): for all but
// the last micro-batch of an accumulation. The gradients add up locally, and
// the next backward outside it (or sync_grads(), step()) reduces them.
class [[nodiscard]] NoSyncGuard {
 public:
  explicit NoSyncGuard(GradBuckets& buckets);
  ~NoSyncGuard();
  NoSyncGuard(NoSyncGuard&& other) noexcept;
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;

 private:
  GradBuckets* buckets_;
  bool previous_;
};

}  // namespace tinyllm::dist
