#include "tinyllm/distributed/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "comm_stream.h"
#include "flat.h"
#include "reducer.h"
#include "tinyllm/optim/clip_grad.h"
#include "tinyllm/tensor/deferred_init.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm::dist {
namespace {

// The index of each unit's first and one past its last parameter in
// `params`, checked to be runs that follow the list in order.
std::vector<std::pair<std::size_t, std::size_t>> unit_runs(const std::vector<Tensor>& params,
                                                           const std::vector<std::shared_ptr<nn::Module>>& units) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) throw std::invalid_argument(fmt::format("ZeroOptimizer: unit {} is null", u));
    std::vector<Tensor> own = units[u]->parameters();
    if (own.empty()) throw std::invalid_argument(fmt::format("ZeroOptimizer: unit {} has no parameters", u));
    take_frozen(own);  // frozen parameters stay whole, in no unit
    if (own.empty()) continue;
    const auto at = std::find_if(params.begin(), params.end(), [&](const Tensor& p) { return p.same(own[0]); });
    const std::size_t first = static_cast<std::size_t>(at - params.begin());
    for (std::size_t j = 0; j < own.size(); ++j) {
      if (first + j >= params.size() || !params[first + j].same(own[j])) {
        throw std::invalid_argument(fmt::format(
            "ZeroOptimizer: unit {}'s parameters must be a run of the parameter list, in its order (parameter {} of "
            "the unit is {})",
            u, j, first == params.size() ? "not in the list" : "out of place"));
      }
    }
    if (!runs.empty() && first < runs.back().second) {
      throw std::invalid_argument(fmt::format(
          "ZeroOptimizer: unit {} must follow unit {} in the parameter list without sharing a parameter", u, u - 1));
    }
    runs.emplace_back(first, first + own.size());
  }
  return runs;
}

// Whether the model was built deferred (tensor/deferred_init.h): all of
// its parameters or none.
bool deferred(const std::vector<Tensor>& params) {
  const auto is = [](const Tensor& p) { return is_deferred(p); };
  const auto first_deferred = std::find_if(params.begin(), params.end(), is);
  const auto first_eager = std::find_if_not(params.begin(), params.end(), is);
  if (first_deferred != params.end() && first_eager != params.end()) {
    throw std::invalid_argument(fmt::format(
        "ZeroOptimizer: the parameters must be all deferred or none (parameter {} is deferred, parameter {} is not)",
        first_deferred - params.begin(), first_eager - params.begin()));
  }
  return first_deferred != params.end();
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(optim::OptimizerFactory make_inner, std::vector<Tensor> params, Comm& comm, int stage,
                             ZeroOptions options)
    : params_(std::move(params)), comm_(comm), stage_(stage), prefetch_(options.prefetch) {
  if (stage_ < 1 || stage_ > 3) {
    throw std::invalid_argument(fmt::format("ZeroOptimizer: stage must be 1, 2 or 3 (got {})", stage_));
  }
  if (!make_inner) throw std::invalid_argument("ZeroOptimizer: the optimizer factory must not be empty");
  if (prefetch_ < 0)
    throw std::invalid_argument(fmt::format("ZeroOptimizer: prefetch must be >= 0 (got {})", prefetch_));
  if (!options.units.empty() && stage_ != 3) {
    throw std::invalid_argument(
        fmt::format("ZeroOptimizer: units shard the parameters, which only stage 3 does (got {} units at stage {})",
                    options.units.size(), stage_));
  }
  check_same_parameters(comm_, params_, "ZeroOptimizer", stage_);
  const std::vector<Tensor> frozen = take_frozen(params_);
  if (!frozen.empty()) {
    materialize(frozen);
    broadcast_params(comm_, frozen);
  }
  // A deferred model is made chunk by chunk: stage 3 keeps only its chunk,
  // and stages 1 and 2 all-gather the chunks straight into the flat vectors,
  // so that no rank holds the parameters twice while it builds.
  const bool sharded_start = deferred(params_);
  layout_ = FlatLayout(params_);
  std::tie(a_, b_) = chunk_bounds(layout_.numel(), comm_.size(), comm_.rank());
  const std::vector<std::pair<std::size_t, std::size_t>> units = unit_runs(params_, options.units);
  stream_ = std::make_unique<CommStream>(comm_, options.buckets.overlap);
  Reducer::Options reduction{.who = "ZeroOptimizer", .whole = units, .chunk = b_ - a_};
  // Stage 1 keeps the full gradients, all-reduced in place; stages 2 and 3
  // reduce-scatter each bucket into the chunk. Stage 3 then frees a unit
  // whose backward is over.
  if (stage_ > 1) reduction.scatter = [this](const Bucket& bucket) { reduce_scatter_bucket(bucket); };
  reduction.done = [this](const Bucket& bucket) { release_unit_of(bucket); };
  reducer_ = std::make_unique<Reducer>(params_, comm_, *stream_, options.buckets, std::move(reduction));
  slots_.resize(slots_for(stream_->overlapping(), reducer_->bucket_count()));
  make_groups(units);
  summed_.assign(params_.size(), 0);

  master_chunk_ = Tensor::empty({b_ - a_});
  if (sharded_start) {
    // A deferred model's recipes are the same on every rank (one seed, one
    // checkpoint), so each makes its own chunk and nothing is broadcast.
    check_same_start(comm_, params_, "ZeroOptimizer");
    init_chunk(params_, a_, master_chunk_.data());
  } else {
    for (Group& group : groups_) {
      comm_.broadcast(group.values->span(), 0);  // the replicas start equal, as under DDP
      const std::size_t first = std::max(a_, group.begin), last = std::min(b_, group.end);
      if (first < last) {
        const std::span<const double> w = group.values->span();
        std::copy(w.begin() + (first - group.begin), w.begin() + (last - group.begin),
                  master_chunk_.data().begin() + (first - a_));
      }
    }
  }
  inner_ = make_inner({master_chunk_});
  check_same_optimizer(comm_, *inner_, "ZeroOptimizer");
  if (stage_ == 3) {
    for (std::size_t g = 0; g < groups_.size(); ++g) release_group(g);
    hook_units(options.units);
  } else if (sharded_start) {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      groups_[g].gathered = false;  // FlatParams of deferred parameters start released
      request_group(g);
    }
  }
  peak_ = memory_bytes();
}

ZeroOptimizer::~ZeroOptimizer() {
  for (RemovableHandle& hook : unit_hooks_) hook.remove();
}

bool ZeroOptimizer::overlapping() const { return stream_->overlapping(); }

// One group per unit and per run of parameters between them (without
// units, one group of every parameter).
void ZeroOptimizer::make_groups(const std::vector<std::pair<std::size_t, std::size_t>>& units) {
  const auto add = [&](std::size_t first, std::size_t last) {
    if (first == last) return;
    std::vector<Tensor> own(params_.begin() + first, params_.begin() + last);
    groups_.push_back({.first = first,
                       .last = last,
                       .begin = layout_.begin(first),
                       .end = layout_.begin(last),
                       .values = std::make_unique<FlatParams>(std::move(own))});
  };
  std::size_t next = 0;
  for (const auto& [first, last] : units) {
    add(next, first);
    unit_groups_.push_back(groups_.size());
    add(first, last);
    next = last;
  }
  add(next, params_.size());
}

void ZeroOptimizer::hook_units(const std::vector<std::shared_ptr<nn::Module>>& units) {
  for (std::size_t u = 0; u < units.size(); ++u) {
    unit_hooks_.push_back(
        units[u]->register_forward_pre_hook([this, u](const nn::Module&) { gather_with_prefetch(u, +1); }));
    unit_hooks_.push_back(units[u]->register_forward_hook([this, u](const nn::Module&, const Tensor& output) {
      // Backward will need the parameters again when it reaches the output.
      if (!output.is_leaf()) output.register_hook([this, u](const Tensor&) { gather_with_prefetch(u, -1); });
      release_group(unit_groups_[u]);
    }));
  }
}

// The unit's own gather first, then the prefetched ones, which run on the
// stream while the unit computes.
void ZeroOptimizer::gather_with_prefetch(std::size_t unit, int direction) {
  for (int k = 0; k <= prefetch_; ++k) {
    const long u = static_cast<long>(unit) + direction * k;
    if (u < 0 || u >= static_cast<long>(unit_groups_.size())) break;
    request_group(unit_groups_[static_cast<std::size_t>(u)]);
  }
  stream_->wait(groups_[unit_groups_[unit]].filled);
}

void ZeroOptimizer::gather() {
  if (stage_ < 3) return;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (std::find(unit_groups_.begin(), unit_groups_.end(), g) == unit_groups_.end()) request_group(g);
  }
  stream_->synchronize();
}

void ZeroOptimizer::step() {
  reduce_grads();  // 1 and 2
  inner_->step();  // 3. The unchanged optimizer, on w[a, b) and its averaged gradient.
  // 4. Stages 1 and 2 all-gather the updated chunks into the parameters;
  // stage 3 keeps only its chunk until gather() or a unit's forward.
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (stage_ < 3) {
      fill_group(g);
    } else {
      release_group(g);
    }
  }
  reduced_ = false;
}

void ZeroOptimizer::reduce_grads() {
  if (reduced_) return;
  // 1 and 2: what backward has not reduced (in bitwise mode, the exact mean straight into the chunk).
  reducer_->finish("ZeroOptimizer::step", master_chunk_.mutable_grad());
  if (stage_ == 1 && !reducer_->bitwise()) {
    const std::span<const double> flat_grads = reducer_->adopt_flat();
    std::copy(flat_grads.begin() + a_, flat_grads.begin() + b_, master_chunk_.mutable_grad().begin());
  }
  for (Slot& slot : slots_) slot = Slot();
  reduced_ = true;
}

// 1 and 2 for one bucket of stages 2 and 3, during backward once its
// grads are final: laid end to end in a slot, dropped, and this rank's part
// of their mean added into the chunk's gradient. The bookkeeping stays on
// this thread; the stream gets only the collective and the buffers it owns
// until done (the slot, and this bucket's part of the chunk's gradient,
// which no other bucket shares).
void ZeroOptimizer::reduce_scatter_bucket(const Bucket& bucket) {
  const Window w{.n = layout_.numel(), .begin = bucket.begin, .length = bucket.end - bucket.begin};
  const auto [first, last] = window_part(w, comm_.size(), comm_.rank());
  // The first reduction of a step writes straight into the chunk's
  // gradient; a later micro-batch's goes through the slot's part and is added.
  const bool accumulate = std::exchange(summed_[bucket.first], 1) != 0;
  Slot& slot = slots_[next_slot_++ % slots_.size()];
  stream_->wait(slot.busy);
  if (slot.staging.empty()) slot.staging = Storage(reducer_->largest_bucket());
  if (accumulate && slot.part.empty()) slot.part = Storage(std::min(reducer_->largest_bucket(), b_ - a_));
  const std::span<double> chunk_grad = master_chunk_.mutable_grad();
  note_peak();
  const std::span<double> grads = slot.staging.span().first(w.length);
  take_grads(params_, layout_, bucket.first, bucket.last, grads);
  const std::span<double> out = chunk_grad.subspan(first - a_, last - first);
  const std::span<double> part = accumulate ? slot.part.span().first(last - first) : out;
  slot.busy = stream_->enqueue([this, grads, out, part, w, accumulate] {
    comm_.reduce_scatter(grads, part, ReduceOp::Mean, w);
    if (accumulate) {
      for (std::size_t i = 0; i < part.size(); ++i) out[i] += part[i];
    }
  });
}

// Stage 3: a unit's bucket is reduced (or, in bitwise mode, added) once
// backward is over for it, and its parameters are not needed until the next forward.
void ZeroOptimizer::release_unit_of(const Bucket& bucket) {
  for (std::size_t g : unit_groups_) {
    if (groups_[g].first == bucket.first) release_group(g);
  }
}

// Enqueued: whoever reads the parameters waits for group.filled first.
void ZeroOptimizer::request_group(std::size_t g) {
  Group& group = groups_[g];
  if (group.gathered) return;
  group.values->allocate();
  group.filled = stream_->enqueue([this, g] { fill_group(g); });
  group.gathered = true;
  note_peak();
}

// Straight into the parameters, which are views of the group's flat vector.
void ZeroOptimizer::fill_group(std::size_t g) {
  const Group& group = groups_[g];
  const Window w{.n = layout_.numel(), .begin = group.begin, .length = group.end - group.begin};
  const auto [first, last] = window_part(w, comm_.size(), comm_.rank());
  const std::span<const double> mine =
      first < last ? master_chunk_.data().subspan(first - a_, last - first) : std::span<const double>();
  comm_.all_gather(mine, group.values->span(), w);
}

// Stage 3: the storage goes back to the cache, where the next gather takes
// it up again without touching fresh pages.
void ZeroOptimizer::release_group(std::size_t g) {
  Group& group = groups_[g];
  if (!group.gathered) return;
  stream_->wait(group.filled);
  group.values->release();
  group.gathered = false;
}

void ZeroOptimizer::zero_grad() {
  stream_->synchronize();
  for (const Tensor& p : params_) p.zero_grad();
  master_chunk_.zero_grad();
  std::fill(summed_.begin(), summed_.end(), 0);
  reducer_->clear();  // stage 1: the flat home taken again for the next backward
  reduced_ = false;
}

NoSyncGuard ZeroOptimizer::no_sync() { return reducer_->no_sync(); }

void ZeroOptimizer::add_leaf() { reducer_->end_leaf(); }

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  // Before any backward (or after zero_grad) there is nothing to clip: the
  // caller's bug, named as DDP::clip_grad_norm names it rather than as
  // step()'s reduction would. Here no gradient reached a hook, was set by
  // hand or was reduced; in bitwise mode, where stages 2 and 3 drop each
  // leaf's grads, only the reduction's count of leaves over every rank
  // tells, and it fails on every rank alike.
  const bool nothing_here = !reduced_ && reducer_->nothing_yet();
  if (nothing_here && !reducer_->bitwise()) throw reducer_->no_gradients_yet();
  try {
    reduce_grads();
  } catch (const std::invalid_argument&) {
    if (nothing_here) throw reducer_->no_gradients_yet();  // bitwise: no rank added a leaf
    throw;
  }
  const std::span<double> chunk_grad = master_chunk_.grad();
  const double total_norm = reducer_->norm_of_parts(chunk_grad);
  const double coefficient = optim::clip_coefficient(total_norm, max_norm);
  for (double& g : chunk_grad) g *= coefficient;
  if (stage_ == 1) {
    for (const Tensor& p : params_)
      for (double& g : p.grad()) g *= coefficient;
  }
  return total_norm;
}

MemoryBytes ZeroOptimizer::memory_bytes() const {
  std::size_t params = 0, grads = master_chunk_.grad().size();
  for (const Slot& slot : slots_) grads += slot.staging.size() + slot.part.size();
  for (const Tensor& p : params_) params += p.impl().data.size();
  grads += reducer_->held();
  std::size_t optimizer = inner_->state_dict().bytes() / sizeof(double);
  // In stage 3 the master chunk is the rank's share of the parameters; below
  // it, a copy kept beside the full parameters for the optimizer.
  (stage_ == 3 ? params : optimizer) += master_chunk_.numel();
  return {.params = params * sizeof(double), .grads = grads * sizeof(double), .optimizer = optimizer * sizeof(double)};
}

void ZeroOptimizer::note_peak() {
  const MemoryBytes now = memory_bytes();
  peak_ = {.params = std::max(peak_.params, now.params),
           .grads = std::max(peak_.grads, now.grads),
           .optimizer = std::max(peak_.optimizer, now.optimizer)};
}

}  // namespace tinyllm::dist
