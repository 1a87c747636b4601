#include "memory_available.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

namespace tinyllm::train {
namespace {

// The value of "<key>: <n> kB" in a /proc file, in bytes; 0 when absent.
std::size_t proc_kib(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string word;
  while (in >> word) {
    if (word == key + ":") {
      std::size_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

int ranks_against(const MemoryNeed& need, const MemoryLimit& limit) {
  return limit.per_process ? need.ranks_per_process : need.ranks_per_machine;
}

// The number a cgroup file holds; nothing when it is absent or says "max".
std::optional<std::size_t> file_number(const std::string& path) {
  std::ifstream in(path);
  std::size_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

// The number of the line "<key> <n>" of a cgroup's memory.stat.
std::optional<std::size_t> stat_number(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string name;
  std::size_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return std::nullopt;
}

}  // namespace

std::string memory_size(std::size_t bytes) {
  const auto b = static_cast<double>(bytes);
  return bytes >= (std::size_t{1} << 30) ? fmt::format("{:.1f} GiB", b / (1 << 30))
                                         : fmt::format("{:.1f} MiB", b / (1 << 20));
}

std::string describe_limits(const std::vector<MemoryLimit>& limits) {
  std::string text;
  for (const MemoryLimit& limit : limits)
    text += fmt::format("{}{} ({})", text.empty() ? "" : ", ", memory_size(limit.bytes), limit.name);
  return text.empty() ? "no known limit" : text;
}

std::optional<MemoryLimit> cgroup_memory(const std::string& root) {
  // cgroup v2 names the files memory.*; v1 (its memory/ folder) the older
  // names, where "no limit" is a number near 2^63 rather than "max".
  const bool v2 = std::filesystem::exists(root + "/memory.max");
  const std::string limit_file = root + (v2 ? "/memory.max" : "/memory.limit_in_bytes");
  const auto limit = file_number(limit_file);
  const auto usage = file_number(root + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
  if (!limit || !usage || *limit >= (std::size_t{1} << 62)) return std::nullopt;
  const std::size_t cache = stat_number(root + "/memory.stat", v2 ? "file" : "total_cache").value_or(0);
  const std::size_t held = *usage > cache ? *usage - cache : 0;
  return MemoryLimit{*limit > held ? *limit - held : 0,
                     fmt::format("the memory cgroup's limit of {} ({}), less the {} its processes hold",
                                 memory_size(*limit), limit_file, memory_size(held)),
                     false};
}

std::vector<MemoryLimit> available_memory() {
  std::vector<MemoryLimit> limits;
  if (const std::size_t free = proc_kib("/proc/meminfo", "MemAvailable"); free > 0)
    limits.push_back({free, "MemAvailable in /proc/meminfo", false});
  for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/memory"}) {
    if (const std::optional<MemoryLimit> group = cgroup_memory(root)) {
      limits.push_back(*group);
      break;
    }
  }
  const struct {
    int resource;
    const char* used;  // what of it the process holds already (/proc/self/status)
    const char* name;
  } rlimits[] = {{RLIMIT_AS, "VmSize", "the address-space limit RLIMIT_AS (ulimit -v)"},
                 {RLIMIT_DATA, "VmData", "the data-segment limit RLIMIT_DATA (ulimit -d)"}};
  for (const auto& r : rlimits) {
    rlimit limit{};
    if (getrlimit(r.resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
    const std::size_t used = proc_kib("/proc/self/status", r.used), cap = limit.rlim_cur;
    limits.push_back({cap > used ? cap - used : 0,
                      fmt::format("{}, less the {} this process maps", r.name, memory_size(used)), true, true});
  }
  return limits;
}

void check_memory(const MemoryNeed& need, const std::vector<MemoryLimit>& limits) {
  // The limit the need exceeds the most, counting `once` and, against an
  // address-space limit, the untouched mappings.
  const MemoryLimit* worst = nullptr;
  double most = 1;
  for (const MemoryLimit& limit : limits) {
    const auto ranks = static_cast<double>(ranks_against(need, limit));
    const auto per_rank = static_cast<double>(need.per_rank + (limit.address_space ? need.unmapped : 0));
    const double over = (per_rank * ranks + static_cast<double>(need.once)) / static_cast<double>(limit.bytes);
    if (over > most) {
      worst = &limit;
      most = over;
    }
  }
  if (!worst) return;
  const int ranks = ranks_against(need, *worst);
  const std::string split = need.split.empty() ? "" : fmt::format(" ({})", need.split);
  const std::string unmapped =
      worst->address_space && need.unmapped > 0
          ? fmt::format(", and {} of address space it maps but never touches", memory_size(need.unmapped))
          : "";
  const std::string once =
      need.once > 0 ? fmt::format(" + {} for {}", memory_size(need.once), need.once_name) : std::string();
  throw std::invalid_argument(fmt::format(
      "{} needs up to {} per rank{}{} x {} rank{}{}{}, but {} are available ({})", need.run, memory_size(need.per_rank),
      split, unmapped, ranks, ranks == 1 ? "" : "s", worst->per_process ? " in this process" : " on this machine", once,
      memory_size(worst->bytes), worst->name));
}

}  // namespace tinyllm::train
