#include "flat.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>

#include "../support/fnv1a.h"
#include "tinyllm/distributed/payload.h"
#include "tinyllm/distributed/stage.h"
#include "tinyllm/tensor/deferred_init.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm::dist {
namespace {

// Every shape, rank by dimension, hashed: equal lists hash equal.
std::uint64_t shapes_hash(const std::vector<Tensor>& params) {
  std::uint64_t h = detail::kFnv1aBasis;
  const auto mix = [&h](std::uint64_t value) { h = detail::fnv1a(std::as_bytes(std::span(&value, 1)), h); };
  for (const Tensor& p : params) {
    mix(p.dim());
    for (std::size_t d : p.shape()) mix(d);
  }
  return h;
}

// Which problem with the list, if any, is this rank's own.
std::string list_problem(const std::vector<Tensor>& params) {
  if (params.empty()) return "the parameter list must not be empty (got 0 tensors)";
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) return fmt::format("parameter {} must be defined (got an undefined tensor)", i);
    for (std::size_t j = 0; j < i; ++j) {
      if (params[j].same(params[i])) {
        return fmt::format("parameter {} must appear once (got the same tensor as parameter {})", i, j);
      }
    }
  }
  return {};
}

// Whether part lies inside whole's memory.
bool lies_in(std::span<const double> part, const Storage& whole) {
  const std::less<const double*> before;
  return !part.empty() && !before(part.data(), whole.data()) && before(part.data(), whole.data() + whole.size());
}

// A view into whole becomes a buffer of its own, with the same values.
void own_copy(Storage& s, const Storage& whole) {
  if (!s.is_view() || !lies_in(s.span(), whole)) return;
  Storage own(s.size());
  std::copy(s.span().begin(), s.span().end(), own.data());
  s = std::move(own);
}

// Each tensor's view into whole (its values or its gradient) becomes a
// buffer of its own, so that no tensor pins the whole vector. Where the
// memory for that is not there (a destructor must not throw, and this runs
// as a run fails for memory), the views left share whole's memory, which
// lives as long as they do.
void own_copies(const std::vector<Tensor>& params, Storage TensorImpl::*member, const Storage& whole) noexcept {
  try {
    for (const Tensor& p : params) own_copy(p.impl().*member, whole);
  } catch (const std::bad_alloc&) {
  }
}

// What every rank checks of every other's parameter list.
struct Parameters {
  bool invalid = false;  // its own problem, which that rank reports
  int stage = 0;
  std::size_t tensors = 0, values = 0, frozen = 0;
  std::uint64_t shapes_hash = 0, frozen_hash = 0;
};
using ParametersPayload = Payload<Parameters, [](auto& s, auto& io) {
  io(s.invalid, s.stage, s.tensors, s.values, s.frozen, s.shapes_hash, s.frozen_hash);
}>;

// Which parameters are frozen (requires_grad false), hashed by index.
std::uint64_t frozen_hash(const std::vector<Tensor>& params) {
  std::uint64_t h = detail::kFnv1aBasis;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) h = detail::fnv1a(std::as_bytes(std::span(&i, 1)), h);
  }
  return h;
}

}  // namespace

std::size_t flat_length(const std::vector<Tensor>& params) {
  std::size_t n = 0;
  for (const Tensor& p : params) n += p.numel();
  return n;
}

void flatten_data(const std::vector<Tensor>& params, std::span<double> flat) {
  const FlatLayout layout(params);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::span<double> segment = flat.subspan(layout.begin(i), layout.numel(i));
    std::copy(params[i].data().begin(), params[i].data().end(), segment.begin());
  }
}

void unflatten_data(std::span<const double> flat, const std::vector<Tensor>& params) {
  const FlatLayout layout(params);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::span<const double> segment = flat.subspan(layout.begin(i), layout.numel(i));
    std::copy(segment.begin(), segment.end(), params[i].data().begin());
  }
}

FlatGrads::FlatGrads(std::vector<Tensor> params) : params_(std::move(params)), layout_(params_) { allocate(); }

FlatGrads::~FlatGrads() {
  for (const Tensor& p : params_) {
    if (lies_in(p.impl().grad_home.span(), flat_)) p.impl().grad_home = Storage();
  }
  own_copies(params_, &TensorImpl::grad, flat_);
}

std::span<double> FlatGrads::adopt(std::size_t first, std::size_t last) {
  allocate();
  last = std::min(last, params_.size());
  for (std::size_t i = first; i < last; ++i) {
    const std::span<double> segment = flat_.span().subspan(layout_.begin(i), layout_.numel(i));
    Storage& grad = params_[i].impl().grad;
    if (grad.data() == segment.data()) continue;
    if (grad.empty()) {
      std::fill(segment.begin(), segment.end(), 0.0);
    } else {
      std::copy(grad.span().begin(), grad.span().end(), segment.begin());
    }
    grad = flat_.view(layout_.begin(i), layout_.numel(i));
  }
  return flat_.span().subspan(layout_.begin(first), layout_.begin(last) - layout_.begin(first));
}

void FlatGrads::release() {
  for (const Tensor& p : params_) {
    TensorImpl& impl = p.impl();
    if (lies_in(impl.grad_home.span(), flat_)) impl.grad_home = Storage();
    impl.grad = Storage();
  }
  flat_ = Storage();
}

void FlatGrads::allocate() {
  if (!flat_.empty()) return;
  flat_ = Storage(layout_.numel());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    params_[i].impl().grad_home = flat_.view(layout_.begin(i), layout_.numel(i));
  }
}

std::size_t FlatGrads::held() const {
  std::size_t n = flat_.size();
  for (const Tensor& p : params_) {
    if (!lies_in(p.grad(), flat_)) n += p.grad().size();
  }
  return n;
}

FlatParams::FlatParams(std::vector<Tensor> params) : params_(std::move(params)), layout_(params_) {
  if (std::any_of(params_.begin(), params_.end(), [](const Tensor& p) { return is_deferred(p); })) return;
  flat_ = Storage(layout_.numel());
  flatten_data(params_, flat_.span());
  view_values();
}

FlatParams::~FlatParams() { own_copies(params_, &TensorImpl::data, flat_); }

void FlatParams::release() {
  for (const Tensor& p : params_) p.impl().data = Storage();
  flat_ = Storage();
}

void FlatParams::allocate() {
  flat_ = Storage(layout_.numel());
  view_values();
}

void FlatParams::view_values() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    params_[i].impl().data = flat_.view(layout_.begin(i), layout_.numel(i));
  }
}

void init_chunk(const std::vector<Tensor>& params, std::size_t a, std::span<double> chunk) {
  for (const Overlap& o : FlatLayout(params).overlaps(a, a + chunk.size())) {
    initial_values(params[o.index], o.first - o.begin, chunk.subspan(o.first - a, o.last - o.first));
  }
  for (const Tensor& p : params) p.impl().deferred_init = nullptr;
}

void check_same_start(Comm& comm, const std::vector<Tensor>& params, const char* who) {
  std::uint64_t h = detail::kFnv1aBasis;
  for (const Tensor& p : params) {
    if (p.numel() == 0) continue;
    double first = 0;
    initial_values(p, 0, std::span(&first, 1));
    h = detail::fnv1a(std::as_bytes(std::span(&first, 1)), h);
  }
  const std::vector<std::uint64_t> all = SinglePayload<std::uint64_t>::all_gather(comm, h);
  for (int q = 1; q < comm.size(); ++q) {
    if (all[static_cast<std::size_t>(q)] != all[0]) {
      throw std::invalid_argument(
          fmt::format("{}: {}: the deferred model of rank {} starts from other values than rank 0's (built with "
                      "another seed, or read from another checkpoint?)",
                      comm.who(), who, q));
    }
  }
}

void take_grads(const std::vector<Tensor>& params, const FlatLayout& layout, std::size_t first, std::size_t last,
                std::span<double> flat) {
  for (std::size_t i = first; i < last; ++i) {
    const std::span<const double> grad = params[i].grad();
    const std::span<double> segment = flat.subspan(layout.begin(i) - layout.begin(first), layout.numel(i));
    if (grad.empty()) {
      std::fill(segment.begin(), segment.end(), 0.0);
    } else {
      std::copy(grad.begin(), grad.end(), segment.begin());
    }
    params[i].zero_grad();
  }
}

void broadcast_params(Comm& comm, const std::vector<Tensor>& params) {
  Storage flat(flat_length(params));
  flatten_data(params, flat.span());
  comm.broadcast(flat.span(), 0);
  unflatten_data(flat.span(), params);
}

void check_same_parameters(Comm& comm, const std::vector<Tensor>& params, const char* who, int stage) {
  const std::string own_problem = list_problem(params);
  const bool listed = own_problem.empty();
  const auto frozen = [&params] {
    return static_cast<std::size_t>(
        std::count_if(params.begin(), params.end(), [](const Tensor& p) { return !p.requires_grad(); }));
  };
  const Parameters mine{.invalid = !listed,
                        .stage = stage,
                        .tensors = params.size(),
                        .values = listed ? flat_length(params) : 0,
                        .frozen = listed ? frozen() : 0,
                        .shapes_hash = listed ? shapes_hash(params) : 0,
                        .frozen_hash = listed ? frozen_hash(params) : 0};
  const std::vector<Parameters> all = ParametersPayload::all_gather(comm, mine);

  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument(fmt::format("{}: {}: {}", comm.who(), who, what));
  };
  if (!listed) fail(own_problem);
  for (std::size_t q = 0; q < all.size(); ++q) {
    if (all[q].invalid) fail(fmt::format("rank {} has an invalid parameter list", q));
  }
  // Every rank against rank 0, field by field.
  const Parameters& first = all[0];
  for (std::size_t q = 1; q < all.size(); ++q) {
    const Parameters& theirs = all[q];
    if (theirs.stage != first.stage) {
      fail(fmt::format("ranks disagree on the stage: rank {} runs {}, rank 0 {}", q, mode_name(theirs.stage),
                       mode_name(first.stage)));
    }
    if (theirs.tensors != first.tensors || theirs.values != first.values) {
      fail(fmt::format("ranks disagree on the parameters: rank {} has {} tensors of {} values, rank 0 has {} of {}", q,
                       theirs.tensors, theirs.values, first.tensors, first.values));
    }
    if (theirs.shapes_hash != first.shapes_hash) {
      fail(
          fmt::format("ranks disagree on the parameter shapes: rank {}'s {} tensors of {} values are shaped unlike "
                      "rank 0's",
                      q, theirs.tensors, theirs.values));
    }
    if (theirs.frozen != first.frozen || theirs.frozen_hash != first.frozen_hash) {
      fail(
          fmt::format("ranks disagree on which parameters are frozen (requires_grad false): rank {} freezes {} of "
                      "them, rank 0 {}{}",
                      q, theirs.frozen, first.frozen, theirs.frozen == first.frozen ? ", not the same ones" : ""));
    }
  }
  if (first.frozen == first.tensors) fail("every parameter is frozen (requires_grad false): there is nothing to train");
}

std::vector<Tensor> take_frozen(std::vector<Tensor>& params) {
  std::vector<Tensor> frozen;
  std::copy_if(params.begin(), params.end(), std::back_inserter(frozen),
               [](const Tensor& p) { return !p.requires_grad(); });
  std::erase_if(params, [](const Tensor& p) { return !p.requires_grad(); });
  return frozen;
}

namespace {

// root's text, on every rank.
std::string broadcast_text(Comm& comm, const std::string& text, int root) {
  const auto length = SinglePayload<std::uint64_t>::broadcast(comm, text.size(), root);
  std::vector<double> chars(length);
  if (comm.rank() == root) std::copy(text.begin(), text.end(), chars.begin());
  comm.broadcast(chars, root);
  return std::string(chars.begin(), chars.end());
}

}  // namespace

void check_same_optimizer(Comm& comm, const optim::Optimizer& optimizer, const char* who) {
  const std::string mine = optimizer.describe();
  const std::uint64_t hash = detail::fnv1a(mine);
  const std::vector<std::uint64_t> all = SinglePayload<std::uint64_t>::all_gather(comm, hash);
  const auto differs = std::find_if(all.begin(), all.end(), [&all](std::uint64_t h) { return h != all[0]; });
  if (differs == all.end()) return;
  const int q = static_cast<int>(differs - all.begin());
  const std::string first = broadcast_text(comm, mine, 0), theirs = broadcast_text(comm, mine, q);
  throw std::invalid_argument(fmt::format("{}: {}: ranks disagree on the optimizer: rank {} builds {}, rank 0 {}",
                                          comm.who(), who, q, theirs, first));
}

void check_every_rank_has_grads(Comm& comm, const std::vector<Tensor>& params, bool reduced, const char* who) {
  const bool has_grads =
      reduced || std::any_of(params.begin(), params.end(), [](const Tensor& p) { return !p.grad().empty(); });
  const std::vector<bool> all = SinglePayload<bool>::all_gather(comm, has_grads);
  std::vector<std::size_t> missing;
  for (std::size_t q = 0; q < all.size(); ++q)
    if (!all[q]) missing.push_back(q);
  if (!missing.empty()) {
    throw std::invalid_argument(fmt::format("{}: {}: rank(s) {} have no gradients (call backward() before reducing)",
                                            comm.who(), who, fmt::join(missing, ", ")));
  }
}

}  // namespace tinyllm::dist
