// Comm: one rank's handle on a group of p ranks, with the collectives the
// DDP and ZeRO of docs/ZERO.md need. Every call is collective: all ranks make the same
// calls in the same order with agreeing sizes. This class owns what every
// backend shares (argument checks, the header that names a disagreeing rank,
// the p == 1 case, traffic counts); a backend only moves the bytes.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tinyllm/distributed/chunk.h"

namespace tinyllm::dist {

enum class ReduceOp : std::uint32_t { Sum, Mean };

enum class Collective : std::uint32_t { Broadcast, AllReduce, ReduceScatter, AllGather, Barrier };
inline constexpr int kNumCollectives = 5;

// "all_reduce", as the methods are spelled.
const char* collective_name(Collective op);

struct CommOptions {
  // Longest wait for a peer before a collective fails with CommError, in
  // [1 ms, kMaxTimeout]. `tinyllm train --timeout` sets it (300 s there).
  std::chrono::milliseconds timeout{60'000};
  // Shared-memory backends: let large broadcasts and all-gathers copy once,
  // straight from the owner's buffer (process_vm_readv between processes),
  // where the system allows it. Off: every byte is staged through shared
  // memory, as on systems that forbid it. Same results either way.
  bool single_copy = true;
};

// The most ranks run_threads and run_procs start: their shared-memory
// collectives give each rank two values of every slot. (mpirun's worlds
// have no such bound.)
inline constexpr int kMaxSharedMemoryWorld = 65536;

// The longest timeout a backend accepts: a deadline of now + timeout must
// fit steady_clock's nanoseconds (about 292 years), and 10^9 s (31 years)
// leaves room for any uptime.
inline constexpr std::chrono::milliseconds kMaxTimeout{std::chrono::seconds(1'000'000'000)};

// Throws std::invalid_argument "<who>: timeout must be in [1, 1000000000000]
// ms (got 0 ms)" for a timeout out of range. Every backend calls it first.
void check_options(const CommOptions& options, const std::string& who);

// A timeout given in seconds (`--timeout`, Python's `timeout=`) as
// CommOptions takes it: from 0.001 to kMaxTimeout's 10^9 s, rounded to the
// nearest millisecond. std::invalid_argument "<name> must be a number of
// seconds from 0.001 to 1e+09 (got <seconds>)" otherwise, NaN included,
// checked before the cast that an infinity would make undefined.
std::chrono::milliseconds timeout_from_seconds(double seconds, std::string_view name);

// Bytes counted at the level of the algorithm, the same on every backend:
// `sent` is this rank's data that other ranks receive, `received` is other
// ranks' data that lands here. An all_reduce of n doubles on p ranks sends
// and receives about 2·8n·(p−1)/p bytes (reduce-scatter, then all-gather).
struct Traffic {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  Traffic& operator+=(const Traffic& other);
};

// What each rank announces before a collective's data moves. The ranks
// compare all p headers, so a rank that calls another collective, another
// size or another root is named instead of corrupting memory or hanging.
struct CollectiveHeader {
  Collective op = Collective::Barrier;
  ReduceOp reduce = ReduceOp::Sum;
  std::uint64_t seq = 0;     // this rank's collective count so far
  std::uint64_t n = 0;       // the full vector's length
  std::uint64_t begin = 0;   // the window [begin, begin + length) of the n values that moves;
  std::uint64_t length = 0;  // all of them but in a windowed reduce_scatter or all_gather
  std::uint64_t local = 0;   // this rank's part of the window (reduce_scatter's out, all_gather's part)
  std::uint64_t buffer = 0;  // the window's whole buffer here (reduce_scatter's in, all_gather's out)
  std::int64_t root = 0;     // broadcast only
};

class Comm {
 public:
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether threads other than the one that made this Comm may call it, one
  // at a time (MPI_THREAD_SERIALIZED), as the communication thread of
  // BucketOptions::overlap does.
  virtual bool callable_from_other_threads() const { return true; }

  // Every rank's buf becomes root's buf.
  void broadcast(std::span<double> buf, int root);
  // Every rank's buf becomes the sum (or mean) over ranks, the same bits on
  // every rank: each chunk is reduced once, in rank order, then copied.
  void all_reduce(std::span<double> buf, ReduceOp op);
  // out (this rank's chunk_bounds chunk of in's length) becomes that chunk
  // of the sum (or mean) of every rank's in. The window {n, 0, n}.
  void reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op);
  // out (length n) becomes every rank's chunk laid out by chunk_bounds(n, p, ·). The window {n, 0, n}.
  void all_gather(std::span<const double> chunk, std::span<double> out);
  // The same over a window of the chunk_bounds(w.n, p, ·) layout, such as a
  // ZeRO bucket or unit: rank q's part is window_part(w, p, q), maybe empty.
  // in holds the window's values of every rank (length w.length); out (this rank's part, length
  // last - first of window_part) becomes that part of the sum (or mean) over ranks.
  void reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op, const Window& w);
  // part is this rank's part of the window; out (length w.length) becomes every rank's part in place.
  void all_gather(std::span<const double> part, std::span<double> out, const Window& w);
  void barrier();

  const Traffic& traffic(Collective op) const { return traffic_[static_cast<int>(op)]; }
  Traffic total_traffic() const;
  void reset_traffic() { traffic_ = {}; }

  // "rank 2/4", the prefix of every message this rank's errors carry.
  std::string who() const;

 protected:
  Comm() = default;

  // Where the ranks' parts of a collective's buffer lie: layout[q] is rank
  // q's part [first, last), relative to the buffer's start (the window's
  // begin). The p parts tile the buffer in rank order; any may be empty, and
  // their lengths may differ by more than one.
  using Layout = std::span<const std::pair<std::size_t, std::size_t>>;

  // The transport. exchange_headers fills all[q] with rank q's header (or
  // throws CommError naming the rank it could not hear from); the data
  // calls run only after every header agreed, with p >= 2. The reductions
  // and the all-gather move the parts `layout` names, never recomputing
  // chunk_bounds, so a window and the whole vector take one path.
  virtual void exchange_headers(const CollectiveHeader& mine, std::span<CollectiveHeader> all) = 0;
  virtual void transport_broadcast(std::span<double> buf, int root) = 0;
  virtual void transport_all_reduce(std::span<double> buf, ReduceOp op, Layout layout) = 0;
  virtual void transport_reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op,
                                        Layout layout) = 0;
  virtual void transport_all_gather(std::span<const double> part, std::span<double> out, Layout layout) = 0;

 private:
  template <class Transfer>
  void run(const CollectiveHeader& mine, Transfer&& transfer);
  void count(const CollectiveHeader& header);
  // Every rank's part of w, relative to w.begin, in layout_.
  Layout lay_out(const Window& w);

  std::uint64_t seq_ = 0;
  std::vector<CollectiveHeader> headers_;  // every rank's, for the collective in progress
  std::string failure_;                    // set once a collective failed: the group is out of step for good
  std::array<Traffic, kNumCollectives> traffic_{};
  std::vector<std::pair<std::size_t, std::size_t>> layout_;  // the collective in progress's
};

}  // namespace tinyllm::dist
