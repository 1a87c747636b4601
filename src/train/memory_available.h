// The memory this machine lets a run take, and the check, before any model
// is built, that the run's predicted peak fits in it: a run too large fails
// at once with the figures rather than being killed by the kernel, or
// running out of memory minutes in.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tinyllm::train {

// One bound on the memory a run may take.
struct MemoryLimit {
  std::size_t bytes = 0;  // what is left of it now
  std::string name;       // "MemAvailable in /proc/meminfo"
  // An rlimit bounds each process: only the ranks that share one count
  // against it. MemAvailable is the machine's, shared by all its ranks.
  bool per_process = false;
  // An rlimit bounds address space, so untouched mappings count too.
  bool address_space = false;
};

// MemAvailable from /proc/meminfo, the memory cgroup's limit (a container's
// --memory, which MemAvailable does not see) less what the group holds, and
// RLIMIT_AS and RLIMIT_DATA less what this process already maps: those that
// are known and set.
std::vector<MemoryLimit> available_memory();

// The memory cgroup's limit less its usage without the page cache (which
// the kernel reclaims before it kills), read under cgroup_root (the
// /sys/fs/cgroup of cgroup v2, or its memory/ folder under v1); nothing
// when there is no limit or the files are absent.
std::optional<MemoryLimit> cgroup_memory(const std::string& cgroup_root);

// What a run needs of them: an upper bound of its peak.
struct MemoryNeed {
  std::string run;            // the model and mode, as the message names them
  std::size_t per_rank = 0;   // bytes, at the peak of a step (train::predict_rank_memory)
  std::string split{};        // how per_rank splits, for the message: "state 1.8 GiB + ..."
  std::size_t unmapped = 0;   // per rank, address space beside per_rank that is never touched
  int ranks_per_machine = 1;  // the ranks on this machine
  int ranks_per_process = 1;  // the ranks in this process (threads)
  std::size_t once = 0;       // beside the ranks, on rank 0's side: verify's one-process reference
  std::string once_name{};    // what `once` is, for the message
};

// std::invalid_argument naming the run, its need and how it splits, and
// the first limit it exceeds and where that limit comes from.
void check_memory(const MemoryNeed& need, const std::vector<MemoryLimit>& limits);

// "2.7 GiB (the address-space limit ...), 20.1 GiB (MemAvailable in
// /proc/meminfo)", or that none is known.
std::string describe_limits(const std::vector<MemoryLimit>& limits);

// "1.8 GiB", "3.0 MiB".
std::string memory_size(std::size_t bytes);

}  // namespace tinyllm::train
