#include "allocator.h"

namespace rayfield {

Allocator::Allocator(uint64_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  if (capacity_ > 0) InsertFree(0, capacity_);
}

uint64_t Allocator::RoundUp(uint64_t size) {
  if (size == 0) size = 1;
  return (size + kAlignment - 1) / kAlignment * kAlignment;
}

void Allocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Allocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

std::optional<uint64_t> Allocator::Allocate(uint64_t size) {
  if (size > capacity_) return std::nullopt;
  uint64_t need = RoundUp(size);
  auto best = free_by_size_.lower_bound({need, 0});
  if (best == free_by_size_.end()) return std::nullopt;
  uint64_t block_size = best->first, offset = best->second;
  EraseFree(free_by_offset_.find(offset));
  if (block_size > need) InsertFree(offset + need, block_size - need);
  allocated_.emplace(offset, need);
  used_ += need;
  return offset;
}

void Allocator::Free(uint64_t offset) {
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return;
  uint64_t size = a->second;
  allocated_.erase(a);
  used_ -= size;
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    EraseFree(next);
  }
  auto prev = free_by_offset_.lower_bound(offset);
  if (prev != free_by_offset_.begin()) {
    --prev;
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(offset, size);
}

uint64_t Allocator::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

uint64_t Allocator::BlockSize(uint64_t offset) const {
  auto it = allocated_.find(offset);
  return it == allocated_.end() ? 0 : it->second;
}

}  // namespace rayfield
