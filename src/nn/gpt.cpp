#include "tinyllm/nn/gpt.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "tinyllm/tensor/ops.h"

namespace tinyllm::nn {

namespace {

// 2^40 parameters: 8 TiB as doubles, before gradients and optimizer state.
constexpr double kMaxParameters = 1099511627776.0;

}  // namespace

void GPTConfig::check() const {
  const GPTConfig& c = *this;
  if (c.vocab_size == 0 || c.block_size == 0 || c.n_layer == 0 || c.n_head == 0 || c.n_embd == 0) {
    throw std::invalid_argument(fmt::format(
        "GPT: every size must be positive (got vocab_size {}, block_size {}, n_layer {}, n_head {}, n_embd {})",
        c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd));
  }
  if (c.n_embd % c.n_head != 0) {
    throw std::invalid_argument(fmt::format("GPT: width {} is not divisible by {} heads", c.n_embd, c.n_head));
  }
  // Counted in double, which cannot overflow where size_t would wrap and
  // then pass; beyond the cap no machine holds the parameters.
  const double C = static_cast<double>(c.n_embd), L = static_cast<double>(c.n_layer);
  const double count =
      (static_cast<double>(c.vocab_size) + static_cast<double>(c.block_size) + 2) * C + L * (12 * C * C + 13 * C);
  if (!(count <= kMaxParameters)) {
    throw std::invalid_argument(
        fmt::format("GPT: --layers {} --width {} --seq {} give {:.3g} parameters, more than the cap of {:.3g}",
                    c.n_layer, c.n_embd, c.block_size, count, kMaxParameters));
  }
}

std::vector<Shape> GPTConfig::parameter_shapes() const {
  const std::size_t C = n_embd;
  std::vector<Shape> shapes{{vocab_size, C}, {block_size, C}};
  for (std::size_t i = 0; i < n_layer; ++i) {
    const std::vector<Shape> block{{C}, {C}, {3 * C, C}, {3 * C}, {C, C},     {C},
                                   {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}};
    shapes.insert(shapes.end(), block.begin(), block.end());
  }
  shapes.push_back({C});
  shapes.push_back({C});
  return shapes;
}

// parameter_shapes()'s sum without listing them (a model too large to
// build is counted at once).
std::size_t GPTConfig::num_parameters() const {
  return (vocab_size + block_size + 2) * n_embd + n_layer * block_parameters();
}

double GPTConfig::flops_per_token() const {
  const auto looked_up = static_cast<double>(block_size * n_embd);
  const auto attention = 12.0 * static_cast<double>(n_layer * n_embd * block_size);
  return 6.0 * (static_cast<double>(num_parameters()) - looked_up) + attention;
}

GPT::GPT(const GPTConfig& config, std::uint64_t seed) : config_(config) {
  config.check();
  Generator gen(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  wte = register_module("wte", std::make_shared<Embedding>(config.vocab_size, config.n_embd, gen));
  wpe = register_module("wpe", std::make_shared<Embedding>(config.block_size, config.n_embd, gen));
  h = register_module("h", std::make_shared<ModuleList>());
  for (std::size_t i = 0; i < config.n_layer; ++i) {
    h->push_back(std::make_shared<Block>(config.n_embd, config.n_head, proj_std, gen));
  }
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(config.n_embd));
}

Tensor GPT::forward(std::span<const int> idx, std::size_t batch, std::size_t seq) const {
  if (seq == 0 || seq > config_.block_size) {
    throw std::invalid_argument(
        fmt::format("GPT: sequence length must be in [1, {}] (got {})", config_.block_size, seq));
  }
  if (idx.size() != batch * seq) {
    throw std::invalid_argument(
        fmt::format("GPT: {} token ids do not fill a batch of [{}, {}]", idx.size(), batch, seq));
  }
  return hooked([&] {
    // Positions 0..T-1 are the first T rows of wpe; [B, T, C] + [T, C] broadcasts.
    Tensor x = wte->forward(idx, {batch, seq}) + wpe->weight.slice(0, 0, seq);
    for (std::size_t i = 0; i < h->size(); ++i) x = h->at<Block>(i).forward(x);
    return linear(ln_f->forward(x), wte->weight);  // [B, T, V]
  });
}

Tensor GPT::loss(std::span<const int> idx, std::span<const int> targets, std::size_t batch, std::size_t seq) const {
  return cross_entropy(forward(idx, batch, seq), targets);
}

}  // namespace tinyllm::nn
