// Storage: one float64 buffer, uninitialised, or a view of part of one
// (Storage::view). A buffer's memory is shared by its Storage and every view
// and owner() taken of it, and lives until the last of them goes: a view
// never dangles, even when the buffer's Storage is dropped or reassigned (a
// NumPy array of a ZeRO stage-3 parameter outlives the step that releases it).
//
// Fresh pages are slow to touch, so large buffers come from a cache keyed by
// exact length: a training step asks for the same lengths every step, and
// after the first step no new page is ever touched. Large blocks are 2 MiB
// aligned and advised as huge pages. This is a cache, not a pool:
// empty_cache() gives every cached block back to the system, as an
// allocation the system refuses does before it fails.
#pragma once

#include <cstddef>
#include <memory>
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
  // Elements [offset, offset + count) of this buffer, sharing its memory.
  Storage view(std::size_t offset, std::size_t count) const;
  // Move-only: a second handle on the same memory is spelled view().
  Storage(Storage&& other) noexcept;
  Storage& operator=(Storage&& other) noexcept;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  double* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<double> span() const { return {data_, size_}; }
  bool is_view() const { return is_view_; }
  // Keeps the memory alive for as long as the result is held (for memory
  // lent outside the library: a NumPy array's base).
  std::shared_ptr<const void> owner() const { return block_; }

 private:
  std::shared_ptr<const void> block_;  // gives the memory back when the last holder goes
  double* data_ = nullptr;
  std::size_t size_ = 0;
  bool is_view_ = false;
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
