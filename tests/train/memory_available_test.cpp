// The check that a run fits in the memory this machine lets it take,
// against given limits, and the trainer refusing a model too large before
// building any of it.
#include "../../src/train/memory_available.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "support/expect_throw.h"
#include "tinyllm/train/metrics.h"
#include "tinyllm/train/trainer.h"
#include "train_testing.h"

namespace tinyllm::train {
namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

const MemoryLimit kMachine{.bytes = 8 * kGiB, .name = "MemAvailable in /proc/meminfo", .per_process = false};
const MemoryLimit kProcess{.bytes = 3 * kGiB, .name = "RLIMIT_AS", .per_process = true};

TEST(MemoryAvailableTest, ANeedWithinEveryLimitPasses) {
  EXPECT_NO_THROW(check_memory({.run = "run", .per_rank = 2 * kGiB, .ranks_per_machine = 4}, {kMachine}));
  EXPECT_NO_THROW(check_memory({.run = "run", .per_rank = 3 * kGiB}, {kMachine, kProcess}));
  EXPECT_NO_THROW(check_memory({.run = "run", .per_rank = 1000 * kGiB}, {}));  // nothing known, nothing refused
}

TEST(MemoryAvailableTest, TheMachinesMemoryCountsEveryRankOnIt) {
  EXPECT_THROW_WITH(check_memory({.run = "--layers 9", .per_rank = 2 * kGiB + 1, .ranks_per_machine = 4}, {kMachine}),
                    std::invalid_argument,
                    "--layers 9 needs up to 2.0 GiB per rank x 4 ranks on this machine, but 8.0 GiB are available "
                    "(MemAvailable in /proc/meminfo)");
}

TEST(MemoryAvailableTest, AProcessLimitCountsOnlyTheRanksInTheProcess) {
  // Forked ranks: one each, within 3 GiB; threads: all four in one.
  const MemoryNeed procs{.run = "run", .per_rank = kGiB, .ranks_per_machine = 4, .ranks_per_process = 1};
  EXPECT_NO_THROW(check_memory(procs, {kProcess}));
  MemoryNeed threads = procs;
  threads.ranks_per_process = 4;
  EXPECT_THROW_WITH(check_memory(threads, {kMachine, kProcess}), std::invalid_argument,
                    "needs up to 1.0 GiB per rank x 4 ranks in this process, but 3.0 GiB are available (RLIMIT_AS)");
}

TEST(MemoryAvailableTest, TheTightestLimitIsNamed) {
  const MemoryNeed need{.run = "run", .per_rank = 5 * kGiB};
  EXPECT_THROW_WITH(check_memory(need, {kMachine, kProcess}), std::invalid_argument, "(RLIMIT_AS)");
  EXPECT_THROW_WITH(check_memory({.run = "run", .per_rank = 10 * kGiB}, {kProcess, kMachine}), std::invalid_argument,
                    "(RLIMIT_AS)");
  EXPECT_THROW_WITH(check_memory({.run = "run", .per_rank = 2 * kGiB, .ranks_per_machine = 8}, {kProcess, kMachine}),
                    std::invalid_argument, "x 8 ranks on this machine, but 8.0 GiB are available (MemAvailable");
}

TEST(MemoryAvailableTest, SmallFiguresAreInMebibytes) {
  EXPECT_THROW_WITH(check_memory({.run = "run", .per_rank = 3 << 20}, {{.bytes = 1 << 20, .name = "limit"}}),
                    std::invalid_argument, "needs up to 3.0 MiB per rank x 1 rank on this machine, but 1.0 MiB");
}

TEST(MemoryAvailableTest, TheMessageSaysHowTheNeedSplits) {
  const MemoryNeed need{.run = "run", .per_rank = 3 << 20, .split = "model state 1.0 MiB + activations 2.0 MiB"};
  EXPECT_THROW_WITH(check_memory(need, {{.bytes = 1 << 20, .name = "limit"}}), std::invalid_argument,
                    "run needs up to 3.0 MiB per rank (model state 1.0 MiB + activations 2.0 MiB) x 1 rank on this "
                    "machine, but 1.0 MiB are available (limit)");
}

// Untouched mappings count against an address-space limit (ulimit -v) only.
TEST(MemoryAvailableTest, UntouchedMappingsCountAgainstAddressSpaceOnly) {
  const MemoryNeed need{.run = "run", .per_rank = kGiB, .unmapped = kGiB};
  const MemoryLimit resident{.bytes = kGiB + (1 << 20), .name = "MemAvailable"};
  MemoryLimit address = resident;
  address.address_space = true;
  EXPECT_NO_THROW(check_memory(need, {resident}));
  EXPECT_THROW_WITH(check_memory(need, {resident, address}), std::invalid_argument,
                    "1.0 GiB per rank, and 1.0 GiB of address space it maps but never touches x 1 rank");
}

// What is held once beside the ranks (verify's reference) counts once.
TEST(MemoryAvailableTest, WhatIsHeldOnceCountsOnce) {
  MemoryNeed need{.run = "run", .per_rank = kGiB, .ranks_per_machine = 4, .once = 2 * kGiB, .once_name = "ref"};
  EXPECT_NO_THROW(check_memory(need, {{.bytes = 6 * kGiB, .name = "limit"}}));
  EXPECT_THROW_WITH(check_memory(need, {{.bytes = 6 * kGiB - 1, .name = "limit"}}), std::invalid_argument,
                    "x 4 ranks on this machine + 2.0 GiB for ref, but");
}

// The activation count is bench/memory.sh's, which measures it against the
// peak RSS (docs/PERFORMANCE.md): that script's figures for these sizes.
TEST(MemoryAvailableTest, TheActivationCountIsTheMemoryBenchmarks) {
  nn::GPTConfig c;
  c.n_layer = 2;
  EXPECT_EQ(activation_bytes(c, 1), 4640768u);
  EXPECT_EQ(activation_bytes(c, 4), 18272256u);
  EXPECT_EQ(activation_bytes(c, 12), 62095360u);
}

// The prediction's parts: the ZeRO table's state, the in-step peak, the
// activations of a micro-batch (a window under bitwise), and a margin.
TEST(MemoryAvailableTest, ThePredictionAddsItsParts) {
  const nn::GPTConfig c;
  const RankMemory m = predict_rank_memory(2, c, 4, 0, 64, 2);  // micro-batches of 8 rows
  EXPECT_EQ(m.state, state_bytes(2, c.num_parameters(), 4, 0).total());
  EXPECT_EQ(m.state + m.in_step, peak_bytes(2, c, 4, 0, 2).total());
  EXPECT_EQ(m.activations, activation_bytes(c, 8));
  EXPECT_EQ(predict_rank_memory(2, c, 4, 0, 64, 1, false, true).activations, activation_bytes(c, 1));
  EXPECT_GT(predict_rank_memory(2, c, 4, 0, 64, 2, false, false, true).activations, m.activations);
  EXPECT_GT(m.unmapped, 0u);  // [8·64, 512] blocks of 2 MiB and up
  EXPECT_GE(m.margin, (m.state + m.in_step + m.activations) / 10);
  EXPECT_EQ(m.total(), m.state + m.in_step + m.activations + m.base + m.margin);
}

TEST(MemoryAvailableTest, ThisMachineHasSomeMemoryAvailable) {
  const std::vector<MemoryLimit> limits = available_memory();
  ASSERT_FALSE(limits.empty());
  EXPECT_EQ(limits[0].name, "MemAvailable in /proc/meminfo");
  EXPECT_GT(limits[0].bytes, 0u);
}

// Fake cgroup folders: a container's --memory, seen through either version's
// files, less what its processes hold without the page cache.
TEST(MemoryAvailableTest, AMemoryCgroupsLimitCountsLessWhatTheGroupHolds) {
  const testing::ScratchDir dir("tinyllm-cgroup");
  const auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  EXPECT_FALSE(cgroup_memory(dir / "absent"));

  write("memory.max", "4294967296\n");
  write("memory.current", "3221225472\n");
  write("memory.stat", "anon 2147483648\nfile 1073741824\nkernel 0\n");
  const std::optional<MemoryLimit> v2 = cgroup_memory(dir.path());
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->bytes, 2 * kGiB);
  EXPECT_FALSE(v2->per_process);
  EXPECT_EQ(v2->name,
            fmt::format("the memory cgroup's limit of 4.0 GiB ({}/memory.max), less the 2.0 GiB its processes "
                        "hold",
                        dir.path().string()));
  EXPECT_THROW_WITH(check_memory({.run = "run", .per_rank = kGiB, .ranks_per_machine = 3}, {kMachine, *v2}),
                    std::invalid_argument, "x 3 ranks on this machine, but 2.0 GiB are available (the memory cgroup's");
  write("memory.max", "max\n");
  EXPECT_FALSE(cgroup_memory(dir.path()));

  std::filesystem::remove(dir / "memory.max");
  write("memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  write("memory.usage_in_bytes", "1610612736\n");
  write("memory.stat", "cache 1\nrss 2\ntotal_cache 536870912\n");
  EXPECT_FALSE(cgroup_memory(dir.path()));
  write("memory.limit_in_bytes", "2147483648\n");
  const std::optional<MemoryLimit> v1 = cgroup_memory(dir.path());
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->bytes, kGiB);
}

// 100000 blocks of width 128 (2·10^10 parameters, some 600 GiB with AdamW)
// on two ranks: refused at once, before any rank builds a tensor.
TEST(MemoryAvailableTest, TheTrainerRefusesAModelLargerThanTheMachineBeforeBuildingIt) {
  for (int zero : {0, 3}) {
    TrainOptions o = testing::tiny_run(2, zero);
    o.model.n_layer = 100000;
    o.model.n_embd = 128;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW_WITH(train(o), std::invalid_argument, "+ activations ");
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

}  // namespace
}  // namespace tinyllm::train
