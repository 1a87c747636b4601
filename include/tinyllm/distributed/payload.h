// Small structs as they travel through collectives, which carry doubles:
// Payload<T, Fields> packs a T into doubles and back, field by field in the
// order Fields names them, so that a new field is one more name there:
//
//   using StatsPayload = Payload<Stats, [](auto& s, auto& io) { io(s.rank, s.loss, s.hash); }>;
//
// A double is exact for integers up to 2^53 only, so a 64-bit integer (a
// size, a hash, a checksum) travels as its two 32-bit halves, exact for
// every value; bool and the integers up to 32 bits take one double, a
// std::optional<double> one too (NaN for none).
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist {

template <class T, auto Fields>
class Payload {
 public:
  // The doubles one T takes.
  static std::size_t size() {
    std::size_t n = 0;
    auto count = [&n]<class... F>(const F&...) { n += (width<F>() + ...); };
    const T t{};
    Fields(t, count);
    return n;
  }

  // The values' doubles, end to end.
  static std::vector<double> pack(std::span<const T> values) {
    std::vector<double> out;
    auto put_all = [&out](const auto&... f) { (put(f, out), ...); };
    for (const T& t : values) Fields(t, put_all);
    return out;
  }
  // Exactly a T: an array of bools would convert to a bool.
  static std::vector<double> pack(const std::same_as<T> auto& value) { return pack(std::span(&value, 1)); }
  // The Ts whose doubles in holds, end to end.
  static std::vector<T> unpack(std::span<const double> in) {
    std::vector<T> out;
    auto get_all = [&in](auto&... f) { (get(f, in), ...); };
    for (std::size_t k = in.size() / size(); k > 0; --k) {
      T t{};
      Fields(t, get_all);
      out.push_back(t);
    }
    return out;
  }

  // Every rank's values (the same count on each), rank by rank.
  static std::vector<T> all_gather(Comm& comm, std::span<const T> mine) {
    const std::vector<double> part = pack(mine);
    std::vector<double> all(part.size() * static_cast<std::size_t>(comm.size()));
    comm.all_gather(part, all);
    return unpack(all);
  }
  static std::vector<T> all_gather(Comm& comm, const std::same_as<T> auto& mine) {
    return all_gather(comm, std::span(&mine, 1));
  }
  // root's value, on every rank.
  static T broadcast(Comm& comm, const T& value, int root) {
    std::vector<double> buf = pack(value);
    comm.broadcast(buf, root);
    return unpack(buf)[0];
  }

 private:
  template <class F>
  static constexpr bool kHalves = std::is_integral_v<F> && sizeof(F) > 4;

  template <class F>
  static constexpr std::size_t width() {
    static_assert(std::is_arithmetic_v<F> || std::is_same_v<F, std::optional<double>>, "a field the payload knows");
    return kHalves<F> ? 2 : 1;
  }

  template <class F>
  static void put(const F& f, std::vector<double>& out) {
    if constexpr (std::is_same_v<F, std::optional<double>>) {
      out.push_back(f.value_or(std::numeric_limits<double>::quiet_NaN()));
    } else if constexpr (kHalves<F>) {
      const auto word = static_cast<std::uint64_t>(f);
      out.insert(out.end(), {static_cast<double>(word >> 32), static_cast<double>(word & 0xffffffffu)});
    } else {
      out.push_back(static_cast<double>(f));
    }
  }
  // Takes f's doubles off the front of in.
  template <class F>
  static void get(F& f, std::span<const double>& in) {
    if constexpr (std::is_same_v<F, std::optional<double>>) {
      f = std::isnan(in[0]) ? std::nullopt : std::optional(in[0]);
    } else if constexpr (kHalves<F>) {
      f = static_cast<F>(static_cast<std::uint64_t>(in[0]) << 32 | static_cast<std::uint64_t>(in[1]));
    } else {
      f = static_cast<F>(in[0]);
    }
    in = in.subspan(width<F>());
  }
};

// One value as a payload (a flag, a hash).
struct Itself {
  void operator()(auto& value, auto& io) const { io(value); }
};
template <class T>
using SinglePayload = Payload<T, Itself{}>;

}  // namespace tinyllm::dist
