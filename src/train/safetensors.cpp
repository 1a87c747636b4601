// The checked reader of safetensors files: SafetensorsFile::open validates
// the whole file, the checksum included, before it hands out a single value;
// read() then moves whole ranges with pread. F64 tensors only, as the writer
// (safetensors_writer.cpp) writes them.
#include "tinyllm/train/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <utility>

#include "safetensors_format.h"

namespace tinyllm::train {

using detail::brief, detail::checksum, detail::header_checksum, detail::hex, detail::kBlock, detail::kDigits,
    detail::kMaxDepth, detail::kMaxHeader, detail::kMaxRank, detail::multiply, detail::read_all;
// Parsed into a sorted map, not ordered_json: its linear key lookups would
// make a header of many tensors quadratic. The header's order is kept apart.
using Json = nlohmann::json;

namespace {

// The header's nesting and array lengths (detail::kMaxDepth, kMaxRank),
// checked on the raw text in one pass before the parser builds anything, so
// that neither the parser nor a message's dump() recurses deeper than a
// real header. Empty when the text is within them, else what is wrong.
std::string check_nesting(std::string_view text) {
  std::array<std::size_t, kMaxDepth + 1> commas{};  // per open bracket; used only for arrays
  std::array<bool, kMaxDepth + 1> is_array{};
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return fmt::format("nests deeper than the format's {} levels", kMaxDepth);
      commas[depth] = 0;
      is_array[depth] = c == '[';
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if (c == ',' && depth > 0 && is_array[depth] && ++commas[depth] >= kMaxRank) {
      return fmt::format("has an array of more than {} values (a shape's rank is at most {})", kMaxRank, kMaxRank);
    }
  }
  return {};
}

}  // namespace

std::size_t TensorInfo::numel() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      size_(other.size_),
      tensors_(std::move(other.tensors_)),
      offsets_(std::move(other.offsets_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    size_ = other.size_;
    tensors_ = std::move(other.tensors_);
    offsets_ = std::move(other.offsets_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

namespace {

// How open() refuses the file at path: "checkpoint '<path>' <what>".
struct Refusal {
  const std::string& path;
  std::invalid_argument bad(const std::string& what) const {
    return std::invalid_argument(fmt::format("checkpoint '{}' {}", path, what));
  }
  std::runtime_error io(const char* what, int err) const {
    return std::runtime_error(fmt::format("checkpoint '{}' cannot be {}: {}", path, what, std::strerror(err)));
  }
};

struct Entry {
  TensorInfo info;
  std::size_t begin = 0, end = 0;  // data_offsets, in bytes of the data region
};

// Step 1: the length field against the file and the limit, then the
// header's text and its nesting.
std::string read_header(int fd, std::size_t file_size, const Refusal& refuse) {
  if (file_size < 8)
    throw refuse.bad(fmt::format("is truncated: {} bytes, too short for the 8-byte header length", file_size));
  std::array<unsigned char, 8> length{};
  if (int err = read_all(fd, length.data(), 8, 0)) throw refuse.io("read", err);
  std::uint64_t n_header = 0;
  for (int byte = 0; byte < 8; ++byte) n_header |= std::uint64_t{length[byte]} << (8 * byte);
  if (n_header > file_size - 8) {
    // A length past the end with no JSON object after it: another kind of
    // file (a text file's first 8 bytes), not a checkpoint cut short.
    char open = '{';
    if (int err = read_all(fd, &open, 1, 8)) throw refuse.io("read", err);
    if (open != '{') {
      throw refuse.bad(fmt::format(
          "is not a safetensors file: its first 8 bytes, read as the header's length, give {} bytes, more than the "
          "file holds, and no JSON header follows them",
          n_header));
    }
    throw refuse.bad(
        fmt::format("is truncated: its header length is {} bytes, but only {} bytes follow", n_header, file_size - 8));
  }
  if (n_header > kMaxHeader)
    throw refuse.bad(fmt::format("has a header of {} bytes, over the limit of {}", n_header, kMaxHeader));
  std::string text(n_header, '\0');
  if (int err = read_all(fd, text.data(), text.size(), 8)) throw refuse.io("read", err);
  if (const std::string problem = check_nesting(text); !problem.empty()) {
    throw refuse.bad(fmt::format("has a header that {}: {}", problem, brief(text)));
  }
  return text;
}

// Step 2: the JSON, an object naming no key twice; order gets its keys in
// the header's order. The parser keeps one value per key, so the callback,
// which sees every top-level key, checks for twins.
Json parse_header(const std::string& text, std::vector<std::string>& order, const Refusal& refuse) {
  std::set<std::string> names;
  const Json::parser_callback_t no_twice = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key) {
      const std::string& name = parsed.get_ref<const std::string&>();
      if (!names.insert(name).second) throw refuse.bad(fmt::format("names '{}' twice in its header", brief(name)));
      order.push_back(name);
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, no_twice);
  } catch (const Json::parse_error& error) {
    throw refuse.bad(fmt::format("has an invalid JSON header: {}", brief(error.what())));
  }
  if (!header.is_object()) {
    throw refuse.bad(fmt::format("has a header that is not a JSON object: {}", brief(header.dump())));
  }
  return header;
}

// Step 3a: __metadata__, string keys to string values.
Metadata read_metadata(const Json& value, const Refusal& refuse) {
  if (!value.is_object()) {
    throw refuse.bad(fmt::format("has __metadata__ that is not an object: {}", brief(value.dump())));
  }
  Metadata metadata;
  for (const auto& [name, text_value] : value.items()) {
    if (!text_value.is_string()) {
      throw refuse.bad(
          fmt::format("has metadata '{}' that is not a string: {}", brief(name), brief(text_value.dump())));
    }
    metadata[name] = text_value.get<std::string>();
  }
  return metadata;
}

// Step 3b: one tensor's entry alone: its fields, F64, and a shape whose
// bytes are its data_offsets' span.
Entry read_entry(const std::string& key, const Json& value, const Refusal& refuse) {
  const auto entry_bad = [&](const std::string& what) {
    return refuse.bad(fmt::format("tensor '{}' {}", brief(key), what));
  };
  if (!value.is_object()) throw entry_bad(fmt::format("is not an object: {}", brief(value.dump())));
  for (const auto& [field, ignored] : value.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets")
      throw entry_bad(fmt::format("has an unknown field '{}'", brief(field)));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) throw entry_bad(fmt::format("lacks '{}'", field));
  }
  const Json& dtype = value["dtype"];
  if (dtype != "F64")
    throw entry_bad(
        fmt::format("has dtype {}, expected F64", brief(dtype.is_string() ? dtype.get<std::string>() : dtype.dump())));
  const Json& shape = value["shape"];
  const Json& offsets = value["data_offsets"];
  const auto unsigned_array = [](const Json& a) {
    return a.is_array() && std::all_of(a.begin(), a.end(), [](const Json& x) { return x.is_number_unsigned(); });
  };
  if (!unsigned_array(shape)) throw entry_bad(fmt::format("has an invalid shape {}", brief(shape.dump())));
  if (!unsigned_array(offsets) || offsets.size() != 2 || offsets[0] > offsets[1]) {
    throw entry_bad(fmt::format("has invalid data_offsets {}", brief(offsets.dump())));
  }
  Entry entry{.info = {.name = key, .shape = shape.get<std::vector<std::size_t>>()},
              .begin = offsets[0].get<std::size_t>(),
              .end = offsets[1].get<std::size_t>()};
  std::size_t bytes = 8;
  for (std::size_t d : entry.info.shape) {
    if (!multiply(bytes, d, bytes)) throw entry_bad(fmt::format("has a shape {} too large to address", shape.dump()));
  }
  if (bytes != entry.end - entry.begin) {
    throw entry_bad(fmt::format("has shape {} ({} bytes) but data_offsets {} ({} bytes)", shape.dump(), bytes,
                                offsets.dump(), entry.end - entry.begin));
  }
  return entry;
}

// Step 4: the entries together. Sorted by offset (empty tensors at one
// offset keep the header's order), they must run from byte 0 of the data
// to the end of the file with no overlap and no hole.
void check_tiling(std::vector<Entry>& entries, std::size_t data_bytes, const Refusal& refuse) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& x, const Entry& y) { return x.begin < y.begin; });
  std::size_t cursor = 0;
  for (const Entry& e : entries) {
    if (e.begin < cursor) {
      throw refuse.bad(
          fmt::format("has tensor '{}' at bytes [{}, {}) overlapping the tensor before it, which ends at byte {}",
                      brief(e.info.name), e.begin, e.end, cursor));
    }
    if (e.begin > cursor) {
      throw refuse.bad(fmt::format("has a hole: bytes [{}, {}) of the data, before tensor '{}', belong to no tensor",
                                   cursor, e.begin, brief(e.info.name)));
    }
    cursor = e.end;
  }
  if (cursor > data_bytes) {
    throw refuse.bad(fmt::format("is truncated: header says {} bytes of data, file has {}", cursor, data_bytes));
  }
  if (cursor < data_bytes) {
    throw refuse.bad(fmt::format("has {} bytes after its last tensor: header says {} bytes of data, file has {}",
                                 data_bytes - cursor, cursor, data_bytes));
  }
}

// Step 5: the checksum (safetensors_format.h), reading the data region once
// in blocks. Our checkpoints always carry it: one without it was edited.
void verify_checksum(const SafetensorsFile& file, const Refusal& refuse) {
  const Metadata& metadata = file.metadata();
  const auto stored = metadata.find("checksum");
  if (const auto format = metadata.find("format");
      stored == metadata.end() && format != metadata.end() && format->second.starts_with("tinyllm")) {
    throw refuse.bad(fmt::format(
        "has tinyllm metadata (format '{}') but no checksum: it was edited after it was written, and its data and "
        "metadata cannot be checked",
        brief(format->second)));
  }
  if (stored == metadata.end()) return;
  const std::string& digits = stored->second;
  if (digits.size() != kDigits || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      })) {
    throw refuse.bad(fmt::format("has a malformed checksum '{}' (expected {} hex digits)", brief(digits), kDigits));
  }
  std::vector<double> block(std::min(kBlock, file.size()));
  std::uint64_t sum = header_checksum(file.tensors(), metadata);
  for (std::size_t start = 0; start < file.size(); start += kBlock) {
    const std::span<double> part(block.data(), std::min(kBlock, file.size() - start));
    file.read(start, part);
    sum += checksum(part, start);
  }
  if (hex(sum) != digits) {
    throw refuse.bad(fmt::format("has a checksum mismatch (stored {}, computed {}): its data or metadata is corrupt",
                                 digits, hex(sum)));
  }
}

}  // namespace

// The steps above, in order; nothing is handed out before all pass.
SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const Refusal refuse{path};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw refuse.io("opened", errno);
  SafetensorsFile file(path, fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw refuse.io("examined", errno);
  if (!S_ISREG(st.st_mode)) throw refuse.bad("is not a regular file");
  const auto file_size = static_cast<std::size_t>(st.st_size);

  const std::string text = read_header(fd, file_size, refuse);
  std::vector<std::string> order;
  const Json header = parse_header(text, order, refuse);
  std::vector<Entry> entries;
  for (const std::string& key : order) {
    if (key == "__metadata__") {
      file.metadata_ = read_metadata(header[key], refuse);
    } else {
      entries.push_back(read_entry(key, header[key], refuse));
    }
  }
  check_tiling(entries, file_size - 8 - text.size(), refuse);
  file.data_start_ = 8 + text.size();
  file.size_ = entries.empty() ? 0 : entries.back().end / 8;
  for (Entry& e : entries) {
    file.index_.emplace(e.info.name, file.tensors_.size());
    file.offsets_.push_back(e.begin / 8);
    file.tensors_.push_back(std::move(e.info));
  }
  verify_checksum(file, refuse);
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::size_t SafetensorsFile::offset(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::invalid_argument(fmt::format("checkpoint '{}' has no tensor '{}'", path_, name));
  return offsets_[it->second];
}

void SafetensorsFile::read(std::size_t offset, std::span<double> out) const {
  if (offset > size_ || out.size() > size_ - offset) {
    throw std::invalid_argument(fmt::format("checkpoint '{}': values [{}, {}) lie outside the data region of {} values",
                                            path_, offset, offset + out.size(), size_));
  }
  if (int err = read_all(fd_, out.data(), 8 * out.size(), data_start_ + 8 * offset)) {
    throw std::runtime_error(fmt::format("checkpoint '{}' cannot be read: {}", path_, std::strerror(err)));
  }
}

}  // namespace tinyllm::train
