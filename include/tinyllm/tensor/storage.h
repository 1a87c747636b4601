// Storage: one float64 buffer, uninitialised, owned by one tensor, or a
// view of memory that something else owns (Storage::view).
//
// Fresh pages are slow to touch, so large buffers come from a cache keyed by
// exact length: a training step asks for the same lengths every step, and
// after the first step no new page is ever touched. Large blocks are 2 MiB
// aligned and advised as huge pages. This is a cache, not a pool:
// empty_cache() gives every cached block back to the system, as an
// allocation the system refuses does before it fails.
#pragma once

#include <cstddef>
#include <new>
#include <span>

namespace tinyllm {

// The std::bad_alloc a Storage throws, naming the bytes it could not get
// (its message needs no allocation of its own).
class OutOfMemory : public std::bad_alloc {
 public:
  // what: the allocation's owner, "a tensor" or "OpenBLAS's work buffer".
  explicit OutOfMemory(std::size_t bytes, const char* what = "a tensor");
  const char* what() const noexcept override { return message_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_;
  char message_[96];
};

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
  // Gives up ownership: the memory is never freed and this becomes a view
  // of it. For a destructor that would copy its views out of a buffer but
  // cannot get the memory: the views stay valid, the buffer is kept.
  void keep_forever() { owned_ = false; }

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
