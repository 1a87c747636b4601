#include "tinyllm/nn/attention.h"

#include <fmt/format.h>

#include <stdexcept>

#include "tinyllm/tensor/ops.h"

namespace tinyllm::nn {

CausalSelfAttention::CausalSelfAttention(std::size_t n_embd, std::size_t n_head, double proj_std, Generator& gen)
    : n_head(n_head) {
  if (n_head == 0 || n_embd % n_head != 0) {
    throw std::invalid_argument(
        fmt::format("CausalSelfAttention: width {} is not divisible by {} heads", n_embd, n_head));
  }
  c_attn = register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd, gen));
  c_proj = register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd, gen, true, proj_std));
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  return hooked([&] {
    const std::size_t C = x.size(-1);
    Tensor qkv = c_attn->forward(x);  // [B, T, 3C]
    Tensor q = qkv.slice(-1, 0, C);
    Tensor k = qkv.slice(-1, C, 2 * C);
    Tensor v = qkv.slice(-1, 2 * C, 3 * C);
    return c_proj->forward(causal_attention(q, k, v, n_head));
  });
}

}  // namespace tinyllm::nn
