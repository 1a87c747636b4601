// Corpus and Batch: docs/DESIGN.md's data order (section 4), so any run can be reproduced by
// anyone. Token i is byte i of the file. Window w is tokens [w·T, w·T + T + 1):
// inputs its first T, targets its last T. With W = ⌊(N − 1)/T⌋ windows, step s
// uses windows (s·B + j) mod W for j = 0..B−1, and rank r of p takes rows
// [r·B/p, (r+1)·B/p) of that global batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tinyllm::train {

struct Batch {
  std::size_t batch = 0;     // B, rows in this batch
  std::size_t seq = 0;       // T
  std::vector<int> inputs;   // [B, T]
  std::vector<int> targets;  // [B, T], inputs shifted by one token
};

class Corpus {
 public:
  // Every byte of the file is a token; a missing or empty file is refused.
  static Corpus load(const std::string& path);
  explicit Corpus(std::vector<int> tokens, std::string name = "corpus");

  std::size_t size() const { return tokens_.size(); }
  const std::string& name() const { return name_; }
  std::size_t num_windows(std::size_t seq) const;  // W
  // FNV-1a (64 bits) of the tokens, each as the byte it is: of the file's
  // first size() bytes for a loaded corpus or its training part.
  std::uint64_t fnv1a() const;

  // This rank's rows of step `step`'s global batch of `batch` windows.
  Batch batch(std::size_t step, std::size_t batch, std::size_t seq, int rank = 0, int world = 1) const;
  // Windows [first, first + count), all of them, in order; std::invalid_argument past the last.
  Batch windows(std::size_t first, std::size_t count, std::size_t seq) const;

  // The first ⌊(1 − val_fraction)·N⌋ tokens to train on and the rest to
  // validate on, each a corpus of its own: docs/DESIGN.md's order (section 4) applies to the
  // training part as if it were the whole file. std::invalid_argument for
  // a fraction outside [0, 1), or, at a fraction above 0, a part of fewer
  // than seq + 1 tokens.
  std::pair<Corpus, Corpus> split(double val_fraction, std::size_t seq) const;

 private:
  std::vector<int> tokens_;
  std::string name_;
};

}  // namespace tinyllm::train
