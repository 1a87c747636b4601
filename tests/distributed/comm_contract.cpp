#include "comm_contract.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

#include "support/expect_throw.h"
#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/errors.h"
#include "tinyllm/distributed/procs_comm.h"
#include "tinyllm/distributed/threads_comm.h"

namespace tinyllm::testing {
namespace {

using dist::chunk_bounds;
using dist::Collective;
using dist::Comm;
using dist::CommError;
using dist::ReduceOp;
using dist::Window;
using dist::window_part;

std::function<void(int, const RankBody&, dist::CommOptions)>& mpi_runner() {
  static std::function<void(int, const RankBody&, dist::CommOptions)> runner;
  return runner;
}

// A forked rank's EXPECT failures stay in the child; it raises a flag in
// memory shared with the parent, which turns it into a failure here.
void run_procs_reporting(int world, const RankBody& body, dist::CommOptions options) {
  const std::size_t bytes = sizeof(int) * static_cast<std::size_t>(world);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  int* failed = static_cast<int*>(memory);
  auto report = [&] {
    for (int r = 0; r < world; ++r) {
      if (failed[r]) ADD_FAILURE() << "rank " << r << " failed an expectation (its output is above)";
    }
    munmap(memory, bytes);
  };
  try {
    dist::run_procs(
        world,
        [&](Comm& comm) {
          body(comm);
          if (::testing::Test::HasFailure()) failed[comm.rank()] = 1;
        },
        options);
  } catch (...) {
    report();
    throw;
  }
  report();
}

// Exactly representable values (multiples of 1/8 below 2^13), so sums are
// exact in any order and every backend must match the formula bit for bit.
double dyadic(int r, std::size_t i) {
  return static_cast<double>((r * 7919 + 3 * static_cast<int>(i % 4099)) % 8191) / 8;
}
// Values whose sum rounds, to see the order of summation.
double real(int r, std::size_t i) { return std::sin(1.0 + r * 0.7 + static_cast<double>(i) * 0.013) * (r + 1); }

std::vector<double> fill(int r, std::size_t n, double (*value)(int, std::size_t)) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
  return v;
}

// One process's sum over ranks, in rank order.
double sum_over_ranks(int p, std::size_t i, double (*value)(int, std::size_t)) {
  double sum = 0;
  for (int q = 0; q < p; ++q) sum += value(q, i);
  return sum;
}

// Whether every rank holds the same bytes in v: all-gather a 64-bit
// fingerprint split into two exactly representable halves.
bool identical_on_every_rank(Comm& comm, const std::vector<double>& v) {
  std::uint64_t hash = 1469598103934665603ull;
  for (double x : v) {
    hash ^= std::bit_cast<std::uint64_t>(x);
    hash *= 1099511628211ull;
  }
  const double mine[2] = {static_cast<double>(hash >> 32), static_cast<double>(hash & 0xffffffffu)};
  std::vector<double> all(2 * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine, all);
  for (int q = 0; q < comm.size(); ++q) {
    if (all[2 * q] != mine[0] || all[2 * q + 1] != mine[1]) return false;
  }
  return true;
}

// The rank whose chunk_bounds chunk holds index i.
int owner(std::size_t n, int p, std::size_t i) {
  int q = 0;
  while (chunk_bounds(n, p, q).second <= i) ++q;
  return q;
}

// The windows each case tries: at the start, at the end, inside a middle
// rank's chunk, across several chunks, and empty.
std::vector<Window> some_windows(std::size_t n, int p) {
  auto [a, b] = chunk_bounds(n, p, p / 2);
  return {{n, 0, (n + 1) / 2},
          {n, n - (n + 2) / 3, (n + 2) / 3},
          {n, a + (b - a) / 4, (b - a + 1) / 2},
          {n, n / 5, n - 2 * (n / 5)},
          {n, n / 2, 0}};
}

// Uneven windows tiling [0, n): an empty one, then lengths 1, 3, 9, 27, …
// and whatever is left, so some lie inside a chunk and some span many.
std::vector<Window> tiling(std::size_t n) {
  std::vector<Window> windows{{n, 0, 0}};
  std::size_t begin = 0;
  for (std::size_t step = 1; begin < n; step *= 3) {
    const std::size_t length = std::min(step, n - begin);
    windows.push_back({n, begin, length});
    begin += length;
  }
  return windows;
}

std::string name(const Window& w) { return fmt::format("window [{}, {}) of {}", w.begin, w.begin + w.length, w.n); }

// Rank r's values of the window: value(r, i) for i in [begin, begin + length).
std::vector<double> fill_window(int r, const Window& w, double (*value)(int, std::size_t)) {
  std::vector<double> v(w.length);
  for (std::size_t j = 0; j < w.length; ++j) v[j] = value(r, w.begin + j);
  return v;
}

// Where [first, last) of the full vector's indices sits in a buffer that
// starts at index `start`; empty parts lie anywhere, so they get no pointer.
std::span<double> at(std::vector<double>& buffer, std::size_t start, std::size_t first, std::size_t last) {
  if (last == first) return {};
  return std::span(buffer).subspan(first - start, last - first);
}

std::vector<std::uint64_t> bits(const std::vector<double>& v) {
  std::vector<std::uint64_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<std::uint64_t>(v[i]);
  return b;
}

void expect_near_relative(double actual, double expected, double tolerance, std::size_t i) {
  EXPECT_NEAR(actual, expected, tolerance * std::max(1.0, std::abs(expected))) << "at index " << i;
}

}  // namespace

void run_ranks(Backend backend, int world, const RankBody& body, dist::CommOptions options) {
  switch (backend) {
    case Backend::Threads:
      dist::run_threads(world, body, options);
      return;
    case Backend::ThreadsStaged:
      options.single_copy = false;
      dist::run_threads(world, body, options);
      return;
    case Backend::Procs:
      run_procs_reporting(world, body, options);
      return;
    case Backend::ProcsStaged:
      options.single_copy = false;
      run_procs_reporting(world, body, options);
      return;
    case Backend::Mpi:
      ASSERT_TRUE(mpi_runner()) << "the MPI test program did not set a runner";
      mpi_runner()(world, body, options);
      return;
  }
}

void set_mpi_runner(std::function<void(int, const RankBody&, dist::CommOptions)> runner) {
  mpi_runner() = std::move(runner);
}

std::vector<ContractCase> contract_cases(Backend backend, std::vector<int> worlds) {
  std::vector<ContractCase> cases;
  for (int world : worlds) {
    for (std::size_t n : {0, 1, 3, 5, 1000, 300001}) cases.push_back({backend, world, n});
  }
  return cases;
}

std::string contract_case_name(const ::testing::TestParamInfo<ContractCase>& info) {
  static const char* const kNames[] = {"Threads", "ThreadsStaged", "Procs", "ProcsStaged", "Mpi"};
  return fmt::format("{}P{}N{}", kNames[static_cast<int>(info.param.backend)], info.param.world, info.param.n);
}

TEST_P(CommContract, BroadcastGivesEveryRankTheRootsValues) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    for (int root : {0, p - 1}) {
      std::vector<double> buf = fill(comm.rank(), n, dyadic);
      comm.broadcast(buf, root);
      EXPECT_EQ(buf, fill(root, n, dyadic)) << "root " << root;
    }
  });
}

TEST_P(CommContract, AllReduceSumEqualsTheOneProcessSumExactly) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    std::vector<double> buf = fill(comm.rank(), n, dyadic);
    comm.all_reduce(buf, ReduceOp::Sum);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], sum_over_ranks(p, i, dyadic)) << "at index " << i;
  });
}

TEST_P(CommContract, AllReduceMeanDividesTheSumByP) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    std::vector<double> buf = fill(comm.rank(), n, dyadic);
    comm.all_reduce(buf, ReduceOp::Mean);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], sum_over_ranks(p, i, dyadic) / p) << "at index " << i;
  });
}

TEST_P(CommContract, AllReduceOfRoundedSumsLeavesIdenticalBitsOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    std::vector<double> buf = fill(comm.rank(), n, real);
    comm.all_reduce(buf, ReduceOp::Mean);
    for (std::size_t i = 0; i < n; ++i) expect_near_relative(buf[i], sum_over_ranks(p, i, real) / p, 1e-14, i);
    EXPECT_TRUE(identical_on_every_rank(comm, buf));
  });
}

TEST_P(CommContract, ReduceScatterLeavesThisRanksChunkOfTheReduction) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    const std::vector<double> in = fill(comm.rank(), n, dyadic);
    auto [a, b] = chunk_bounds(n, p, comm.rank());
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
      std::vector<double> out(b - a, -1.0);
      comm.reduce_scatter(in, out, op);
      for (std::size_t i = a; i < b; ++i) {
        const double sum = sum_over_ranks(p, i, dyadic);
        ASSERT_EQ(out[i - a], op == ReduceOp::Mean ? sum / p : sum) << "at index " << i;
      }
    }
  });
}

TEST_P(CommContract, AllGatherLaysOutTheChunksByChunkBounds) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    auto [a, b] = chunk_bounds(n, p, comm.rank());
    std::vector<double> chunk(b - a);
    for (std::size_t i = a; i < b; ++i) chunk[i - a] = dyadic(comm.rank(), i);
    std::vector<double> out(n, -1.0);
    comm.all_gather(chunk, out);
    for (int q = 0; q < p; ++q) {
      auto [qa, qb] = chunk_bounds(n, p, q);
      for (std::size_t i = qa; i < qb; ++i) ASSERT_EQ(out[i], dyadic(q, i)) << "at index " << i;
    }
  });
}

TEST_P(CommContract, ReduceScatterOverAWindowLeavesThisRanksPartOfTheReduction) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    for (const Window& w : some_windows(n, p)) {
      const std::vector<double> in = fill_window(comm.rank(), w, dyadic);
      auto [first, last] = window_part(w, p, comm.rank());
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
        std::vector<double> out(last - first, -1.0);
        comm.reduce_scatter(in, out, op, w);
        for (std::size_t i = first; i < last; ++i) {
          const double sum = sum_over_ranks(p, i, dyadic);
          ASSERT_EQ(out[i - first], op == ReduceOp::Mean ? sum / p : sum) << name(w) << " at index " << i;
        }
      }
    }
  });
}

// Once from a separate part, once from the part already at its place in out.
TEST_P(CommContract, AllGatherOverAWindowLaysOutEveryRanksPart) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    const int r = comm.rank();
    for (const Window& w : some_windows(n, p)) {
      auto [first, last] = window_part(w, p, r);
      std::vector<double> part(last - first), out(w.length, -1.0);
      for (std::size_t i = first; i < last; ++i) part[i - first] = dyadic(r, i);
      comm.all_gather(part, out, w);
      std::vector<double> in_place(w.length, -1.0);
      std::copy(part.begin(), part.end(), in_place.begin() + static_cast<std::ptrdiff_t>(first - w.begin));
      comm.all_gather(at(in_place, w.begin, first, last), in_place, w);
      for (std::size_t i = w.begin; i < w.begin + w.length; ++i) {
        ASSERT_EQ(out[i - w.begin], dyadic(owner(n, p, i), i)) << name(w) << " at index " << i;
        ASSERT_EQ(in_place[i - w.begin], dyadic(owner(n, p, i), i)) << name(w) << " in place, at index " << i;
      }
    }
  });
}

// Bucketed ZeRO relies on this: reducing or gathering window by window is
// the whole collective, to the bit (rounded sums, so order shows) and to
// the byte of traffic.
TEST_P(CommContract, WindowsTilingTheVectorEqualTheWholeCollectiveBitForBit) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    const int r = comm.rank();
    auto [a, b] = chunk_bounds(n, p, r);
    const std::vector<double> in = fill(r, n, real);
    std::vector<double> chunk(in.begin() + static_cast<std::ptrdiff_t>(a), in.begin() + static_cast<std::ptrdiff_t>(b));
    std::vector<double> reduced(b - a), gathered(n);
    comm.reduce_scatter(in, reduced, ReduceOp::Mean);
    comm.all_gather(chunk, gathered);
    const dist::Traffic whole[] = {comm.traffic(Collective::ReduceScatter), comm.traffic(Collective::AllGather)};
    comm.reset_traffic();

    std::vector<double> reduced_by_window(b - a, -1.0), gathered_by_window(n, -1.0);
    std::copy(chunk.begin(), chunk.end(), gathered_by_window.begin() + static_cast<std::ptrdiff_t>(a));
    for (const Window& w : tiling(n)) {
      auto [first, last] = window_part(w, p, r);
      comm.reduce_scatter(std::span(in).subspan(w.begin, w.length), at(reduced_by_window, a, first, last),
                          ReduceOp::Mean, w);
      comm.all_gather(at(gathered_by_window, 0, first, last), std::span(gathered_by_window).subspan(w.begin, w.length),
                      w);
    }
    EXPECT_EQ(bits(reduced_by_window), bits(reduced));
    EXPECT_EQ(bits(gathered_by_window), bits(gathered));
    const Collective ops[] = {Collective::ReduceScatter, Collective::AllGather};
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(comm.traffic(ops[k]).calls, tiling(n).size()) << dist::collective_name(ops[k]);
      EXPECT_EQ(comm.traffic(ops[k]).bytes_sent, whole[k].bytes_sent) << dist::collective_name(ops[k]);
      EXPECT_EQ(comm.traffic(ops[k]).bytes_received, whole[k].bytes_received) << dist::collective_name(ops[k]);
    }
  });
}

// Traffic follows the algorithm: what one rank sends another receives, so
// the totals over ranks balance, and an all_reduce moves 2n(p-1)/p values
// each way per rank when p divides n.
TEST_P(CommContract, TrafficBalancesAcrossRanksAndMatchesTheTheory) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    std::vector<double> buf(n, 1.0);
    auto [a, b] = chunk_bounds(n, p, comm.rank());
    std::vector<double> chunk(b - a);
    comm.broadcast(buf, p - 1);
    comm.all_reduce(buf, ReduceOp::Sum);
    comm.reduce_scatter(buf, chunk, ReduceOp::Sum);
    comm.all_gather(chunk, buf);
    std::vector<double> sent, received;
    for (Collective op :
         {Collective::Broadcast, Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather}) {
      EXPECT_EQ(comm.traffic(op).calls, 1u) << dist::collective_name(op);
      sent.push_back(static_cast<double>(comm.traffic(op).bytes_sent));
      received.push_back(static_cast<double>(comm.traffic(op).bytes_received));
    }
    const std::uint64_t all_reduce_bytes = comm.traffic(Collective::AllReduce).bytes_sent;
    comm.all_reduce(sent, ReduceOp::Sum);
    comm.all_reduce(received, ReduceOp::Sum);
    EXPECT_EQ(sent, received);
    EXPECT_EQ(sent[0], 8.0 * n * (p - 1)) << "broadcast: the root sends n values to each of p - 1 ranks";
    if (n % p == 0) {
      EXPECT_EQ(all_reduce_bytes, 2 * 8 * n * (p - 1) / p);
    }
    comm.reset_traffic();
    EXPECT_EQ(comm.total_traffic().calls, 0u);
  });
}

TEST_P(CommContract, DisagreeingLengthsAreNamedOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  if (p == 1) return;  // one rank cannot disagree with itself
  run_ranks(backend, p, [&](Comm& comm) {
    const bool odd_one = comm.rank() == p - 1;
    std::vector<double> buf(odd_one ? n + 1 : n, 1.0);
    const std::string fragment = odd_one ? "rank 0 called all_reduce #0 (sum) of " + std::to_string(n) + " values"
                                         : "rank " + std::to_string(p - 1) + " called all_reduce #0 (sum) of " +
                                               std::to_string(n + 1) + " values";
    EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Sum), CommError, fragment);
    // Every rank saw the same headers and threw, so the group is still in step.
    std::vector<double> again(n, 1.0);
    comm.all_reduce(again, ReduceOp::Sum);
    EXPECT_EQ(again, std::vector<double>(n, p));
  });
}

TEST_P(CommContract, ADifferentCollectiveIsNamedOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  if (p == 1) return;
  run_ranks(backend, p, [&](Comm& comm) {
    std::vector<double> buf(n, 1.0);
    if (comm.rank() == 1) {
      EXPECT_THROW_WITH(comm.broadcast(buf, 0), CommError, "rank 0 called all_reduce #0");
    } else {
      EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Mean), CommError,
                        "rank 1 called broadcast #0 of " + std::to_string(n) + " values from root 0");
    }
    comm.barrier();
  });
}

TEST_P(CommWorld, ARootOutOfRangeIsRefusedOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    std::vector<double> buf(4, 1.0);
    const std::string rule = "root must be in [0, " + std::to_string(p) + ") (got " + std::to_string(p) + ")";
    EXPECT_THROW_WITH(comm.broadcast(buf, p), std::invalid_argument, rule);
    if (p == 1) return;
    // Only the last rank is wrong: it hears about its own argument, the
    // others learn which rank was wrong and why.
    if (comm.rank() == p - 1) {
      EXPECT_THROW_WITH(comm.broadcast(buf, -1), std::invalid_argument, "(got -1)");
    } else {
      EXPECT_THROW_WITH(comm.broadcast(buf, 0), CommError, "rank " + std::to_string(p - 1) + " called broadcast");
    }
  });
}

TEST_P(CommWorld, AChunkOfTheWrongLengthIsRefusedOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    const std::size_t total = 10;
    auto [a, b] = chunk_bounds(total, p, comm.rank());
    const bool wrong = comm.rank() == 0;
    std::vector<double> chunk(b - a + (wrong ? 1 : 0)), out(total);
    const std::string rule = "rank 0's chunk of 10 values must hold " + std::to_string(b - a) + " values (got " +
                             std::to_string(b - a + 1) + ")";
    if (wrong) {
      EXPECT_THROW_WITH(comm.all_gather(chunk, out), std::invalid_argument, rule);
      EXPECT_THROW_WITH(comm.reduce_scatter(out, chunk, ReduceOp::Sum), std::invalid_argument, rule);
    } else {
      EXPECT_THROW_WITH(comm.all_gather(chunk, out), CommError, "failed on rank 0");
      EXPECT_THROW_WITH(comm.reduce_scatter(out, chunk, ReduceOp::Sum), CommError, "failed on rank 0");
    }
  });
}

TEST_P(CommWorld, AWindowBeyondTheVectorIsRefusedOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    std::vector<double> in(3), out(3);
    // SIZE_MAX: begin + length wraps around to 4, inside the vector, were it computed.
    for (const Window& w : {Window{10, 8, 3}, Window{10, 11, 0}, Window{10, 5, SIZE_MAX}}) {
      const std::string rule = fmt::format("rank {}'s window at {} of length {} must lie inside the 10 values",
                                           comm.rank(), w.begin, w.length);
      EXPECT_THROW_WITH(comm.reduce_scatter(in, out, ReduceOp::Sum, w), std::invalid_argument,
                        "reduce_scatter: " + rule);
      EXPECT_THROW_WITH(comm.all_gather(in, out, w), std::invalid_argument, "all_gather: " + rule);
    }
    comm.barrier();
  });
}

// The window [2, 7) of 10 values; rank 0 passes one value too many.
TEST_P(CommWorld, APartOrBufferOfTheWrongLengthIsRefusedOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    const Window w{10, 2, 5};
    auto [first, last] = window_part(w, p, comm.rank());
    const bool wrong = comm.rank() == 0;
    std::vector<double> part(last - first + (wrong ? 1 : 0)), buffer(5), long_buffer(wrong ? 6 : 5);
    std::vector<double> right_part(last - first);
    const std::string of = "the window at 2 of length 5 of 10 values";
    auto [first0, last0] = window_part(w, p, 0);
    const std::string part_rule = fmt::format("rank 0's part [{}, {}) of {} must hold {} values (got {})", first0,
                                              last0, of, last0 - first0, last0 - first0 + 1);
    const std::string input_rule = "rank 0's input for " + of + " must hold 5 values (got 6)";
    const std::string output_rule = "rank 0's output for " + of + " must hold 5 values (got 6)";
    // Rank 0 hears about its own argument, the others learn whose it was and why.
    auto expect_refused = [&](auto&& call, const std::string& op, const std::string& rule) {
      if (wrong) {
        EXPECT_THROW_WITH(call(), std::invalid_argument, op + ": " + rule);
      } else {
        EXPECT_THROW_WITH(call(), CommError, "failed on rank 0: " + op + ": " + rule);
      }
    };
    expect_refused([&] { comm.reduce_scatter(buffer, part, ReduceOp::Sum, w); }, "reduce_scatter", part_rule);
    expect_refused([&] { comm.all_gather(part, buffer, w); }, "all_gather", part_rule);
    expect_refused([&] { comm.reduce_scatter(long_buffer, right_part, ReduceOp::Sum, w); }, "reduce_scatter",
                   input_rule);
    expect_refused([&] { comm.all_gather(right_part, long_buffer, w); }, "all_gather", output_rule);
    comm.barrier();
  });
}

// The last rank's window differs in begin, then length, then n; each rank
// names the other's window.
TEST_P(CommWorld, RanksDisagreeingOnTheWindowAreNamedOnEveryRank) {
  const auto [backend, p, n] = GetParam();
  if (p == 1) return;  // one rank cannot disagree with itself
  run_ranks(backend, p, [&](Comm& comm) {
    const bool odd_one = comm.rank() == p - 1;
    const Window agreed{10, 2, 5};
    const Window odd[] = {{10, 3, 5}, {10, 2, 4}, {11, 2, 5}};
    for (int k = 0; k < 3; ++k) {
      const Window mine = odd_one ? odd[k] : agreed, theirs = odd_one ? agreed : odd[k];
      auto [first, last] = window_part(mine, p, comm.rank());
      std::vector<double> buffer(mine.length), part(last - first);
      const int other = odd_one ? 0 : p - 1;
      const std::string op = k == 1 ? "all_gather #1" : fmt::format("reduce_scatter #{} (sum)", k);
      const std::string fragment = fmt::format("rank {} called {} of the window at {} of length {} of {} values", other,
                                               op, theirs.begin, theirs.length, theirs.n);
      if (k == 1) {
        EXPECT_THROW_WITH(comm.all_gather(part, buffer, mine), CommError, fragment);
      } else {
        EXPECT_THROW_WITH(comm.reduce_scatter(buffer, part, ReduceOp::Sum, mine), CommError, fragment);
      }
    }
    comm.barrier();
  });
}

// Hundreds of collectives back to back, every kind and a new size each
// time, each checked: rounds, halves and headers never get out of step.
TEST_P(CommWorld, HundredsOfCollectivesInARowStayCorrect) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    const int r = comm.rank();
    for (int k = 0; k < 300; ++k) {
      const std::size_t m = static_cast<std::size_t>(k * 7919 % 2000);
      std::vector<double> buf = fill(r, m, dyadic);
      auto [a, b] = chunk_bounds(m, p, r);
      std::vector<double> chunk(b - a);
      switch (k % 4) {
        case 0:
          comm.broadcast(buf, k % p);
          ASSERT_EQ(buf, fill(k % p, m, dyadic)) << "collective " << k;
          break;
        case 1:
          comm.all_reduce(buf, ReduceOp::Sum);
          for (std::size_t i = 0; i < m; ++i) ASSERT_EQ(buf[i], sum_over_ranks(p, i, dyadic)) << "collective " << k;
          break;
        case 2:
          comm.reduce_scatter(buf, chunk, ReduceOp::Sum);
          for (std::size_t i = a; i < b; ++i)
            ASSERT_EQ(chunk[i - a], sum_over_ranks(p, i, dyadic)) << "collective " << k;
          break;
        case 3:
          for (std::size_t i = a; i < b; ++i) chunk[i - a] = dyadic(r, i);
          comm.all_gather(chunk, buf);
          for (std::size_t i = 0; i < m; ++i) ASSERT_EQ(buf[i], dyadic(owner(m, p, i), i)) << "collective " << k;
          break;
      }
    }
  });
}

// 16M doubles (128 MiB a rank): many rounds of the slot, and sums whose
// exact value is a formula.
TEST_P(CommWorld, SixteenMillionDoublesAllReduce) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    const std::size_t m = std::size_t{1} << 24;
    std::vector<double> buf(m);
    for (std::size_t i = 0; i < m; ++i) buf[i] = comm.rank() + static_cast<double>(i % 1024);
    comm.all_reduce(buf, ReduceOp::Sum);
    const double ranks = p * (p - 1) / 2.0;
    for (std::size_t i = 0; i < m; ++i) ASSERT_EQ(buf[i], ranks + p * static_cast<double>(i % 1024)) << "at " << i;
  });
}

// No rank leaves the barrier before the last one arrived. steady_clock is
// the system's monotonic clock, so times compare across processes too.
TEST_P(CommWorld, BarrierWaitsForTheLastRank) {
  const auto [backend, p, n] = GetParam();
  run_ranks(backend, p, [&](Comm& comm) {
    auto now_us = [] {
      return static_cast<double>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
              .count());
    };
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * comm.rank()));
    const double arrived = now_us();
    comm.barrier();
    const double left = now_us();
    std::vector<double> arrivals(static_cast<std::size_t>(p));
    comm.all_gather(std::span<const double>(&arrived, 1), arrivals);
    EXPECT_GE(left, *std::max_element(arrivals.begin(), arrivals.end()));
  });
}

}  // namespace tinyllm::testing
