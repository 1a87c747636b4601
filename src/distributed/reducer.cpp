#include "reducer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tinyllm::dist {

Reducer::Reducer(std::vector<Tensor> params, Comm& comm, CommStream& stream, const BucketOptions& buckets,
                 Options options)
    : params_(std::move(params)),
      comm_(comm),
      stream_(stream),
      who_(options.who),
      add_leaf_who_(who_ + "::add_leaf"),
      chunk_(options.chunk),
      scatter_(std::move(options.scatter)),
      done_(std::move(options.done)) {
  if (!scatter_) flat_ = std::make_unique<FlatGrads>(params_);
  if (buckets.bitwise) {
    bitwise_ = std::make_unique<BitwiseGrads>(params_, chunk_.value_or(0), /*drop_grads=*/scatter_ != nullptr);
  }
  buckets_ = std::make_unique<GradBuckets>(params_, make_buckets(params_, buckets, options.who, options.whole), stream_,
                                           [this](const Bucket& b) { reduce_bucket(b); });
}

// During backward, once the bucket's gradients are final: in bitwise mode
// added into the leaf's exact sum; kept whole, averaged in place on the
// stream; otherwise handed to the owner's reduce-scatter.
void Reducer::reduce_bucket(const Bucket& bucket) {
  if (bitwise_) {
    bitwise_->add(bucket.first, bucket.last);
  } else if (flat_) {
    const std::span<double> grads = flat_->adopt(bucket.first, bucket.last);
    stream_.enqueue([this, grads] { comm_.all_reduce(grads, ReduceOp::Mean); });
  } else {
    scatter_(bucket);
  }
  if (done_) done_(bucket);
}

void Reducer::finish(const char* who, std::span<double> chunk_mean) {
  stream_.synchronize();
  if (bitwise_) {
    if (buckets_->touched()) end_leaf();  // a backward since the last leaf ended
    if (chunk_) {
      bitwise_->reduce_scatter_mean(comm_, chunk_mean, who);
    } else {
      bitwise_->all_reduce_mean(comm_, flat_->adopt(), who);
    }
    return;
  }
  check_every_rank_has_grads(comm_, params_, buckets_->touched(), who);
  // The buckets that backward has not reduced (all of them when the grads
  // were set by hand), as it would have: see reduce_bucket().
  buckets_->flush();
}

void Reducer::clear() {
  buckets_->clear();
  if (bitwise_) bitwise_->clear();
  if (flat_) flat_->allocate();
}

void Reducer::end_leaf() {
  if (!bitwise_) throw std::logic_error(add_leaf_who_ + ": only in bitwise mode (BucketOptions::bitwise)");
  bitwise_->end_leaf(*buckets_, add_leaf_who_.c_str());
}

double Reducer::norm_of_parts(std::span<const double> part) {
  if (bitwise_) return exact_norm(comm_, part);
  double squares = 0;
  for (double g : part) squares += g * g;
  comm_.all_reduce({&squares, 1}, ReduceOp::Sum);
  return std::sqrt(squares);
}

bool Reducer::nothing_yet() const {
  return !buckets_->touched() &&
         std::all_of(params_.begin(), params_.end(), [](const Tensor& p) { return p.grad().empty(); });
}

std::logic_error Reducer::no_gradients_yet() const {
  return std::logic_error(who_ + "::clip_grad_norm: no gradients yet: call backward() first");
}

std::size_t Reducer::held() const {
  std::size_t values = bitwise_ ? bitwise_->held() : 0;
  if (flat_) return values + flat_->held();
  for (const Tensor& p : params_) values += p.grad().size();
  return values;
}

}  // namespace tinyllm::dist
