// MpiComm under `mpirun -n P`: each collective against a formula in rank and
// index (rank r's value i is 1000·r + i, so every sum is an exact integer),
// identical bits on every rank, vectors split into pieces, traffic counts,
// and the faults: a rank that calls another collective, length or root, or
// skips a collective. Checks across ranks use raw MPI, not the code under test.
#include "tinyllm/distributed/mpi_comm.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "support/expect_throw.h"
#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/errors.h"

namespace tinyllm::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Ample for 8 ranks on 2 cores; a rank out of step fails the test instead of hanging it.
const CommOptions kOptions{.timeout = std::chrono::seconds(30)};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

double value(int r, std::size_t i, double scale = 1) { return scale * (1000.0 * r + static_cast<double>(i)); }

std::vector<double> filled(std::size_t n, int r, double scale = 1) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i, scale);
  return v;
}

// Σ_r value(r, i) = scale·(1000·p(p−1)/2 + p·i), exact in doubles.
double sum(int p, std::size_t i, double scale = 1) {
  return scale * (500.0 * p * (p - 1) + static_cast<double>(p) * static_cast<double>(i));
}

// Every rank's bytes of v (the same length everywhere) equal this rank's.
void expect_same_bits_on_every_rank(std::span<const double> v) {
  if (v.empty()) return;  // on every rank alike: the lengths agree
  const int p = world_size(), bytes = static_cast<int>(v.size_bytes());
  std::vector<char> all(static_cast<std::size_t>(p) * v.size_bytes());
  MPI_Allgather(v.data(), bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, MPI_COMM_WORLD);
  for (int q = 0; q < p; ++q) {
    EXPECT_EQ(std::memcmp(all.data() + static_cast<std::size_t>(q) * v.size_bytes(), v.data(), v.size_bytes()), 0)
        << "rank " << q << "'s bits differ from rank " << world_rank() << "'s";
  }
}

// The collectives over n values, each with MpiComm's default pieces (one
// per vector) and with pieces of 3 values.
struct Case {
  std::size_t n;
  std::size_t max_count;
};

void PrintTo(const Case& c, std::ostream* os) { *os << "n = " << c.n << ", max_count = " << c.max_count; }

class MpiCommTest : public testing::TestWithParam<Case> {
 protected:
  MpiComm comm{MPI_COMM_WORLD, kOptions, GetParam().max_count};
  const std::size_t n = GetParam().n;
  const int p = comm.size(), r = comm.rank();
};

TEST_P(MpiCommTest, BroadcastCopiesTheRootsBuffer) {
  for (int root = 0; root < p; ++root) {
    std::vector<double> buf = filled(n, r);
    comm.broadcast(buf, root);
    EXPECT_EQ(buf, filled(n, root)) << "root " << root;
  }
}

TEST_P(MpiCommTest, AllReduceSumsAndAveragesOverRanks) {
  std::vector<double> sums = filled(n, r), means = filled(n, r);
  comm.all_reduce(sums, ReduceOp::Sum);
  comm.all_reduce(means, ReduceOp::Mean);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sums[i], sum(p, i)) << "i = " << i;
    ASSERT_EQ(means[i], sum(p, i) / p) << "i = " << i;
  }
}

TEST_P(MpiCommTest, ReduceScatterLeavesThisRanksChunkOfTheSum) {
  auto [a, b] = chunk_bounds(n, p, r);
  const std::vector<double> in = filled(n, r);
  std::vector<double> sums(b - a), means(b - a);
  comm.reduce_scatter(in, sums, ReduceOp::Sum);
  comm.reduce_scatter(in, means, ReduceOp::Mean);
  for (std::size_t j = 0; j < b - a; ++j) {
    ASSERT_EQ(sums[j], sum(p, a + j)) << "i = " << a + j;
    ASSERT_EQ(means[j], sum(p, a + j) / p) << "i = " << a + j;
  }
}

TEST_P(MpiCommTest, ReduceScatterIntoItsOwnInput) {
  auto [a, b] = chunk_bounds(n, p, r);
  std::vector<double> buf = filled(n, r);
  comm.reduce_scatter(buf, std::span(buf).subspan(a, b - a), ReduceOp::Sum);
  for (std::size_t i = a; i < b; ++i) ASSERT_EQ(buf[i], sum(p, i)) << "i = " << i;
}

// Rank q's chunk holds 1000·q + i at global index i, so out must be
// filled(n, owner of i) chunk by chunk.
TEST_P(MpiCommTest, AllGatherLaysChunksOutByChunkBounds) {
  auto [a, b] = chunk_bounds(n, p, r);
  const std::vector<double> mine = filled(n, r);
  std::vector<double> out(n, -1.0);
  comm.all_gather(std::span(mine).subspan(a, b - a), out);
  for (int q = 0; q < p; ++q) {
    auto [qa, qb] = chunk_bounds(n, p, q);
    for (std::size_t i = qa; i < qb; ++i) ASSERT_EQ(out[i], value(q, i)) << "i = " << i;
  }
}

TEST_P(MpiCommTest, AllGatherInPlace) {
  auto [a, b] = chunk_bounds(n, p, r);
  std::vector<double> buf(n, std::numeric_limits<double>::quiet_NaN());
  for (std::size_t i = a; i < b; ++i) buf[i] = value(r, i);
  comm.all_gather(std::span(buf).subspan(a, b - a), buf);
  for (int q = 0; q < p; ++q) {
    auto [qa, qb] = chunk_bounds(n, p, q);
    for (std::size_t i = qa; i < qb; ++i) ASSERT_EQ(buf[i], value(q, i)) << "i = " << i;
  }
}

// The chunk sits at the front of out (in place only on rank 0): MPI may
// not read it from where it writes, so MpiComm must copy it first.
TEST_P(MpiCommTest, AllGatherFromAChunkOverlappingOut) {
  auto [a, b] = chunk_bounds(n, p, r);
  std::vector<double> buf(n, -1.0);
  for (std::size_t j = 0; j < b - a; ++j) buf[j] = value(r, a + j);
  comm.all_gather(std::span(buf).subspan(0, b - a), buf);
  for (int q = 0; q < p; ++q) {
    auto [qa, qb] = chunk_bounds(n, p, q);
    for (std::size_t i = qa; i < qb; ++i) ASSERT_EQ(buf[i], value(q, i)) << "i = " << i;
  }
}

// Values that round differently in every order of summation: the bits
// agree only if each value is reduced once and then copied.
TEST_P(MpiCommTest, AllReduceLeavesIdenticalBitsOnEveryRank) {
  std::vector<double> sums(n), means(n);
  for (std::size_t i = 0; i < n; ++i) sums[i] = means[i] = std::sin(7919.0 * r + i) / (r + 3);
  comm.all_reduce(sums, ReduceOp::Sum);
  comm.all_reduce(means, ReduceOp::Mean);
  expect_same_bits_on_every_rank(sums);
  expect_same_bits_on_every_rank(means);
}

// Each chunk is summed in rank order, ((x_0 + x_1) + x_2) + ..., then
// divided by p, as the threads and procs backends do, so every backend
// leaves the same bits. The sin fills round differently in any other order;
// the expected values come from every rank's fill, summed here in one process.
TEST_P(MpiCommTest, ReducesInRankOrderLikeTheOtherBackends) {
  auto fill = [](int q, std::size_t i) { return std::sin(7919.0 * q + static_cast<double>(i)) / (q + 3); };
  auto [a, b] = chunk_bounds(n, p, r);
  std::vector<double> sums(n), means(n), chunk(b - a);
  for (std::size_t i = 0; i < n; ++i) sums[i] = means[i] = fill(r, i);
  comm.reduce_scatter(means, chunk, ReduceOp::Mean);
  comm.all_reduce(sums, ReduceOp::Sum);
  comm.all_reduce(means, ReduceOp::Mean);
  for (std::size_t i = 0; i < n; ++i) {
    double expected = fill(0, i);
    for (int q = 1; q < p; ++q) expected += fill(q, i);
    ASSERT_EQ(sums[i], expected) << "i = " << i;
    ASSERT_EQ(means[i], expected / p) << "i = " << i;
    if (a <= i && i < b) {
      ASSERT_EQ(chunk[i - a], expected / p) << "i = " << i;
    }
  }
}

// A window across several chunks, reduced into its own input and gathered
// in place, so with pieces of 3 values each piece's counts and
// displacements come from the parts of the window, not the chunks.
TEST_P(MpiCommTest, WindowIsReducedAndGatheredInPlacePieceByPiece) {
  const Window w{n, n / 5, n - 2 * (n / 5)};
  auto [first, last] = window_part(w, p, r);
  std::vector<double> buf(w.length);
  for (std::size_t j = 0; j < w.length; ++j) buf[j] = value(r, w.begin + j);
  const std::span<double> part = std::span(buf).subspan(first - w.begin, last - first);
  comm.reduce_scatter(buf, part, ReduceOp::Sum, w);
  for (std::size_t i = first; i < last; ++i) ASSERT_EQ(buf[i - w.begin], sum(p, i)) << "i = " << i;
  comm.all_gather(part, buf, w);
  for (std::size_t i = w.begin; i < w.begin + w.length; ++i) ASSERT_EQ(buf[i - w.begin], sum(p, i)) << "i = " << i;
}

INSTANTIATE_TEST_SUITE_P(Lengths, MpiCommTest,
                         testing::Values(Case{0, MpiComm::kMaxCount}, Case{1, MpiComm::kMaxCount},
                                         Case{3, MpiComm::kMaxCount}, Case{5, MpiComm::kMaxCount},
                                         Case{1000, MpiComm::kMaxCount}, Case{5, 3}, Case{1000, 3}),
                         [](const testing::TestParamInfo<Case>& info) {
                           // fmt, not "N" + std::to_string: GCC 12 warns falsely (-Wrestrict) on the latter.
                           if (info.param.max_count == MpiComm::kMaxCount) return fmt::format("N{}", info.param.n);
                           return fmt::format("N{}Pieces{}", info.param.n, info.param.max_count);
                         });

// Varying sizes and collectives, so a stale header or a leftover piece of
// one collective would corrupt the next.
TEST(MpiCommSequenceTest, ThreeHundredCollectivesInARow) {
  MpiComm comm(MPI_COMM_WORLD, kOptions);
  const int p = comm.size(), r = comm.rank();
  for (int k = 0; k < 300; ++k) {
    const std::size_t n = static_cast<std::size_t>(k * 37 % 1001);
    const double scale = k + 1;
    auto [a, b] = chunk_bounds(n, p, r);
    std::vector<double> buf = filled(n, r, scale), chunk(b - a);
    switch (k % 4) {
      case 0:
        comm.all_reduce(buf, ReduceOp::Sum);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], sum(p, i, scale)) << "call " << k << ", i = " << i;
        break;
      case 1:
        comm.reduce_scatter(buf, chunk, ReduceOp::Sum);
        for (std::size_t j = 0; j < b - a; ++j) ASSERT_EQ(chunk[j], sum(p, a + j, scale)) << "call " << k;
        break;
      case 2:
        comm.all_gather(std::span(buf).subspan(a, b - a), buf);
        for (int q = 0; q < p; ++q) {
          auto [qa, qb] = chunk_bounds(n, p, q);
          for (std::size_t i = qa; i < qb; ++i) ASSERT_EQ(buf[i], value(q, i, scale)) << "call " << k;
        }
        break;
      case 3:
        comm.broadcast(buf, k % p);
        ASSERT_EQ(buf, filled(n, k % p, scale)) << "call " << k;
        break;
    }
  }
}

// 16M doubles: 128 MiB per rank. The sums are exact integers, so equal
// values on every rank are equal bits too.
TEST(MpiCommSequenceTest, AllReducesSixteenMillionValues) {
  MpiComm comm(MPI_COMM_WORLD, kOptions);
  const int p = comm.size(), r = comm.rank();
  const std::size_t n = std::size_t{16} << 20;
  std::vector<double> buf = filled(n, r);
  const auto start = Clock::now();
  comm.all_reduce(buf, ReduceOp::Sum);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], sum(p, i)) << "i = " << i;
  if (r == 0) std::printf("all_reduce of %zu doubles on %d ranks: %.3f s\n", n, p, seconds);
}

// The counts of comm.cpp's count(), with own = this rank's chunk of n.
TEST(MpiCommSequenceTest, TrafficMatchesTheFormulas) {
  MpiComm comm(MPI_COMM_WORLD, kOptions);
  const std::uint64_t p = static_cast<std::uint64_t>(comm.size()), n = 10;
  auto [a, b] = chunk_bounds(n, comm.size(), comm.rank());
  const std::uint64_t own = b - a;
  std::vector<double> buf(n), chunk(own);
  comm.broadcast(buf, 0);
  comm.all_reduce(buf, ReduceOp::Sum);
  comm.all_reduce(buf, ReduceOp::Mean);
  comm.reduce_scatter(buf, chunk, ReduceOp::Sum);
  comm.all_gather(chunk, buf);
  comm.barrier();

  const Traffic& bcast = comm.traffic(Collective::Broadcast);
  EXPECT_EQ(bcast.calls, 1u);
  EXPECT_EQ(bcast.bytes_sent, comm.rank() == 0 ? (p - 1) * n * 8 : 0);
  EXPECT_EQ(bcast.bytes_received, comm.rank() == 0 ? 0 : n * 8);
  const Traffic& reduce = comm.traffic(Collective::AllReduce);
  EXPECT_EQ(reduce.calls, 2u);
  EXPECT_EQ(reduce.bytes_sent, 2 * ((n - own) + (p - 1) * own) * 8);
  EXPECT_EQ(reduce.bytes_received, 2 * ((n - own) + (p - 1) * own) * 8);
  const Traffic& scatter = comm.traffic(Collective::ReduceScatter);
  EXPECT_EQ(scatter.calls, 1u);
  EXPECT_EQ(scatter.bytes_sent, (n - own) * 8);
  EXPECT_EQ(scatter.bytes_received, (p - 1) * own * 8);
  const Traffic& gather = comm.traffic(Collective::AllGather);
  EXPECT_EQ(gather.calls, 1u);
  EXPECT_EQ(gather.bytes_sent, (p - 1) * own * 8);
  EXPECT_EQ(gather.bytes_received, (n - own) * 8);
  EXPECT_EQ(comm.traffic(Collective::Barrier).calls, 1u);
  EXPECT_EQ(comm.total_traffic().calls, 6u);
}

// Rank 0 arrives 300 ms late; nobody may leave the barrier before it.
// The duplicated communicator: a receive for any message on the caller's
// communicator must not see MpiComm's headers.
TEST(MpiCommSequenceTest, KeepsItsMessagesOffTheCallersCommunicator) {
  MpiComm comm(MPI_COMM_WORLD, kOptions);
  double stray = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Irecv(&stray, 1, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &request);
  std::vector<double> buf = filled(10, comm.rank());
  comm.all_reduce(buf, ReduceOp::Sum);
  comm.barrier();
  int received = 0;
  MPI_Test(&request, &received, MPI_STATUS_IGNORE);
  EXPECT_FALSE(received);
  if (!received) {
    MPI_Cancel(&request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
}

TEST(MpiCommSetupTest, RejectsBadArguments) {
  EXPECT_THROW_WITH(MpiComm(MPI_COMM_NULL), std::invalid_argument, "MpiComm: communicator must not be MPI_COMM_NULL");
  EXPECT_THROW_WITH(MpiComm(MPI_COMM_WORLD, kOptions, 0), std::invalid_argument,
                    "MpiComm: max_count must be in [1, 2147483647] (got 0)");
  EXPECT_THROW_WITH(MpiComm(MPI_COMM_WORLD, {.timeout = milliseconds(0)}), std::invalid_argument,
                    "MpiComm: timeout must be in [1, 1000000000000] ms (got 0 ms)");
  EXPECT_THROW_WITH(MpiComm(MPI_COMM_WORLD, {.timeout = kMaxTimeout + milliseconds(1)}), std::invalid_argument,
                    "MpiComm: timeout must be in [1, 1000000000000] ms (got 1000000000001 ms)");
}

TEST(MpiCommSetupTest, KnowsItWasLaunchedByMpirun) { EXPECT_TRUE(launched_by_mpirun()); }

TEST(MpiCommSetupTest, SessionLeavesAnInitialisedMpiAlone) {
  {
    MpiSession nested;
    EXPECT_FALSE(nested.owns());
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_FALSE(finalized);
}

// The faults. The last rank misbehaves; every rank must throw, and the
// group must be left in step (the next collective works) or, after a
// timeout, the comm must refuse further calls. Each test has its own comm.
class MpiCommFaultTest : public testing::Test {
 protected:
  void SetUp() override {
    if (p < 2) GTEST_SKIP() << "a fault needs two ranks";
  }
  // A collective everyone makes after the fault: the group is still in step.
  void expect_in_step() {
    std::vector<double> buf = filled(5, r);
    comm.all_reduce(buf, ReduceOp::Sum);
    EXPECT_EQ(buf[4], sum(p, 4));
  }

  MpiComm comm{MPI_COMM_WORLD, kOptions};
  const int p = comm.size(), r = comm.rank(), last = p - 1;
};

TEST_F(MpiCommFaultTest, AnotherCollectiveThrowsOnEveryRankNamingBoth) {
  std::vector<double> buf(5, 1.0);
  if (r == last) {
    EXPECT_THROW_WITH(comm.broadcast(buf, 0), CommError,
                      fmt::format("rank {}/{}: collective mismatch: this rank called broadcast #0 of 5 values from "
                                  "root 0, rank 0 called all_reduce #0 (sum) of 5 values",
                                  r, p));
  } else {
    EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Sum), CommError,
                      fmt::format("rank {}/{}: collective mismatch: this rank called all_reduce #0 (sum) of 5 values, "
                                  "rank {} called broadcast #0 of 5 values from root 0",
                                  r, p, last));
  }
  expect_in_step();
}

TEST_F(MpiCommFaultTest, AnotherLengthThrowsOnEveryRank) {
  std::vector<double> buf(r == last ? 6 : 5, 1.0);
  const std::string fragment = r == last ? "rank 0 called all_reduce #0 (sum) of 5 values"
                                         : fmt::format("rank {} called all_reduce #0 (sum) of 6 values", last);
  EXPECT_THROW_WITH(comm.all_reduce(buf, ReduceOp::Sum), CommError, fragment);
  expect_in_step();
}

TEST_F(MpiCommFaultTest, RootOutOfRangeOnEveryRankIsInvalidArgument) {
  std::vector<double> buf(5, 1.0);
  EXPECT_THROW_WITH(comm.broadcast(buf, p), std::invalid_argument,
                    fmt::format("rank {}/{}: broadcast: root must be in [0, {}) (got {})", r, p, p, p));
  EXPECT_THROW_WITH(comm.broadcast(buf, -1), std::invalid_argument, "(got -1)");
  expect_in_step();
}

TEST_F(MpiCommFaultTest, RootOutOfRangeOnOneRankIsCommErrorOnTheOthers) {
  std::vector<double> buf(5, 1.0);
  if (r == last) {
    EXPECT_THROW_WITH(comm.broadcast(buf, p), std::invalid_argument, "root must be in");
  } else {
    EXPECT_THROW_WITH(comm.broadcast(buf, 0), CommError,
                      fmt::format("rank {} called broadcast #0 of 5 values from root {}", last, p));
  }
  expect_in_step();
}

// The last rank skips all_reduce #1; the others must name it within the
// timeout (and well before twice it), then refuse to go on.
TEST_F(MpiCommFaultTest, SkippedCollectiveTimesOutNamingTheRank) {
  MpiComm short_comm(MPI_COMM_WORLD, {.timeout = milliseconds(2000)});
  std::vector<double> buf = filled(5, r);
  short_comm.all_reduce(buf, ReduceOp::Sum);
  if (r != last) {
    const auto start = Clock::now();
    EXPECT_THROW_WITH(short_comm.all_reduce(buf, ReduceOp::Sum), CommError,
                      fmt::format("rank {}/{}: all_reduce #1 timed out after 2000 ms waiting for rank {}", r, p, last));
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, milliseconds(2000));
    EXPECT_LT(waited, milliseconds(4000));
    EXPECT_THROW_WITH(short_comm.barrier(), CommError, "barrier #2 refused: an earlier collective failed");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace tinyllm::dist
