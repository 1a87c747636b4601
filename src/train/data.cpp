#include "tinyllm/train/data.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "../support/fnv1a.h"

namespace tinyllm::train {

Corpus Corpus::load(const std::string& path) {
  // An endless stream (/dev/zero, a FIFO) would be read until memory runs out.
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (std::filesystem::is_directory(status))
    throw std::invalid_argument(fmt::format("data file '{}' is a directory", path));
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw std::invalid_argument(fmt::format("data file '{}' is not a regular file", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("data file '{}' cannot be opened", path));
  std::vector<int> tokens;
  for (auto it = std::istreambuf_iterator<char>(in); it != std::istreambuf_iterator<char>(); ++it) {
    tokens.push_back(static_cast<unsigned char>(*it));
  }
  if (tokens.empty()) throw std::invalid_argument(fmt::format("data file '{}' is empty", path));
  return Corpus(std::move(tokens), path);
}

Corpus::Corpus(std::vector<int> tokens, std::string name) : tokens_(std::move(tokens)), name_(std::move(name)) {}

std::size_t Corpus::num_windows(std::size_t seq) const {
  if (seq == 0) throw std::invalid_argument("Corpus: sequence length must be positive (got 0)");
  return tokens_.empty() ? 0 : (tokens_.size() - 1) / seq;
}

std::uint64_t Corpus::fnv1a() const {
  std::uint64_t h = tinyllm::detail::kFnv1aBasis;
  for (int token : tokens_) {
    const auto byte = static_cast<std::byte>(token);
    h = tinyllm::detail::fnv1a(std::span(&byte, 1), h);
  }
  return h;
}

Batch Corpus::batch(std::size_t step, std::size_t batch, std::size_t seq, int rank, int world) const {
  const std::size_t windows = num_windows(seq);
  if (windows == 0) {
    throw std::invalid_argument(
        fmt::format("{} has {} tokens, too few for one window of {} + 1 tokens", name_, tokens_.size(), seq));
  }
  if (world < 1 || rank < 0 || rank >= world) {
    throw std::invalid_argument(fmt::format("Corpus: rank {} is not in a world of {}", rank, world));
  }
  const auto p = static_cast<std::size_t>(world), r = static_cast<std::size_t>(rank);
  if (batch == 0 || batch % p != 0) {
    throw std::invalid_argument(fmt::format("batch of {} rows does not divide by world size {}", batch, world));
  }
  Batch out{.batch = batch / p, .seq = seq, .inputs = {}, .targets = {}};
  out.inputs.reserve(out.batch * seq);
  out.targets.reserve(out.batch * seq);
  for (std::size_t j = r * batch / p; j < (r + 1) * batch / p; ++j) {
    const std::size_t start = ((step * batch + j) % windows) * seq;
    out.inputs.insert(out.inputs.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(start),
                      tokens_.begin() + static_cast<std::ptrdiff_t>(start + seq));
    out.targets.insert(out.targets.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(start + 1),
                       tokens_.begin() + static_cast<std::ptrdiff_t>(start + seq + 1));
  }
  return out;
}

Batch Corpus::windows(std::size_t first, std::size_t count, std::size_t seq) const {
  if (first + count > num_windows(seq)) {
    throw std::invalid_argument(fmt::format("{} has {} windows of {} + 1 tokens, not [{}, {})", name_, num_windows(seq),
                                            seq, first, first + count));
  }
  Batch out{.batch = count, .seq = seq, .inputs = {}, .targets = {}};
  const auto at = [&](std::size_t token) { return tokens_.begin() + static_cast<std::ptrdiff_t>(token); };
  out.inputs.assign(at(first * seq), at((first + count) * seq));
  for (std::size_t w = first; w < first + count; ++w)
    out.targets.insert(out.targets.end(), at(w * seq + 1), at(w * seq + seq + 1));
  return out;
}

std::pair<Corpus, Corpus> Corpus::split(double val_fraction, std::size_t seq) const {
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    throw std::invalid_argument(fmt::format("--val-fraction must be in [0, 1) (got {})", val_fraction));
  }
  const auto n = static_cast<std::size_t>(std::floor((1 - val_fraction) * static_cast<double>(tokens_.size())));
  const auto cut = tokens_.begin() + static_cast<std::ptrdiff_t>(n);
  Corpus train({tokens_.begin(), cut}, name_);
  Corpus val({cut, tokens_.end()}, fmt::format("the last {} tokens of {} (validation)", tokens_.size() - n, name_));
  for (const Corpus* part : {&train, &val}) {
    // At fraction 0 the training part is the corpus, which the trainer checks as such.
    if (part->size() <= seq && val_fraction > 0) {
      throw std::invalid_argument(
          fmt::format("--val-fraction {} leaves {} {} tokens of {}, too few for one window of {} + 1 tokens",
                      val_fraction, part->size(), part == &train ? "training" : "validation", name_, seq));
    }
  }
  return {std::move(train), std::move(val)};
}

}  // namespace tinyllm::train
