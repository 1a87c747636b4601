// Storage: one float64 buffer, uninitialised, owned by one tensor, or a
// view of memory that something else owns (Storage::view).
//
// Fresh pages cost ~11 µs each to touch here, so large buffers come from a
// cache keyed by exact length: a training step asks for the same lengths
// every step, and after the first step no new page is ever touched. Large
// blocks are 2 MiB aligned and advised as huge pages. This is a cache, not a
// pool: empty_cache() gives every cached block back to the system.
#pragma once

#include <cstddef>
#include <span>

namespace tinyllm {

class Storage {
 public:
  Storage() = default;
  explicit Storage(std::size_t size);  // values are not initialised
  // Memory owned elsewhere (DDP's and ZeRO's flat vectors), never freed here:
  // its owner must outlive the view or take it back first.
  static Storage view(std::span<double> memory);
  ~Storage();
  Storage(Storage&& other) noexcept;
  Storage& operator=(Storage&& other) noexcept;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  double* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<double> span() const { return {data_, size_}; }
  bool is_view() const { return !owned_; }

 private:
  double* data_ = nullptr;
  std::size_t size_ = 0;
  bool owned_ = true;
};

// Returns every cached block to the system; the bytes it freed.
std::size_t empty_cache();
// Bytes held in the cache, not in use by any Storage.
std::size_t cached_bytes();
// Bytes of every owned Storage alive in this process now, and the most since
// the start or the last reset (torch.cuda.memory_allocated's counterparts):
// what a rank really holds, beside the bookkeeping of memory_bytes().
std::size_t allocated_bytes();
std::size_t max_allocated_bytes();
void reset_max_allocated_bytes();

}  // namespace tinyllm
