#include "tinyllm/tensor/storage.h"

#include <fmt/format.h>
#include <sanitizer/asan_interface.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tinyllm {
namespace {

// Below this a block comes straight from malloc, which recycles small blocks
// well; from here on glibc would mmap fresh pages on every allocation.
constexpr std::size_t kCachedFrom = 64 * 1024;
constexpr std::size_t kHugePage = 2 * 1024 * 1024;
// The cache holds at most this much; beyond it, freed blocks go to the system.
constexpr std::size_t kCacheLimit = std::size_t{4} << 30;

class BlockCache {
 public:
  double* take(std::size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        double* block = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        ASAN_UNPOISON_MEMORY_REGION(block, bytes);
        return block;
      }
    }
    if (double* block = allocate(bytes)) return block;
    // The system refused: the cached blocks of other lengths may be what it lacks.
    clear();
    if (double* block = allocate(bytes)) return block;
    throw OutOfMemory(bytes);
  }

  void give(double* block, std::size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      if (cached_ + bytes <= kCacheLimit) {
        // Under AddressSanitizer a cached block reads as freed memory, so a
        // use after free is caught even though the block is never freed.
        ASAN_POISON_MEMORY_REGION(block, bytes);
        free_[bytes].push_back(block);
        cached_ += bytes;
        return;
      }
    }
    std::free(block);
  }

  std::size_t clear() {
    std::lock_guard lock(mutex_);
    for (auto& [bytes, blocks] : free_) {
      for (double* block : blocks) {
        ASAN_UNPOISON_MEMORY_REGION(block, bytes);
        std::free(block);
      }
    }
    free_.clear();
    return std::exchange(cached_, 0);
  }

  std::size_t cached() {
    std::lock_guard lock(mutex_);
    return cached_;
  }

 private:
  static double* allocate(std::size_t bytes) {
    const std::size_t align = bytes >= kHugePage ? kHugePage : 64;
    const std::size_t rounded = (bytes + align - 1) / align * align;
    void* block = std::aligned_alloc(align, rounded);
    if (block != nullptr && align == kHugePage) madvise(block, rounded, MADV_HUGEPAGE);
    return static_cast<double*>(block);
  }

  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<double*>> free_;
  std::size_t cached_ = 0;
};

// Owned bytes in use, and their high-water mark.
std::atomic<std::size_t> allocated{0};
std::atomic<std::size_t> max_allocated{0};

void count_allocation(std::size_t bytes) {
  const std::size_t now = allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t high = max_allocated.load(std::memory_order_relaxed);
  while (now > high && !max_allocated.compare_exchange_weak(high, now, std::memory_order_relaxed)) {
  }
}

BlockCache& cache() {
  static BlockCache* instance = new BlockCache();  // outlives every static Storage
  return *instance;
}

// One buffer's memory, given back when the last Storage or owner() holding
// it goes.
class Block {
 public:
  explicit Block(std::size_t bytes) : bytes_(bytes) {
    if (bytes >= kCachedFrom) {
      data_ = cache().take(bytes);
    } else {
      data_ = static_cast<double*>(std::malloc(bytes));
      if (data_ == nullptr) throw OutOfMemory(bytes);
    }
    count_allocation(bytes);
  }
  ~Block() {
    allocated.fetch_sub(bytes_, std::memory_order_relaxed);
    if (bytes_ >= kCachedFrom) {
      cache().give(data_, bytes_);
    } else {
      std::free(data_);
    }
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  double* data() const { return data_; }

 private:
  double* data_ = nullptr;
  std::size_t bytes_;
};

}  // namespace

OutOfMemory::OutOfMemory(std::size_t bytes, const char* what) : bytes_(bytes) {
  std::snprintf(message_, sizeof message_, "out of memory: %s of %.1f MiB could not be allocated", what,
                static_cast<double>(bytes) / (1 << 20));
}

Storage::Storage(std::size_t size) : size_(size) {
  if (size == 0) return;
  auto block = std::make_shared<Block>(size * sizeof(double));
  data_ = block->data();
  block_ = std::move(block);
}

Storage Storage::view(std::size_t offset, std::size_t count) const {
  if (offset > size_ || count > size_ - offset) {
    throw std::out_of_range(
        fmt::format("Storage::view: elements [{}, {}) lie outside a buffer of {}", offset, offset + count, size_));
  }
  Storage s;
  s.block_ = block_;
  s.data_ = data_ + offset;
  s.size_ = count;
  s.is_view_ = true;
  return s;
}

Storage::Storage(Storage&& other) noexcept
    : block_(std::move(other.block_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      is_view_(std::exchange(other.is_view_, false)) {}

Storage& Storage::operator=(Storage&& other) noexcept {
  if (this != &other) {
    block_ = std::move(other.block_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    is_view_ = std::exchange(other.is_view_, false);
  }
  return *this;
}

std::size_t empty_cache() { return cache().clear(); }

std::size_t cached_bytes() { return cache().cached(); }

std::size_t allocated_bytes() { return allocated.load(std::memory_order_relaxed); }

std::size_t max_allocated_bytes() { return max_allocated.load(std::memory_order_relaxed); }

void reset_max_allocated_bytes() { max_allocated.store(allocated_bytes(), std::memory_order_relaxed); }

}  // namespace tinyllm
