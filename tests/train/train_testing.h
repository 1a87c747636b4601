// What the trainer's tests share: a model small enough to train in
// milliseconds on the default corpus (every kind of parameter of the real
// one), and a scratch directory that is removed afterwards.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tinyllm/train/safetensors.h"
#include "tinyllm/train/trainer.h"

namespace tinyllm::testing {

inline train::TrainOptions tiny_run(int world = 1, int zero = 0) {
  train::TrainOptions o;
  o.model = {.vocab_size = 256, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  o.batch = 24;  // divides by 1, 2, 3, 4 ranks times 1 or 2 micro-batches
  o.steps = 4;
  o.adamw.lr = 1e-2;
  o.world = world;
  o.zero = zero;
  o.backend = train::Backend::Threads;
  o.val_fraction = 0;  // the whole corpus, as the tests' hand loops read it
  return o;
}

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The whole data region of a safetensors file.
inline std::vector<double> read_all(const std::string& path) {
  const train::SafetensorsFile file = train::SafetensorsFile::open(path);
  std::vector<double> values(file.size());
  file.read(0, values);
  return values;
}

}  // namespace tinyllm::testing
