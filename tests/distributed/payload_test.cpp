#include "tinyllm/distributed/payload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>

#include "tinyllm/distributed/threads_comm.h"

namespace tinyllm::dist {
namespace {

struct Fields {
  double x = 0;
  std::size_t n = 0;
  int i = 0;
  bool b = false;
  std::optional<double> maybe;
  std::uint64_t hash = 0;
  bool operator==(const Fields&) const = default;
};
using FieldsPayload = Payload<Fields, [](auto& s, auto& io) { io(s.x, s.n, s.i, s.b, s.maybe, s.hash); }>;

TEST(PayloadTest, SixtyFourBitFieldsTakeTwoDoublesTheRestOne) { EXPECT_EQ(FieldsPayload::size(), 8u); }

TEST(PayloadTest, RoundTripKeepsEveryFieldExactly) {
  // Above 2^53 a double alone would round both 64-bit fields.
  const Fields a{.x = -0.1,
                 .n = (std::size_t{1} << 53) + 1,
                 .i = -7,
                 .b = true,
                 .maybe = 2.5,
                 .hash = std::numeric_limits<std::uint64_t>::max()};
  const Fields b{.x = 3, .n = 0, .i = std::numeric_limits<int>::min(), .b = false, .maybe = std::nullopt, .hash = 1};
  const std::vector<Fields> both{a, b};
  const std::vector<double> doubles = FieldsPayload::pack(both);
  ASSERT_EQ(doubles.size(), 2 * FieldsPayload::size());
  EXPECT_TRUE(std::isnan(doubles[FieldsPayload::size() + 5])) << "an absent optional travels as NaN";
  EXPECT_EQ(FieldsPayload::unpack(doubles), both);
}

TEST(PayloadTest, ASingleValueIsItsOwnPayload) {
  const bool flags[] = {true, false, true};
  EXPECT_EQ(SinglePayload<bool>::unpack(SinglePayload<bool>::pack(flags)), (std::vector<bool>{true, false, true}));
  const std::uint64_t word = std::numeric_limits<std::uint64_t>::max() - 1;
  EXPECT_EQ(SinglePayload<std::uint64_t>::unpack(SinglePayload<std::uint64_t>::pack(word)),
            std::vector<std::uint64_t>{word});
}

TEST(PayloadTest, AllGatherAndBroadcastCarryEachRanksStruct) {
  std::mutex mutex;
  std::vector<std::vector<Fields>> gathered(3);
  std::vector<Fields> broadcast(3);
  run_threads(3, [&](Comm& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    Fields mine;
    mine.n = std::numeric_limits<std::size_t>::max() - r;
    mine.i = comm.rank();
    mine.b = r == 1;
    mine.hash = r;
    std::vector<Fields> all = FieldsPayload::all_gather(comm, mine);
    Fields from_two = FieldsPayload::broadcast(comm, mine, 2);
    const std::lock_guard lock(mutex);
    gathered[r] = std::move(all);
    broadcast[r] = from_two;
  });
  for (std::size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(gathered[r].size(), 3u);
    for (std::size_t q = 0; q < 3; ++q) {
      EXPECT_EQ(gathered[r][q].n, std::numeric_limits<std::size_t>::max() - q);
      EXPECT_EQ(gathered[r][q].i, static_cast<int>(q));
      EXPECT_EQ(gathered[r][q].b, q == 1);
      EXPECT_EQ(gathered[r][q].hash, q);
    }
    EXPECT_EQ(broadcast[r].i, 2) << "rank " << r;
    EXPECT_EQ(broadcast[r].n, std::numeric_limits<std::size_t>::max() - 2);
  }
}

}  // namespace
}  // namespace tinyllm::dist
