// The shared-memory arena of a node: one mapping that holds every object.
//
// Backing: an anonymous memfd (default), or a file created and unlinked at
// once in a directory (/dev/shm, a hugetlbfs mount, any filesystem). Pages are
// faulted in at start (prefault) so large puts run at memory bandwidth. The
// file descriptor is passed to each client, which maps it once.
#pragma once

#include <cstdint>
#include <string>

#include "common.h"

namespace rayfield {

struct ArenaOptions {
  uint64_t capacity = 0;
  std::string directory;  // empty: memfd
  bool huge_pages = false;
  bool prefault = true;
};

class Arena {
 public:
  Arena() = default;
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Status Open(const ArenaOptions& options);
  void Close();

  int fd() const { return fd_; }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

// Maps an arena passed by file descriptor into this process (client side).
// Returns nullptr and sets `error` on failure.
uint8_t* MapArena(int fd, uint64_t size, std::string* error);
void UnmapArena(uint8_t* base, uint64_t size);

}  // namespace rayfield
