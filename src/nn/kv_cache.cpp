#include "tinyllm/nn/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tinyllm/tensor/autograd.h"
#include "tinyllm/tensor/ops.h"

namespace tinyllm::nn {
namespace {

// One query [C] against the t cached keys and values [t, C] of each of the
// H heads: softmax(q·kᵀ/√(C/H)) v, heads side by side. No mask: every
// cached token precedes the query.
Tensor attend(std::span<const double> q, const std::vector<double>& k, const std::vector<double>& v,
              std::size_t n_head) {
  const std::size_t C = q.size(), t = k.size() / C, d = C / n_head;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> y(C, 0.0), p(t);
  for (std::size_t h = 0; h < n_head; ++h) {
    const std::size_t c0 = h * d;
    for (std::size_t j = 0; j < t; ++j) {
      double s = 0;
      for (std::size_t c = c0; c < c0 + d; ++c) s += q[c] * k[j * C + c];
      p[j] = s * scale;
    }
    const double largest = *std::max_element(p.begin(), p.end());
    double total = 0;
    for (double& x : p) total += (x = std::exp(x - largest));
    for (std::size_t j = 0; j < t; ++j) {
      for (std::size_t c = c0; c < c0 + d; ++c) y[c] += p[j] / total * v[j * C + c];
    }
  }
  return Tensor::from(std::move(y), {1, 1, C});
}

}  // namespace

KVCache::KVCache(const GPT& model) : model_(model), k_(model.h->size()), v_(model.h->size()) {}

// GPT::forward and Block::forward for one token, with the attention's keys
// and values kept.
std::vector<double> KVCache::forward(int token) {
  const GPTConfig& config = model_.config();
  if (size_ == config.block_size) {
    throw std::invalid_argument(
        fmt::format("KVCache: the cache is full at the model's block_size of {} tokens", config.block_size));
  }
  const autograd::NoGradGuard no_grad;
  const std::size_t C = config.n_embd;
  Tensor x = model_.wte->forward(std::span<const int>(&token, 1), {1, 1}) +
             model_.wpe->weight.slice(0, size_, size_ + 1);  // [1, 1, C]
  for (std::size_t i = 0; i < model_.h->size(); ++i) {
    const Block& block = model_.h->at<Block>(i);
    const std::vector<double> qkv = block.attn->c_attn->forward(block.ln_1->forward(x)).to_vector();  // [3C]
    k_[i].insert(k_[i].end(), qkv.begin() + static_cast<std::ptrdiff_t>(C),
                 qkv.begin() + static_cast<std::ptrdiff_t>(2 * C));
    v_[i].insert(v_[i].end(), qkv.begin() + static_cast<std::ptrdiff_t>(2 * C), qkv.end());
    x = x + block.attn->c_proj->forward(attend(std::span(qkv).first(C), k_[i], v_[i], block.attn->n_head));
    x = x + block.mlp->forward(block.ln_2->forward(x));
  }
  ++size_;
  return linear(model_.ln_f->forward(x), model_.wte->weight).to_vector();  // [V]
}

}  // namespace tinyllm::nn
