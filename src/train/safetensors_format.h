// The safetensors format as the writer and the reader share it (internal, not
// installed): the header's layout, with the checksum's 16 digits at a fixed
// byte, the checksum of the data region, and whole-range pread/pwrite. The
// data is never parsed as text. Reference: https://github.com/huggingface/safetensors
// (its writer pads the header with spaces to a multiple of 8, as this one does).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tinyllm/train/safetensors.h"

namespace tinyllm::train::detail {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this host would need swaps");

using Json = nlohmann::ordered_json;  // keeps the tensors in data order

// Limits that keep a reader's work and memory in proportion to a real
// header (a GPT's is about 100 bytes per tensor): the header at most 16 MiB
// (the reference reader allows 100 MB; ours need far less), JSON nested at
// most three deep (the header, a tensor's entry, its shape), and shapes of
// rank at most 8, so that no array in the header has more than 8 values.
inline constexpr std::size_t kMaxHeader = std::size_t{16} << 20;
inline constexpr std::size_t kMaxDepth = 3;
inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::size_t kBlock = std::size_t{1} << 16;  // doubles per gathered broadcast, per checksum read
// The header opens with the checksum, so its 16 digits sit at a fixed byte.
inline constexpr std::string_view kOpening = R"({"__metadata__":{"checksum":")";
inline constexpr std::size_t kChecksumAt = 8 + kOpening.size();
inline constexpr std::size_t kDigits = 16;

// The checksum: the sum mod 2^64, over the data region's 8-byte words w_i,
// of mix64(w_i ^ i·φ), mix64 being splitmix64's finalizer and φ the odd
// golden-ratio constant. A sum, so each rank hashes the words it writes and
// the partial sums add up; the position makes moved words count. values are
// the words from word `first` on.
std::uint64_t checksum(std::span<const double> values, std::size_t first);

// The header's share of the stored checksum, which is checksum() over the
// whole data region plus this, mod 2^64, so that an edited step or shape
// fails as a flipped data byte does. It is mix64 of the FNV-1a hash of one
// canonical text: the compact JSON [[name, shape] per tensor in data order,
// {key: value} of the metadata but "checksum", keys sorted]. The tensors'
// offsets follow from their order and shapes; the header's spacing and key
// order do not count.
std::uint64_t header_checksum(const std::vector<TensorInfo>& tensors, const Metadata& metadata);

std::string hex(std::uint64_t value);

// At most the first 80 characters of text, marked when cut: what an error
// message may quote of a header, a name or a value read from a file.
std::string brief(std::string_view text);  // 16 lowercase digits, as the checksum is stored

// Whole ranges, over short transfers: 0, or the errno (ENODATA at an early end).
int write_all(int fd, const void* data, std::size_t bytes, std::size_t at);
int read_all(int fd, void* data, std::size_t bytes, std::size_t at);

inline bool multiply(std::size_t a, std::size_t b, std::size_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// What a writer needs to know of its tensors: the header (8 + N bytes,
// checksum digits zero) and the data region's length n, or why not.
struct Layout {
  std::string header;
  std::size_t n = 0;
  std::string problem;
};

Layout lay_out(const std::vector<TensorInfo>& tensors, const Metadata& metadata);

}  // namespace tinyllm::train::detail
