#include "tinyllm/train/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "difference.h"
#include "safetensors_format.h"
#include "tinyllm/distributed/flat_layout.h"
#include "tinyllm/distributed/payload.h"
#include "tinyllm/tensor/deferred_init.h"
#include "tinyllm/train/replica.h"

namespace tinyllm::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "tinyllm-checkpoint-1";

const std::string& read_text(const SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata().find(key);
  if (it == file.metadata().end()) {
    throw std::invalid_argument(fmt::format("checkpoint '{}' lacks '{}' in its metadata", file.path(), key));
  }
  return it->second;
}

std::uint64_t read_number(const SafetensorsFile& file, const std::string& key, int base = 10) {
  std::uint64_t value = 0;
  const std::string& text = read_text(file, key);
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (error != std::errc{} || end != text.data() + text.size()) {
    throw std::invalid_argument(fmt::format("checkpoint '{}': metadata '{}' must be a whole number{} (got '{}')",
                                            file.path(), key, base == 16 ? " in hex" : "", text));
  }
  return value;
}

double read_fraction(const SafetensorsFile& file, const std::string& key) {
  double value = 0;
  const std::string& text = read_text(file, key);
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !(value >= 0 && value < 1)) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}': metadata '{}' must be a number in [0, 1) (got '{}')", file.path(), key, text));
  }
  return value;
}

// The whole-number metadata, one list for writing and for reading: f(key,
// field) for each, with info const when writing.
template <class Info, class F>
void for_each_number(Info& info, F f) {
  f("vocab_size", info.config.vocab_size);
  f("block_size", info.config.block_size);
  f("n_layer", info.config.n_layer);
  f("n_head", info.config.n_head);
  f("n_embd", info.config.n_embd);
  f("step", info.step);
  f("batch", info.batch);
  f("seed", info.seed);
  f("world", info.world);
  f("zero", info.zero);
}

// Checkpoints written before the fingerprint have none of its keys.
std::optional<DataFingerprint> read_fingerprint(const SafetensorsFile& file) {
  const Metadata& m = file.metadata();
  if (!m.contains("data_tokens") && !m.contains("data_fnv1a") && !m.contains("val_fraction")) return std::nullopt;
  return DataFingerprint{.tokens = read_number(file, "data_tokens"),
                         .fnv1a = read_number(file, "data_fnv1a", 16),
                         .val_fraction = read_fraction(file, "val_fraction")};
}

std::string shape_string(const std::vector<std::size_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// The file's tensors against the sizes its metadata gives, before anyone
// builds a model of those sizes: a model made from a checked config is no
// larger than the file. The count first (3 regions of 4 + 12·n_layer
// tensors), which bounds n_layer by the header; then every size against the
// file's length, so that 4·n_embd and the shapes below cannot overflow; then
// each shape. The names are load_model's to check.
void check_shapes(const SafetensorsFile& file, const nn::GPTConfig& c) {
  constexpr auto regions = static_cast<std::size_t>(kNumRegions);
  const std::size_t held = file.tensors().size();
  const std::size_t per_region = held / regions, blocks = per_region < 4 ? 0 : (per_region - 4) / 12;
  if (held % regions != 0 || per_region < 4 + 12 || (per_region - 4) % 12 != 0 || blocks != c.n_layer) {
    throw std::invalid_argument(
        fmt::format("checkpoint '{}' holds {} tensors, but its metadata's n_layer {} needs {} × (4 + 12 × {})",
                    file.path(), held, c.n_layer, kNumRegions, c.n_layer));
  }
  for (const auto& [key, size] :
       {std::pair{"vocab_size", c.vocab_size}, std::pair{"block_size", c.block_size}, std::pair{"n_embd", c.n_embd}}) {
    if (size > file.size()) {
      throw std::invalid_argument(fmt::format("checkpoint '{}': metadata '{}' is {}, more than the {} values it holds",
                                              file.path(), key, size, file.size()));
    }
  }
  const std::vector<Shape> shapes = c.parameter_shapes();
  for (std::size_t i = 0; i < held; ++i) {
    const Shape& wants = shapes[i % shapes.size()];
    const TensorInfo& t = file.tensors()[i];
    if (t.shape != wants) {
      throw std::invalid_argument(fmt::format(
          "checkpoint '{}': its tensor {} ('{}') has shape {}, but its metadata's sizes (n_embd {}, vocab_size {}, "
          "block_size {}) give {}",
          file.path(), i, detail::brief(t.name), shape_string(t.shape), c.n_embd, c.vocab_size, c.block_size,
          shape_string(wants)));
    }
  }
}

}  // namespace

std::string checkpoint_path(const std::string& dir, std::size_t step) {
  return (fs::path(dir) / fmt::format("step-{:08}.safetensors", step)).string();
}

DataFingerprint fingerprint(const Corpus& train, double val_fraction) {
  return {.tokens = train.size(), .fnv1a = train.fnv1a(), .val_fraction = val_fraction};
}

std::string find_checkpoint(const std::string& path_or_dir, const std::string& flag) {
  std::error_code error;
  if (!fs::is_directory(path_or_dir, error)) return path_or_dir;
  std::string latest;
  for (const auto& entry : fs::directory_iterator(path_or_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("step-") && name.ends_with(".safetensors") && entry.path().string() > latest) {
      latest = entry.path().string();
    }
  }
  if (latest.empty()) {
    // The best step is complete, but not where the run stopped: only by name.
    const fs::path best = fs::path(path_or_dir) / kBestCheckpoint;
    const std::string only_best =
        fs::exists(best, error)
            ? fmt::format(" (only {}, the step of the lowest validation loss; {} {} to start from it)", kBestCheckpoint,
                          flag.empty() ? "name" : "pass " + flag, best.string())
            : "";
    throw std::invalid_argument(fmt::format("{}{}: the directory holds no step-*.safetensors checkpoint{}", flag,
                                            flag.empty() ? "'" + path_or_dir + "'" : " " + path_or_dir, only_best));
  }
  return latest;
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  // The writer's name for its temporary: path + "." + 16 hex digits + ".tmp".
  const auto is_temporary = [](std::string_view name) {
    constexpr std::string_view kSuffix = ".tmp", kKind = ".safetensors.";
    if (!name.ends_with(kSuffix)) return false;
    name.remove_suffix(kSuffix.size());
    if (name.size() < detail::kDigits + kKind.size()) return false;
    const std::string_view digits = name.substr(name.size() - detail::kDigits);
    name.remove_suffix(detail::kDigits);
    return name.ends_with(kKind) && std::all_of(digits.begin(), digits.end(), [](char c) {
             return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
  };
  std::vector<std::string> removed;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    std::error_code ignored;
    if (entry.is_regular_file(ignored) && is_temporary(entry.path().filename().string()) &&
        fs::remove(entry.path(), ignored)) {
      removed.push_back(entry.path().string());
    }
  }
  return removed;
}

std::vector<TensorInfo> checkpoint_tensors(const nn::GPT& model) {
  std::vector<TensorInfo> tensors;
  const auto named = model.named_parameters();
  for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
    for (const auto& [name, p] : named) tensors.push_back({name + suffix, p.shape()});
  }
  return tensors;
}

namespace {

// The tensor of the checkpoint's data region that holds the value at offset.
std::string tensor_at(const std::vector<TensorInfo>& tensors, std::size_t offset) {
  for (const TensorInfo& t : tensors) {
    if (offset < t.numel()) return t.name;
    offset -= t.numel();
  }
  return "?";
}

// What one rank found in its own pieces: how many values are not finite,
// and the checkpoint offset of the first.
struct NonFinite {
  std::size_t count = 0, first = 0;
};
using NonFinitePayload = dist::Payload<NonFinite, [](auto& n, auto& io) { io(n.count, n.first); }>;

// Collective: every rank counts the values of its own pieces that are not
// finite (one pass over its chunk) and the ranks share their counts and
// first offsets, so that all of them refuse together.
void check_finite(const std::string& path, dist::Comm& comm, const std::vector<TensorInfo>& tensors,
                  const std::vector<Piece>& pieces, std::size_t step) {
  NonFinite mine;
  for (const Piece& piece : pieces) {
    for (std::size_t i = 0; i < piece.values.size(); ++i) {
      if (std::isfinite(piece.values[i])) continue;
      if (mine.count++ == 0) mine.first = piece.offset + i;
    }
  }
  NonFinite all{.count = 0, .first = std::numeric_limits<std::size_t>::max()};
  for (const NonFinite& rank : NonFinitePayload::all_gather(comm, mine)) {
    if (rank.count > 0) all.first = std::min(all.first, rank.first);
    all.count += rank.count;
  }
  if (all.count == 0) return;
  throw NonFiniteCheckpoint(fmt::format(
      "step {}'s parameters and AdamW state hold {} value{} that {} not finite (the first in '{}'): checkpoint "
      "'{}' was not written",
      step, all.count, all.count == 1 ? "" : "s", all.count == 1 ? "is" : "are", tensor_at(tensors, all.first), path));
}

}  // namespace

void save_checkpoint(const std::string& path, dist::Comm& comm, const Replica& replica, const CheckpointInfo& info,
                     SharedFiles shared) {
  const std::vector<TensorInfo> tensors = checkpoint_tensors(replica.model());
  const std::vector<Piece> pieces = replica.pieces();
  check_finite(path, comm, tensors, pieces, info.step);
  Metadata metadata = {{"format", kFormat}};
  for_each_number(info, [&metadata](const char* key, const auto& value) { metadata[key] = std::to_string(value); });
  if (info.data) {
    metadata["data_tokens"] = std::to_string(info.data->tokens);
    metadata["data_fnv1a"] = fmt::format("{:016x}", info.data->fnv1a);
    metadata["val_fraction"] = fmt::format("{}", info.data->val_fraction);
  }
  write_safetensors(path, comm, tensors, metadata, pieces, shared);
}

CheckpointInfo read_checkpoint_info(const SafetensorsFile& file) {
  const auto format = file.metadata().find("format");
  if (format == file.metadata().end() || format->second != kFormat) {
    throw std::invalid_argument(fmt::format("'{}' is a safetensors file but not a tinyllm checkpoint (format '{}')",
                                            file.path(), format == file.metadata().end() ? "" : format->second));
  }
  CheckpointInfo info;
  for_each_number(info, [&file](const char* key, auto& value) {
    value = static_cast<std::remove_reference_t<decltype(value)>>(read_number(file, key));
  });
  info.data = read_fingerprint(file);
  check_shapes(file, info.config);
  try {
    info.config.check();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("checkpoint '{}': {}", file.path(), e.what()));
  }
  return info;
}

void load_model(const SafetensorsFile& file, const nn::GPT& model) {
  const std::vector<TensorInfo> expected = checkpoint_tensors(model);
  const std::vector<TensorInfo>& held = file.tensors();
  for (std::size_t i = 0; i < std::max(expected.size(), held.size()); ++i) {
    if (i >= held.size() || i >= expected.size() || held[i].name != expected[i].name ||
        held[i].shape != expected[i].shape) {
      const std::string has = i < held.size() ? held[i].name + " " + shape_string(held[i].shape) : "nothing";
      const std::string wants =
          i < expected.size() ? expected[i].name + " " + shape_string(expected[i].shape) : "nothing";
      throw std::invalid_argument(
          fmt::format("checkpoint '{}' does not fit this model: its tensor {} is {}, the model expects {}", file.path(),
                      i, has, wants));
    }
  }
  const std::vector<Tensor> params = model.parameters();
  const dist::FlatLayout layout(params);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::size_t offset = layout.begin(i);
    if (is_deferred(params[i])) {
      // Stage 3 then reads its own chunk's ranges, never the whole model.
      set_deferred_init(params[i],
                        [&file, offset](std::size_t begin, std::span<double> out) { file.read(offset + begin, out); });
    } else {
      file.read(offset, params[i].data());
    }
  }
}

std::unique_ptr<nn::GPT> load_gpt(const SafetensorsFile& file) {
  auto model = std::make_unique<nn::GPT>(read_checkpoint_info(file).config);
  load_model(file, *model);
  return model;
}

std::array<double, kNumRegions> checkpoint_diff(const SafetensorsFile& a, const SafetensorsFile& b) {
  const auto same = [](const TensorInfo& x, const TensorInfo& y) { return x.name == y.name && x.shape == y.shape; };
  if (!std::equal(a.tensors().begin(), a.tensors().end(), b.tensors().begin(), b.tensors().end(), same) ||
      a.size() % kNumRegions != 0) {
    throw std::invalid_argument(
        fmt::format("checkpoints '{}' and '{}' hold different tensors: not the same model", a.path(), b.path()));
  }
  // Region by region, so two vectors of n values are all that is held.
  const std::size_t n = a.size() / kNumRegions;
  std::array<double, kNumRegions> worst{};
  std::vector<double> x(n), y(n);
  for (std::size_t g = 0; g < kNumRegions; ++g) {
    a.read(g * n, x);
    b.read(g * n, y);
    worst[g] = max_abs_diff(x, y);
  }
  return worst;
}

}  // namespace tinyllm::train
