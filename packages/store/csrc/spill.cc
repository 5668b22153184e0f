#include "spill.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

namespace rayfield {

namespace {

constexpr char kMagic[8] = {'R', 'F', 'S', 'P', 'I', 'L', 'L', '1'};

struct Header {
  char magic[8];
  uint8_t id[kIdSize];
  uint32_t reserved;
  uint64_t data_size;
  uint64_t metadata_size;
};
static_assert(sizeof(Header) == 48, "the spill header has a fixed layout");

std::string Why(const std::string& what, const std::string& path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

}  // namespace

SpillFiles::SpillFiles(std::string directory, const UniqueID& node)
    : directory_(std::move(directory)), prefix_(node.Hex().substr(0, 12)) {
  while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
}

Status SpillFiles::EnsureDirectory() {
  if (directory_ready_) return Status::OK();
  // mkdir -p, remembering whether the last component is ours to remove at Close().
  for (size_t pos = 1; pos <= directory_.size(); ++pos) {
    if (pos != directory_.size() && directory_[pos] != '/') continue;
    std::string part = directory_.substr(0, pos);
    if (mkdir(part.c_str(), 0700) == 0) {
      if (pos == directory_.size()) created_directory_ = true;
    } else if (errno != EEXIST) {
      return Status::Error(Code::StoreFull, Why("cannot create spill directory", part, errno));
    }
  }
  struct stat st {};
  if (stat(directory_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::Error(Code::StoreFull,
                         Why("bad spill directory", directory_, ENOTDIR));
  }
  directory_ready_ = true;
  return Status::OK();
}

Status SpillFiles::Write(const UniqueID& id, const uint8_t* data, uint64_t data_size,
                         uint64_t metadata_size, uint64_t* key) {
  if (!enabled()) return Status::Error(Code::StoreFull, "no spill directory is configured");
  Status s = EnsureDirectory();
  if (!s.ok()) return s;
  uint64_t k = next_key_++;
  std::string path =
      directory_ + "/" + prefix_ + "-" + id.Hex() + "-" + std::to_string(k) + ".spill";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error(Code::StoreFull, Why("cannot create spill file", path, errno));
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  std::memcpy(h.id, id.bytes.data(), kIdSize);
  h.data_size = data_size;
  h.metadata_size = metadata_size;
  // One gathered write of the header and the object straight from the arena;
  // loop only on short writes (large objects, signals).
  uint64_t total = sizeof(h) + data_size + metadata_size, done = 0;
  while (done < total) {
    iovec iov[2];
    int n = 0;
    if (done < sizeof(h)) {
      iov[n++] = {reinterpret_cast<char*>(&h) + done, sizeof(h) - done};
      if (data_size + metadata_size > 0) {
        iov[n++] = {const_cast<uint8_t*>(data), data_size + metadata_size};
      }
    } else {
      uint64_t from = done - sizeof(h);
      iov[n++] = {const_cast<uint8_t*>(data) + from, data_size + metadata_size - from};
    }
    ssize_t w = pwritev(fd, iov, n, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = w < 0 ? errno : ENOSPC;
      close(fd);
      unlink(path.c_str());
      return Status::Error(Code::StoreFull, Why("cannot write spill file", path, err));
    }
    done += static_cast<uint64_t>(w);
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(path.c_str());
    return Status::Error(Code::StoreFull, Why("cannot write spill file", path, err));
  }
  files_[k] = {path, total};
  disk_bytes_ += total;
  *key = k;
  return Status::OK();
}

Status SpillFiles::Read(uint64_t key, const UniqueID& id, uint8_t* dest, uint64_t data_size,
                        uint64_t metadata_size) const {
  auto it = files_.find(key);
  if (it == files_.end()) {
    return Status::Error(Code::Internal, "no spill file for object " + id.Hex());
  }
  const std::string& path = it->second.path;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(Code::Internal, Why("cannot open spill file", path, errno));
  Header h{};
  uint64_t total = data_size + metadata_size, done = 0;
  ssize_t r = pread(fd, &h, sizeof(h), 0);
  if (r != static_cast<ssize_t>(sizeof(h)) || std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 ||
      std::memcmp(h.id, id.bytes.data(), kIdSize) != 0 || h.data_size != data_size ||
      h.metadata_size != metadata_size) {
    close(fd);
    return Status::Error(Code::Internal, "spill file " + path + " has a bad header");
  }
  while (done < total) {
    r = pread(fd, dest + done, total - done, static_cast<off_t>(sizeof(h) + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = r < 0 ? errno : EIO;
      close(fd);
      return Status::Error(Code::Internal,
                           r < 0 ? Why("cannot read spill file", path, err)
                                 : "spill file " + path + " is truncated");
    }
    done += static_cast<uint64_t>(r);
  }
  close(fd);
  return Status::OK();
}

void SpillFiles::Remove(uint64_t key) {
  auto it = files_.find(key);
  if (it == files_.end()) return;
  if (unlink(it->second.path.c_str()) != 0 && errno != ENOENT) {
    Log(2, Why("cannot remove spill file", it->second.path, errno));
  }
  disk_bytes_ -= it->second.bytes;
  files_.erase(it);
}

void SpillFiles::Close() {
  while (!files_.empty()) Remove(files_.begin()->first);
  if (created_directory_ && rmdir(directory_.c_str()) != 0 && errno != ENOTEMPTY &&
      errno != ENOENT) {
    Log(2, Why("cannot remove spill directory", directory_, errno));
  }
  created_directory_ = false;
  directory_ready_ = false;
}

}  // namespace rayfield
