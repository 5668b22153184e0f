#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/mman.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace rayfield {

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

int CreateBackingFile(const ArenaOptions& o, std::string* error) {
  if (o.directory.empty()) {
    unsigned flags = MFD_CLOEXEC | (o.huge_pages ? MFD_HUGETLB : 0);
    int fd = static_cast<int>(syscall(SYS_memfd_create, "rayfield-arena", flags));
    if (fd < 0) *error = Errno("memfd_create");
    return fd;
  }
  std::string tmpl = o.directory + "/rayfield-arena-XXXXXX";
  std::vector<char> path(tmpl.begin(), tmpl.end());
  path.push_back('\0');
  int fd = mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) {
    *error = Errno("cannot create the arena file in " + o.directory);
    return -1;
  }
  unlink(path.data());  // nothing is left behind, whatever happens to the node
  return fd;
}

// Touch every page, in parallel, so later writes do not page-fault.
void Prefault(uint8_t* base, uint64_t size) {
  if (madvise(base, size, MADV_POPULATE_WRITE) == 0) return;
  const long page = sysconf(_SC_PAGESIZE);
  unsigned n = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  uint64_t chunk = (size / n + page - 1) / page * page;
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < n; ++i) {
    threads.emplace_back([=] {
      uint64_t begin = i * chunk, end = std::min(size, begin + chunk);
      for (uint64_t off = begin; off < end; off += page) base[off] = 0;
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace

Arena::~Arena() { Close(); }

Status Arena::Open(const ArenaOptions& o) {
  if (o.capacity == 0) return Status::Error(Code::InvalidRequest, "arena capacity must be > 0");
  std::string error;
  fd_ = CreateBackingFile(o, &error);
  if (fd_ < 0) return Status::Error(Code::Internal, error);
  uint64_t size = o.capacity;
  if (o.huge_pages) size = (size + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    error = Errno("cannot size the arena to " + std::to_string(size) + " bytes");
    Close();
    return Status::Error(Code::Internal, error);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    error = Errno("cannot map the arena");
    Close();
    return Status::Error(Code::Internal, error);
  }
  base_ = static_cast<uint8_t*>(p);
  size_ = size;
  if (o.prefault) Prefault(base_, size_);
  return Status::OK();
}

void Arena::Close() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

ArenaWarmer::~ArenaWarmer() { Stop(); }

void ArenaWarmer::Start(uint8_t* base, uint64_t size, uint64_t ahead) {
  Stop();
  if (ahead == 0 || base == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  base_ = base;
  size_ = size;
  ahead_ = ahead;
  warmed_ = target_ = 0;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void ArenaWarmer::Allocated(uint64_t end, uint64_t size) {
  if (size < kTrigger) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (ahead_ == 0) return;
  uint64_t want = std::min(size_, end + ahead_);
  if (want <= target_) return;
  target_ = want;
  cv_.notify_one();
}

uint64_t ArenaWarmer::warmed() {
  std::lock_guard<std::mutex> lock(mu_);
  return warmed_;
}

void ArenaWarmer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void ArenaWarmer::Run() {
  // A batch thread: it takes its share of the CPU but never preempts the node's loop, its
  // workers or transfers when they wake up.
  sched_param param{};
  sched_setscheduler(0, SCHED_BATCH, &param);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || warmed_ < target_; });
    if (stop_) return;
    uint64_t begin = warmed_ / page * page;
    uint64_t end = std::min(target_, begin + kStep);
    lock.unlock();
    int err = madvise(base_ + begin, end - begin, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
    lock.lock();
    if (err == EINTR || err == EAGAIN) continue;  // a signal or a busy page: try again
    // Any other failure ends the warming: a kernel before 5.14 (no MADV_POPULATE_WRITE),
    // or no memory for more pages now. Creators then fault their pages in as without it.
    if (err != 0) return;
    warmed_ = std::max(warmed_, end);
  }
}

uint8_t* MapArena(int fd, uint64_t size, std::string* error) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = Errno("cannot map the node's arena");
    return nullptr;
  }
  return static_cast<uint8_t*>(p);
}

void UnmapArena(uint8_t* base, uint64_t size) {
  if (base != nullptr) munmap(base, size);
}

}  // namespace rayfield
