// Embedding: a table of num_embeddings rows of width embedding_dim, looked up
// by token id (torch.nn.Embedding). Rows start as N(0, std), GPT-2's choice.
#pragma once

#include <span>

#include "tinyllm/nn/module.h"
#include "tinyllm/tensor/random.h"

namespace tinyllm::nn {

class Embedding : public Module {
 public:
  Embedding(std::size_t num_embeddings, std::size_t embedding_dim, Generator& gen, double std = 0.02);
  Tensor forward(std::span<const int> ids, const Shape& ids_shape) const;  // -> [ids_shape..., dim]

  Tensor weight;  // [num_embeddings, embedding_dim]
};

}  // namespace tinyllm::nn
