// The shared-memory arena of a node: one mapping that holds every object.
//
// Backing: an anonymous memfd (default), or a file created and unlinked at
// once in a directory (/dev/shm, a hugetlbfs mount, any filesystem). Pages are
// faulted in at start (prefault) so large puts run at memory bandwidth. The
// file descriptor is passed to each client, which maps it once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common.h"

namespace rayfield {

struct ArenaOptions {
  uint64_t capacity = 0;
  std::string directory;  // empty: memfd
  bool huge_pages = false;
  bool prefault = true;
  // Without prefault: bytes past the end of the highest allocation that a background
  // thread keeps populated (ArenaWarmer); 0: none.
  uint64_t warm_ahead = 0;
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

// Populates the arena's pages ahead of allocation, on a background (SCHED_BATCH) thread.
//
// A page of a fresh memfd is allocated and zeroed by the kernel when it is first touched:
// for a large object that costs about as much as copying it, on the path of whoever
// creates it (a pull, a put). Freed pages stay allocated (the arena never gives them back),
// and a new object that does not fit a freed block is carved from the start of the
// arena's free tail, right after the highest allocation so far. So after each allocation
// of at least kTrigger bytes the warmer populates (MADV_POPULATE_WRITE) the arena from
// where it stopped up to `ahead` bytes past that allocation's end: the next large objects
// land on pages that exist already, and their creators only map them. Small objects trigger nothing: a node that never holds a
// large one never has pages populated ahead. The pages it populates stay within the
// arena (the memory the node was given), and a warmer that has not caught up costs
// nothing but the populate its creator does anyway.
class ArenaWarmer {
 public:
  ArenaWarmer() = default;
  ~ArenaWarmer();
  ArenaWarmer(const ArenaWarmer&) = delete;
  ArenaWarmer& operator=(const ArenaWarmer&) = delete;

  // Starts the thread over the mapping [base, base + size); ahead 0 starts nothing.
  void Start(uint8_t* base, uint64_t size, uint64_t ahead);
  // An allocation of `size` bytes now ends at `end` (bytes from the base): if it is
  // large (kTrigger), warm up to end + ahead.
  void Allocated(uint64_t end, uint64_t size);
  // Stops the thread (it finishes the populate call it is in, at most kStep bytes).
  void Stop();
  // Bytes from the base populated so far (for tests).
  uint64_t warmed();

  // One populate call: it holds the node process's mmap lock for reading, so another
  // thread's mmap or munmap waits for at most this much populating (about 1 ms).
  static constexpr uint64_t kStep = 2ull << 20;
  static constexpr uint64_t kTrigger = 1ull << 20;

 private:
  void Run();

  uint8_t* base_ = nullptr;
  uint64_t size_ = 0, ahead_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t warmed_ = 0, target_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// Maps an arena passed by file descriptor into this process (client side).
// Returns nullptr and sets `error` on failure.
uint8_t* MapArena(int fd, uint64_t size, std::string* error);
void UnmapArena(uint8_t* base, uint64_t size);

}  // namespace rayfield
