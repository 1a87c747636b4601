#include "grad_buckets.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "tinyllm/distributed/flat_layout.h"
#include "tinyllm/tensor/autograd.h"

namespace tinyllm::dist {

std::vector<Bucket> make_buckets(std::span<const std::size_t> numels, const BucketOptions& options, const char* who,
                                 const std::vector<std::pair<std::size_t, std::size_t>>& whole) {
  if (options.bucket_bytes == 0 || options.first_bucket_bytes == 0) {
    throw std::invalid_argument(
        fmt::format("{}: bucket sizes must be positive (got bucket_bytes {}, first_bucket_bytes {})", who,
                    options.bucket_bytes, options.first_bucket_bytes));
  }
  const FlatLayout layout(numels);
  // whole_from[l] is the first parameter of the whole run ending at l, if any.
  std::vector<std::size_t> whole_from(numels.size() + 1, numels.size() + 1);
  std::vector<char> in_whole(numels.size(), 0);
  for (const auto& [first, last] : whole) {
    whole_from[last] = first;
    for (std::size_t i = first; i < last; ++i) in_whole[i] = 1;
  }
  std::vector<Bucket> buckets;
  std::size_t last = numels.size();
  while (last > 0) {
    std::size_t first = last - 1;
    if (whole_from[last] <= numels.size()) {
      first = whole_from[last];
    } else {
      const std::size_t cap = (buckets.empty() ? options.first_bucket_bytes : options.bucket_bytes) / sizeof(double);
      while (first > 0 && !in_whole[first - 1] && layout.begin(last) - layout.begin(first - 1) <= cap) --first;
    }
    buckets.push_back({.first = first, .last = last, .begin = layout.begin(first), .end = layout.begin(last)});
    last = first;
  }
  return buckets;
}

std::vector<Bucket> make_buckets(const std::vector<Tensor>& params, const BucketOptions& options, const char* who,
                                 const std::vector<std::pair<std::size_t, std::size_t>>& whole) {
  std::vector<std::size_t> numels;
  for (const Tensor& p : params) numels.push_back(p.numel());
  return make_buckets(numels, options, who, whole);
}

GradBuckets::GradBuckets(std::vector<Tensor> params, std::vector<Bucket> buckets, CommStream& stream, Reduce reduce)
    : params_(std::move(params)), stream_(stream), reduce_(std::move(reduce)), buckets_(std::move(buckets)) {
  bucket_of_.resize(params_.size());
  pending_.resize(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (std::size_t i = buckets_[b].first; i < buckets_[b].last; ++i) bucket_of_[i] = b;
    pending_[b] = buckets_[b].last - buckets_[b].first;
  }
  ready_.assign(params_.size(), 0);
  reduced_.assign(buckets_.size(), 0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    handles_.push_back(params_[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad_ready(i); }));
  }
}

GradBuckets::~GradBuckets() {
  for (RemovableHandle& handle : handles_) handle.remove();
}

std::size_t GradBuckets::largest() const {
  std::size_t longest = 0;
  for (const Bucket& b : buckets_) longest = std::max(longest, b.end - b.begin);
  return longest;
}

void GradBuckets::on_grad_ready(std::size_t param) {
  const std::size_t b = bucket_of_[param];
  touched_ = true;
  reduced_[b] = 0;
  if (!sync_) return;
  if (!counting_) {
    // Each backward counts its own gradients, so that a later micro-batch
    // outside no_sync() reduces its buckets as they fill, as the first did.
    counting_ = true;
    autograd::queue_callback([this] { restart_count(); });
  }
  ready_[param] = 1;
  if (--pending_[b] == 0) reduce_ready_in_order();
}

void GradBuckets::reduce_ready_in_order() {
  const std::size_t first = next_;
  while (next_ < buckets_.size() && pending_[next_] == 0) {
    reduce_(buckets_[next_]);
    reduced_[next_++] = 1;
  }
  if (next_ > first && stream_.overlapping()) autograd::queue_callback([this] { stream_.synchronize(); });
}

void GradBuckets::flush() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (!reduced_[b]) reduce_(buckets_[b]);
  }
  stream_.synchronize();
  clear();
}

void GradBuckets::clear() {
  restart_count();
  std::fill(reduced_.begin(), reduced_.end(), 0);
  touched_ = false;
}

void GradBuckets::restart_count() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].last - buckets_[b].first;
  next_ = 0;
  counting_ = false;
}

NoSyncGuard::NoSyncGuard(GradBuckets& buckets) : buckets_(&buckets), previous_(buckets.sync()) {
  buckets.set_sync(false);
}

NoSyncGuard::~NoSyncGuard() {
  if (buckets_) buckets_->set_sync(previous_);
}

NoSyncGuard::NoSyncGuard(NoSyncGuard&& other) noexcept
    : buckets_(std::exchange(other.buckets_, nullptr)), previous_(other.previous_) {}

}  // namespace tinyllm::dist
