// FNV-1a, 64 bits: how ranks compare what they hold (shapes, headers,
// parameters) by sending a hash instead of the values. Not cryptographic:
// it tells equal from accidentally different, not from forged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tinyllm::detail {

inline constexpr std::uint64_t kFnv1aBasis = 14695981039346656037ull;

inline std::uint64_t fnv1a(std::span<const std::byte> bytes, std::uint64_t h = kFnv1aBasis) {
  for (std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * 1099511628211ull;
  return h;
}

inline std::uint64_t fnv1a(std::string_view text, std::uint64_t h = kFnv1aBasis) {
  return fnv1a(std::as_bytes(std::span(text)), h);
}

}  // namespace tinyllm::detail
