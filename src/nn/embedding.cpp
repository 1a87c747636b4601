#include "tinyllm/nn/embedding.h"

#include "tinyllm/tensor/ops.h"

namespace tinyllm::nn {

Embedding::Embedding(std::size_t num_embeddings, std::size_t embedding_dim, Generator& gen, double std) {
  weight = register_parameter("weight", Tensor::empty({num_embeddings, embedding_dim}));
  normal_(weight, gen, 0.0, std);
}

Tensor Embedding::forward(std::span<const int> ids, const Shape& ids_shape) const {
  return hooked([&] { return embedding(weight, ids, ids_shape); });
}

}  // namespace tinyllm::nn
