// The safetensors format's shared pieces (see safetensors_format.h): the
// checksum, whole-range pread/pwrite, and the header a writer lays out for
// its tensors, padded so that the data starts 8-byte aligned.
#include "safetensors_format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "../support/fnv1a.h"

namespace tinyllm::train::detail {
namespace {

std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t checksum(std::span<const double> values, std::size_t first) {
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < values.size(); ++k) {
    sum += mix64(std::bit_cast<std::uint64_t>(values[k]) ^ ((first + k) * 0x9e3779b97f4a7c15ull));
  }
  return sum;
}

std::uint64_t header_checksum(const std::vector<TensorInfo>& tensors, const Metadata& metadata) {
  nlohmann::json table = nlohmann::json::array(), meta = nlohmann::json::object();  // a sorted map
  for (const TensorInfo& t : tensors) table.push_back({t.name, t.shape});
  for (const auto& [key, value] : metadata) {
    if (key != "checksum") meta[key] = value;
  }
  // Invalid UTF-8 (possible only in a writer's arguments, which lay_out
  // refuses) is replaced rather than thrown on here.
  const std::string text =
      nlohmann::json::array({table, meta}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return mix64(tinyllm::detail::fnv1a(text));
}

std::string hex(std::uint64_t value) { return fmt::format("{:016x}", value); }

std::string brief(std::string_view text) {
  constexpr std::size_t kQuoted = 80;
  return text.size() <= kQuoted ? std::string(text)
                                : fmt::format("{}... ({} bytes)", text.substr(0, kQuoted), text.size());
}

int write_all(int fd, const void* data, std::size_t bytes, std::size_t at) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::pwrite(fd, p, bytes, static_cast<off_t>(at));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return errno;
    p += done, at += static_cast<std::size_t>(done), bytes -= static_cast<std::size_t>(done);
  }
  return 0;
}

int read_all(int fd, void* data, std::size_t bytes, std::size_t at) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::pread(fd, p, bytes, static_cast<off_t>(at));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return errno;
    if (done == 0) return ENODATA;
    p += done, at += static_cast<std::size_t>(done), bytes -= static_cast<std::size_t>(done);
  }
  return 0;
}

Layout lay_out(const std::vector<TensorInfo>& tensors, const Metadata& metadata) {
  Layout out;
  if (metadata.contains("checksum")) {
    out.problem = "metadata key 'checksum' is reserved for the writer's checksum";
    return out;
  }
  Json meta = Json::object();
  meta["checksum"] = std::string(kDigits, '0');
  for (const auto& [key, value] : metadata) meta[key] = value;
  Json header = Json::object();
  header["__metadata__"] = std::move(meta);
  for (const TensorInfo& t : tensors) {
    std::size_t numel = 1, bytes = 0;
    for (std::size_t d : t.shape) {
      if (!multiply(numel, d, numel)) numel = SIZE_MAX;
    }
    if (t.shape.size() > kMaxRank) {
      out.problem =
          fmt::format("tensor '{}' has rank {}, above the limit of {}", brief(t.name), t.shape.size(), kMaxRank);
      return out;
    }
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name)) {
      out.problem = fmt::format("tensor name '{}' must be non-empty, not __metadata__ and unique", t.name);
      return out;
    }
    if (!multiply(numel, 8, bytes) || out.n * 8 + bytes < bytes || out.n * 8 + bytes > SIZE_MAX / 2) {
      out.problem = fmt::format("tensor '{}' has too many elements: shape [{}]", t.name, fmt::join(t.shape, ", "));
      return out;
    }
    header[t.name] = {
        {"dtype", "F64"}, {"shape", t.shape}, {"data_offsets", Json::array({out.n * 8, out.n * 8 + bytes})}};
    out.n += numel;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& error) {
    out.problem = fmt::format("tensor names and metadata must be valid UTF-8 ({})", error.what());
    return out;
  }
  if (text.size() > kMaxHeader) {
    out.problem = fmt::format("the header of {} bytes exceeds the limit of {}", text.size(), kMaxHeader);
    return out;
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + N, hence the data, 8-byte aligned
  out.header.resize(8);
  for (int byte = 0; byte < 8; ++byte) out.header[byte] = static_cast<char>((text.size() >> (8 * byte)) & 0xff);
  out.header += text;
  return out;
}

}  // namespace tinyllm::train::detail
