// Best-fit allocator of byte ranges inside the arena, with coalescing.
//
// Pure bookkeeping over offsets [0, capacity): no memory is touched, so unit
// tests drive it directly. Every block is aligned to kAlignment.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace rayfield {

class Allocator {
 public:
  static constexpr uint64_t kAlignment = 64;

  explicit Allocator(uint64_t capacity);

  // Offset of a new block of at least `size` bytes, or nullopt if no free
  // range is large enough. A zero size still takes one aligned unit.
  std::optional<uint64_t> Allocate(uint64_t size);
  // Returns the block starting at `offset` (as given by Allocate).
  void Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t largest_free() const;
  // Size of the block at offset as rounded by Allocate (0 if unknown).
  uint64_t BlockSize(uint64_t offset) const;
  static uint64_t RoundUp(uint64_t size);

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;            // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;    // (size, offset)
  std::map<uint64_t, uint64_t> allocated_;                  // offset -> size
};

}  // namespace rayfield
