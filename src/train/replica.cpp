#include "tinyllm/train/replica.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "tinyllm/distributed/chunk.h"
#include "tinyllm/optim/clip_grad.h"
#include "tinyllm/tensor/autograd.h"
#include "tinyllm/tensor/storage.h"

namespace tinyllm::train {
namespace {

const char* state_name(Region region) { return region == Region::ExpAvg ? "exp_avg" : "exp_avg_sq"; }

// The state dict's tensor "<index>.<field>", or an empty span before the first step.
std::span<const double> state_tensor(const optim::StateDict& state, std::size_t index, const char* field) {
  const std::string name = fmt::format("{}.{}", index, field);
  for (const auto& [key, tensor] : state.tensors) {
    if (key == name) return tensor.data();
  }
  return {};
}

// GPT-2's rule: matrices and embeddings decay; biases and LayerNorm gains,
// the tensors of one dimension, do not.
bool decays(const Tensor& p) { return p.dim() >= 2; }

// The elements of [a, b) of the flat vector that weight decay skips, as
// ranges from a.
std::vector<std::pair<std::size_t, std::size_t>> no_decay_ranges(const std::vector<Tensor>& params,
                                                                 const dist::FlatLayout& layout, std::size_t a,
                                                                 std::size_t b) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (const dist::Overlap& o : layout.overlaps(a, b)) {
    if (decays(params[o.index])) continue;
    if (!ranges.empty() && ranges.back().second == o.first - a) {
      ranges.back().second = o.last - a;  // biases and gains side by side make one run
    } else {
      ranges.emplace_back(o.first - a, o.last - a);
    }
  }
  return ranges;
}

// Per parameter, for one process and DDP: each tensor's own ranges.
optim::NoDecay no_decay_per_tensor(const std::vector<Tensor>& params) {
  optim::NoDecay none;
  for (const Tensor& p : params) none.push_back(no_decay_ranges({p}, dist::FlatLayout({p}), 0, p.numel()));
  return none;
}

}  // namespace

Replica::Replica(std::shared_ptr<nn::GPT> model, const optim::AdamWOptions& adamw, dist::Comm& comm, int zero,
                 bool overlap, bool decay_all, bool bitwise)
    : model_(std::move(model)), params_(model_->parameters()), comm_(comm), zero_(zero), bitwise_(bitwise) {
  if (zero_ < 0 || zero_ > 3) throw std::invalid_argument(fmt::format("--zero must be 0, 1, 2 or 3 (got {})", zero_));
  layout_ = dist::FlatLayout(params_);
  std::tie(a_, b_) = dist::chunk_bounds(layout_.numel(), comm_.size(), comm_.rank());
  dist::BucketOptions buckets;
  buckets.overlap = overlap;
  buckets.bitwise = bitwise;
  if (zero_ == 0) {
    // One rank alone is the plain AdamW loop, the reference DDP equals
    // (in bitwise mode, DDP's exact sum over the leaves on one rank).
    if (comm_.size() > 1 || bitwise_) ddp_ = std::make_unique<dist::DDP>(model_, comm_, buckets);
    adamw_ =
        std::make_unique<optim::AdamW>(params_, adamw, decay_all ? optim::NoDecay{} : no_decay_per_tensor(params_));
  } else {
    // Stage 3 gathers block by block; the embeddings and ln_f (2 to 3% of
    // the parameters at the sizes this trainer runs) stay gathered for the step.
    dist::ZeroOptions options;
    options.buckets = buckets;
    if (zero_ == 3) {
      for (const auto& [name, block] : model_->h->named_children()) options.units.push_back(block);
    }
    // The one flat chunk parameter [a, b) crosses tensors of both kinds.
    const optim::NoDecay chunk =
        decay_all ? optim::NoDecay{} : optim::NoDecay{no_decay_ranges(params_, layout_, a_, b_)};
    zero_optimizer_ =
        std::make_unique<dist::ZeroOptimizer>(optim::AdamW::factory(adamw, chunk), params_, comm_, zero_, options);
  }
  // The model was built in buffers of its own, copied by DDP and ZeRO into
  // their flat vectors: their lengths are never asked for again, so they go
  // back to the system rather than sit in the storage cache.
  empty_cache();
}

Replica::~Replica() = default;

double Replica::backward(const Batch& batch, std::size_t grad_accum) {
  if (bitwise_) {
    dist::ExactSum losses = backward_leaves(batch);
    comm_.all_reduce(losses.limbs(), dist::ReduceOp::Sum);
    double sum = 0;
    losses.result({&sum, 1});
    return sum / static_cast<double>(batch.batch * static_cast<std::size_t>(comm_.size()));
  }
  const std::size_t T = batch.seq, rows = batch.batch / grad_accum;
  double loss_sum = 0;
  for (std::size_t m = 0; m < grad_accum; ++m) {
    const std::span<const int> inputs = std::span(batch.inputs).subspan(m * rows * T, rows * T);
    const std::span<const int> targets = std::span(batch.targets).subspan(m * rows * T, rows * T);
    Tensor loss = model_->loss(inputs, targets, rows, T);
    if (grad_accum > 1) loss = loss * (1.0 / static_cast<double>(grad_accum));
    loss_sum += loss.item();
    // DDP and stage 1 hold every gradient anyway: they add the micro-batches
    // up locally and reduce once, during the last backward. Stages 2 and 3
    // reduce each micro-batch's, so as not to hold them.
    std::optional<dist::NoSyncGuard> quiet;
    if (m + 1 < grad_accum && ddp_) quiet.emplace(ddp_->no_sync());
    if (m + 1 < grad_accum && zero_ == 1) quiet.emplace(zero_optimizer_->no_sync());
    loss.backward();
  }
  comm_.all_reduce({&loss_sum, 1}, dist::ReduceOp::Mean);
  return loss_sum;
}

dist::ExactSum Replica::backward_leaves(const Batch& batch) {
  const std::size_t T = batch.seq;
  dist::ExactSum losses(1);
  for (std::size_t row = 0; row < batch.batch; ++row) {
    Tensor loss =
        model_->loss(std::span(batch.inputs).subspan(row * T, T), std::span(batch.targets).subspan(row * T, T), 1, T);
    const double value = loss.item();
    losses.add({&value, 1});
    loss.backward();
    if (ddp_) {
      ddp_->add_leaf();
    } else {
      zero_optimizer_->add_leaf();
    }
  }
  return losses;
}

double Replica::eval_loss(const Batch& batch) {
  if (zero_optimizer_) zero_optimizer_->gather();
  const autograd::NoGradGuard no_grad;
  return model_->loss(batch.inputs, batch.targets, batch.batch, batch.seq).item();
}

void Replica::zero_grad() {
  if (zero_optimizer_) {
    zero_optimizer_->gather();
    zero_optimizer_->zero_grad();
  } else {
    adamw_->zero_grad();
  }
}

double Replica::step(double clip) {
  double norm = 0;
  if (zero_optimizer_) {
    if (clip > 0) norm = zero_optimizer_->clip_grad_norm(clip);
    zero_optimizer_->step();
    return norm;
  }
  if (ddp_) {
    ddp_->sync_grads();
    if (clip > 0) norm = ddp_->clip_grad_norm(clip);
  } else if (clip > 0) {
    norm = optim::clip_grad_norm(params_, clip);
  }
  adamw_->step();
  return norm;
}

bool Replica::overlapping() const {
  if (ddp_) return ddp_->overlapping();
  return zero_optimizer_ && zero_optimizer_->overlapping();
}

optim::Optimizer& Replica::optimizer() const {
  return zero_optimizer_ ? zero_optimizer_->inner() : static_cast<optim::Optimizer&>(*adamw_);
}

void Replica::set_lr(double lr) { optimizer().set_lr(lr); }

double Replica::lr() const { return optimizer().lr(); }

dist::MemoryBytes Replica::memory_bytes() const {
  if (zero_optimizer_) return zero_optimizer_->memory_bytes();
  std::size_t grads = 0;
  if (ddp_) {
    grads = ddp_->grad_bytes();
  } else {
    for (const Tensor& p : params_) grads += p.grad().size() * sizeof(double);
  }
  return {.params = layout_.numel() * sizeof(double), .grads = grads, .optimizer = adamw_->state_dict().bytes()};
}

dist::MemoryBytes Replica::peak_memory_bytes() const {
  return zero_optimizer_ ? zero_optimizer_->peak_memory_bytes() : memory_bytes();
}

void Replica::reset_peak_memory_bytes() {
  if (zero_optimizer_) zero_optimizer_->reset_peak_memory_bytes();
}

std::vector<std::span<const double>> Replica::segments(Region region) const {
  std::vector<std::span<const double>> out;
  if (zero_optimizer_) {
    out.push_back(region == Region::Params
                      ? zero_optimizer_->master_chunk().data()
                      : state_tensor(zero_optimizer_->inner().state_dict(), 0, state_name(region)));
    return out;
  }
  const optim::StateDict state = region == Region::Params ? optim::StateDict{} : adamw_->state_dict();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.push_back(region == Region::Params ? params_[i].data() : state_tensor(state, i, state_name(region)));
  }
  return out;
}

std::span<const double> Replica::zeros(std::size_t count) const {
  // Made once at the longest length asked for (the chunk, or a parameter
  // for DDP), so that spans handed out earlier stay valid.
  if (zeros_.empty()) {
    std::size_t longest = b_ - a_;
    if (!zero_optimizer_) {
      for (const Tensor& p : params_) longest = std::max(longest, p.numel());
    }
    zeros_.assign(longest, 0.0);
  }
  return std::span<const double>(zeros_).first(count);
}

std::vector<double> Replica::full(Region region) {
  std::vector<double> out(layout_.numel());
  if (zero_optimizer_) {  // every region is the ranks' chunks, the parameters too
    const std::span<const double> chunk = segments(region)[0];
    comm_.all_gather(chunk.empty() ? zeros(b_ - a_) : chunk, out);
    return out;
  }
  const std::vector<std::span<const double>> segs =
      region == Region::Params ? std::vector<std::span<const double>>() : segments(region);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    // Before AdamW's first step its state is empty: zeros, as out starts.
    const std::span<const double> values = region == Region::Params ? params_[i].data() : segs[i];
    std::copy(values.begin(), values.end(), out.begin() + static_cast<std::ptrdiff_t>(layout_.begin(i)));
  }
  return out;
}

std::vector<Piece> Replica::pieces() const {
  std::vector<Piece> out;
  for (int g = 0; g < kNumRegions; ++g) {
    const std::size_t base = static_cast<std::size_t>(g) * layout_.numel();
    const std::vector<std::span<const double>> segs = segments(static_cast<Region>(g));
    if (zero_optimizer_) {
      out.push_back({base + a_, segs[0].empty() ? zeros(b_ - a_) : segs[0]});
      continue;
    }
    // One process and DDP hold every parameter: write the part of each
    // that falls in this rank's chunk, so the ranks share the writing.
    for (const dist::Overlap& o : layout_.overlaps(a_, b_)) {
      const std::span<const double> values = segs[o.index].empty() ? zeros(layout_.numel(o.index)) : segs[o.index];
      out.push_back({base + o.first, values.subspan(o.first - o.begin, o.last - o.first)});
    }
  }
  return out;
}

void Replica::load_optimizer_state(const SafetensorsFile& file, double adam_step) {
  if (adam_step == 0) return;  // AdamW starts afresh, as before its first step
  optim::StateDict state;
  const auto read = [&](Region region, std::size_t first, std::vector<std::size_t> shape) {
    Tensor t = Tensor::empty(std::move(shape));
    file.read(static_cast<std::size_t>(region) * layout_.numel() + first, t.data());
    return t;
  };
  if (zero_optimizer_) {
    state.tensors.emplace_back("0.exp_avg", read(Region::ExpAvg, a_, {b_ - a_}));
    state.tensors.emplace_back("0.exp_avg_sq", read(Region::ExpAvgSq, a_, {b_ - a_}));
    state.scalars.emplace_back("0.step", adam_step);
    zero_optimizer_->inner().load_state_dict(state);
    return;
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::size_t begin = layout_.begin(i);
    state.tensors.emplace_back(fmt::format("{}.exp_avg", i), read(Region::ExpAvg, begin, params_[i].shape()));
    state.tensors.emplace_back(fmt::format("{}.exp_avg_sq", i), read(Region::ExpAvgSq, begin, params_[i].shape()));
    state.scalars.emplace_back(fmt::format("{}.step", i), adam_step);
  }
  adamw_->load_state_dict(state);
}

}  // namespace tinyllm::train
