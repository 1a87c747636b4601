// The memory this machine lets a run take, and the check, before any model
// is built, that the run's model state fits in it: a run too large fails at
// once with the figures rather than being killed by the kernel, or dying of
// std::bad_alloc, minutes in.
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

// What a run needs of them.
struct MemoryNeed {
  std::string run;            // the model and mode, as the message names them
  std::size_t per_rank = 0;   // bytes, a lower bound (the model state's peak)
  int ranks_per_machine = 1;  // the ranks on this machine
  int ranks_per_process = 1;  // the ranks in this process (threads)
};

// std::invalid_argument naming the run, its need and the first limit it
// exceeds.
void check_memory(const MemoryNeed& need, const std::vector<MemoryLimit>& limits);

}  // namespace tinyllm::train
