#include "tinyllm/nn/block.h"

namespace tinyllm::nn {

Block::Block(std::size_t n_embd, std::size_t n_head, double proj_std, Generator& gen) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(n_embd));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(n_embd, n_head, proj_std, gen));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(n_embd));
  mlp = register_module("mlp", std::make_shared<MLP>(n_embd, proj_std, gen));
}

Tensor Block::forward(const Tensor& x) const {
  return hooked([&] {
    Tensor h = x + attn->forward(ln_1->forward(x));
    return h + mlp->forward(ln_2->forward(h));
  });
}

}  // namespace tinyllm::nn
