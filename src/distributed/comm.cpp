// The backend-independent half of every collective: check this rank's
// arguments, exchange headers, check that all ranks agree, short-circuit
// p == 1, count the traffic. The same checks run on every rank over the same
// p headers, so when one rank is wrong every rank throws, and none hangs.
#include "tinyllm/distributed/comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/errors.h"

namespace tinyllm::dist {
namespace {

constexpr std::uint64_t kBytes = sizeof(double);

bool whole(const CollectiveHeader& h) { return h.begin == 0 && h.length == h.n; }

// "10 values", or "the window at 2 of length 5 of 10 values" (begin + length
// is not printed: a bad window may overflow it).
std::string values(const CollectiveHeader& h) {
  if (whole(h)) return fmt::format("{} values", h.n);
  return fmt::format("the window at {} of length {} of {} values", h.begin, h.length, h.n);
}

std::string describe(const CollectiveHeader& h) {
  const char* reduce = h.reduce == ReduceOp::Mean ? "mean" : "sum";
  const char* part = whole(h) ? "chunk" : "part";
  switch (h.op) {
    case Collective::Broadcast:
      return fmt::format("broadcast #{} of {} values from root {}", h.seq, h.n, h.root);
    case Collective::AllReduce:
      return fmt::format("all_reduce #{} ({}) of {} values", h.seq, reduce, h.n);
    case Collective::ReduceScatter:
      return fmt::format("reduce_scatter #{} ({}) of {} into a {} of {}", h.seq, reduce, values(h), part, h.local);
    case Collective::AllGather:
      return fmt::format("all_gather #{} of {} from a {} of {}", h.seq, values(h), part, h.local);
    case Collective::Barrier:
      return fmt::format("barrier #{}", h.seq);
  }
  return fmt::format("unknown collective {} #{}", static_cast<std::uint32_t>(h.op), h.seq);
}

bool agree(const CollectiveHeader& x, const CollectiveHeader& y) {
  return x.op == y.op && x.seq == y.seq && x.n == y.n && x.begin == y.begin && x.length == y.length &&
         x.reduce == y.reduce && x.root == y.root;
}

// What is wrong with rank q's own arguments, judged by its header alone;
// empty when nothing is.
std::string argument_problem(const CollectiveHeader& h, int p, int q) {
  if (h.op == Collective::Broadcast && (h.root < 0 || h.root >= p)) {
    return fmt::format("broadcast: root must be in [0, {}) (got {})", p, h.root);
  }
  if (h.op == Collective::ReduceScatter || h.op == Collective::AllGather) {
    const char* name = collective_name(h.op);
    if (h.begin > h.n || h.length > h.n - h.begin) {
      return fmt::format("{}: rank {}'s window at {} of length {} must lie inside the {} values", name, q, h.begin,
                         h.length, h.n);
    }
    if (h.buffer != h.length) {
      const char* buffer = h.op == Collective::ReduceScatter ? "input" : "output";
      return fmt::format("{}: rank {}'s {} for {} must hold {} values (got {})", name, q, buffer, values(h), h.length,
                         h.buffer);
    }
    auto [first, last] = window_part({h.n, h.begin, h.length}, p, q);
    if (h.local != last - first) {
      if (whole(h)) {
        return fmt::format("{}: rank {}'s chunk of {} values must hold {} values (got {})", name, q, h.n, last - first,
                           h.local);
      }
      return fmt::format("{}: rank {}'s part [{}, {}) of {} must hold {} values (got {})", name, q, first, last,
                         values(h), last - first, h.local);
    }
  }
  return {};
}

// Throws on every rank when any header is wrong: invalid_argument for this
// rank's own arguments, CommError when another rank is to blame.
void verify(std::span<const CollectiveHeader> all, int r, const std::string& who) {
  const int p = static_cast<int>(all.size());
  if (auto problem = argument_problem(all[r], p, r); !problem.empty()) {
    throw std::invalid_argument(who + ": " + problem);
  }
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    if (!agree(all[q], all[r])) {
      throw CommError(fmt::format("{}: collective mismatch: this rank called {}, rank {} called {}", who,
                                  describe(all[r]), q, describe(all[q])));
    }
    if (auto problem = argument_problem(all[q], p, q); !problem.empty()) {
      throw CommError(fmt::format("{}: {} failed on rank {}: {}", who, describe(all[r]), q, problem));
    }
  }
}

}  // namespace

const char* collective_name(Collective op) {
  switch (op) {
    case Collective::Broadcast:
      return "broadcast";
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::AllGather:
      return "all_gather";
    case Collective::Barrier:
      return "barrier";
  }
  return "unknown collective";
}

void check_options(const CommOptions& options, const std::string& who) {
  if (options.timeout.count() < 1 || options.timeout > kMaxTimeout) {
    throw std::invalid_argument(fmt::format("{}: timeout must be in [1, {}] ms (got {} ms)", who, kMaxTimeout.count(),
                                            options.timeout.count()));
  }
}

std::chrono::milliseconds timeout_from_seconds(double seconds, std::string_view name) {
  constexpr double kMinSeconds = 0.001;
  constexpr double kMaxSeconds = static_cast<double>(kMaxTimeout.count()) / 1000;
  if (!(seconds >= kMinSeconds && seconds <= kMaxSeconds)) {
    throw std::invalid_argument(fmt::format("{} must be a number of seconds from {} to {:g} (got {})", name,
                                            kMinSeconds, kMaxSeconds, seconds));
  }
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

Traffic& Traffic::operator+=(const Traffic& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  return *this;
}

Traffic Comm::total_traffic() const {
  Traffic total;
  for (const Traffic& t : traffic_) total += t;
  return total;
}

std::string Comm::who() const { return fmt::format("rank {}/{}", rank(), size()); }

template <class Transfer>
void Comm::run(const CollectiveHeader& mine, Transfer&& transfer) {
  if (!failure_.empty()) {
    throw CommError(fmt::format("{}: {} refused: an earlier collective failed ({})", who(), describe(mine), failure_));
  }
  headers_.resize(static_cast<std::size_t>(size()));
  std::span<CollectiveHeader> all = headers_;
  try {
    exchange_headers(mine, all);
  } catch (const std::exception& error) {
    failure_ = error.what();
    throw;
  }
  // Every rank saw the same headers, so a verification error leaves the
  // group in step: every rank throws it, and the next collective is fine.
  verify(all, rank(), who());
  try {
    if (size() > 1) transfer();
  } catch (const std::exception& error) {
    failure_ = error.what();
    throw;
  }
  count(mine);
}

Comm::Layout Comm::lay_out(const Window& w) {
  layout_.resize(static_cast<std::size_t>(size()));
  for (int q = 0; q < size(); ++q) {
    auto [first, last] = window_part(w, size(), q);
    layout_[q] = {first - w.begin, last - w.begin};
  }
  return layout_;
}

// The formulas hold for any window, and add up: windows that tile [0, n)
// count exactly what one collective over all n values counts.
void Comm::count(const CollectiveHeader& h) {
  const std::uint64_t p = static_cast<std::uint64_t>(size());
  auto [first, last] = window_part({h.n, h.begin, h.length}, size(), rank());
  const std::uint64_t own = last - first;
  Traffic t{.calls = 1};
  switch (h.op) {
    case Collective::Broadcast:
      if (h.root == rank()) {
        t.bytes_sent = (p - 1) * h.n * kBytes;
      } else {
        t.bytes_received = h.n * kBytes;
      }
      break;
    case Collective::ReduceScatter:  // the others' parts of my part come in, my parts of theirs go out
      t.bytes_sent = (h.length - own) * kBytes;
      t.bytes_received = (p - 1) * own * kBytes;
      break;
    case Collective::AllGather:
      t.bytes_sent = (p - 1) * own * kBytes;
      t.bytes_received = (h.length - own) * kBytes;
      break;
    case Collective::AllReduce:
      t.bytes_sent = t.bytes_received = ((h.length - own) + (p - 1) * own) * kBytes;
      break;
    case Collective::Barrier:
      break;
  }
  traffic_[static_cast<int>(h.op)] += t;
}

void Comm::broadcast(std::span<double> buf, int root) {
  CollectiveHeader h{.op = Collective::Broadcast, .seq = seq_++, .n = buf.size(), .length = buf.size(), .root = root};
  run(h, [&] { transport_broadcast(buf, root); });
}

void Comm::all_reduce(std::span<double> buf, ReduceOp op) {
  CollectiveHeader h{.op = Collective::AllReduce, .reduce = op, .seq = seq_++, .n = buf.size(), .length = buf.size()};
  run(h, [&] { transport_all_reduce(buf, op, lay_out({buf.size(), 0, buf.size()})); });
}

void Comm::reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op) {
  reduce_scatter(in, out, op, {in.size(), 0, in.size()});
}

void Comm::all_gather(std::span<const double> chunk, std::span<double> out) {
  all_gather(chunk, out, {out.size(), 0, out.size()});
}

void Comm::reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op, const Window& w) {
  CollectiveHeader h{.op = Collective::ReduceScatter,
                     .reduce = op,
                     .seq = seq_++,
                     .n = w.n,
                     .begin = w.begin,
                     .length = w.length,
                     .local = out.size(),
                     .buffer = in.size()};
  run(h, [&] { transport_reduce_scatter(in, out, op, lay_out(w)); });
  if (size() == 1) std::copy(in.begin(), in.end(), out.begin());
}

void Comm::all_gather(std::span<const double> part, std::span<double> out, const Window& w) {
  CollectiveHeader h{.op = Collective::AllGather,
                     .seq = seq_++,
                     .n = w.n,
                     .begin = w.begin,
                     .length = w.length,
                     .local = part.size(),
                     .buffer = out.size()};
  run(h, [&] { transport_all_gather(part, out, lay_out(w)); });
  if (size() == 1) std::copy(part.begin(), part.end(), out.begin());
}

void Comm::barrier() {
  CollectiveHeader h{.op = Collective::Barrier, .seq = seq_++};
  run(h, [] {});
}

}  // namespace tinyllm::dist
