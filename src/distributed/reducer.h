// Reducer: the gradients' side of data parallelism, one for DDP and
// ZeroOptimizer alike (PyTorch's c10d Reducer plays this part for DDP). It
// owns the buckets and their backward hooks (GradBuckets), no_sync, the flat
// vector that is the full gradients' home where they are kept (DDP, ZeRO
// stage 1), bitwise mode's exact sums, and the norm that clipping takes.
// Its owner says only what differs: where a bucket's mean goes when the
// gradients are not kept whole (stages 2 and 3 reduce-scatter it into the
// chunk), and whether the step's exact mean is wanted whole (DDP) or for
// this rank's chunk alone (ZeRO).
//
// Its collectives run on the owner's CommStream, which the owner destroys
// first (no collective outlives the buffers it uses).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bitwise_grads.h"
#include "comm_stream.h"
#include "flat.h"
#include "grad_buckets.h"
#include "tinyllm/distributed/buckets.h"
#include "tinyllm/distributed/comm.h"
#include "tinyllm/tensor/tensor.h"

namespace tinyllm::dist {

class Reducer {
 public:
  // Stages 2 and 3: a bucket whose gradients are final, to reduce-scatter
  // into the chunk (on the stream) and drop. Empty: the gradients are kept
  // whole, views of one flat vector, and each bucket is all-reduced (Mean)
  // there in place.
  using Scatter = std::function<void(const Bucket&)>;
  // After each bucket is handed on, bitwise or not (stage 3 frees the unit
  // whose backward is over).
  using Done = std::function<void(const Bucket&)>;

  struct Options {
    const char* who = "";  // "DDP" or "ZeroOptimizer", the prefix of every message
    // Parameter runs that share one bucket (stage 3's units).
    std::vector<std::pair<std::size_t, std::size_t>> whole{};
    // The length of this rank's chunk, when the step's mean is wanted for
    // the chunk alone (ZeRO); the whole vector's mean otherwise (DDP).
    std::optional<std::size_t> chunk{};
    Scatter scatter{};
    Done done{};
  };

  Reducer(std::vector<Tensor> params, Comm& comm, CommStream& stream, const BucketOptions& buckets, Options options);
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Collective, once per step after the last backward: waits for the
  // stream, then reduces what backward did not (GradBuckets::flush), after
  // checking that every rank brings a gradient (std::invalid_argument on
  // every rank, prefixed by `who`, when one brings none). In bitwise mode
  // instead: ends a leaf still open and writes the exact mean of every
  // rank's leaves into the flat home (DDP) or into `chunk_mean`, this
  // rank's part (ZeRO).
  void finish(const char* who, std::span<double> chunk_mean = {});
  // Starts the next step's round: nothing reduced, no leaf, the flat home
  // (if any) taken again for the next backward.
  void clear();
  NoSyncGuard no_sync() { return NoSyncGuard(*buckets_); }
  // Bitwise mode only: one window's backward is over (the owner's add_leaf;
  // std::logic_error outside bitwise mode).
  void end_leaf();

  // Collective: the 2-norm of the vector whose disjoint parts the ranks
  // hold (`part`), the same bits on every rank: exact in bitwise mode, the
  // squares summed and all-reduced otherwise.
  double norm_of_parts(std::span<const double> part);
  // No gradient reached a hook this round and no parameter holds one: what
  // clipping before any backward finds.
  bool nothing_yet() const;
  // What clip_grad_norm throws then.
  std::logic_error no_gradients_yet() const;

  bool bitwise() const { return bitwise_ != nullptr; }
  // The full gradients' home, every .grad made a view of it (adopted): DDP
  // and stage 1 only.
  std::span<double> adopt_flat() { return flat_->adopt(); }
  std::size_t largest_bucket() const { return buckets_->largest(); }
  std::size_t bucket_count() const { return buckets_->buckets().size(); }
  // Values held: the flat home (or, without one, the parameters' grads)
  // and bitwise mode's limbs.
  std::size_t held() const;

 private:
  void reduce_bucket(const Bucket& bucket);

  std::vector<Tensor> params_;
  Comm& comm_;
  CommStream& stream_;
  std::string who_;
  std::string add_leaf_who_;  // "<who>::add_leaf", made once: end_leaf runs every window in bitwise mode
  std::optional<std::size_t> chunk_;
  Scatter scatter_;
  Done done_;
  std::unique_ptr<FlatGrads> flat_;        // without scatter only
  std::unique_ptr<BitwiseGrads> bitwise_;  // in bitwise mode only
  std::unique_ptr<GradBuckets> buckets_;
};

}  // namespace tinyllm::dist
