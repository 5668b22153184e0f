// Spill files of a node: copies of sealed objects written to disk so their
// arena space can be reused, read back into the arena on demand.
//
// One file per spilled object, `<directory>/<node>-<object>-<key>.spill`: a
// fixed header (magic, object id, data and metadata sizes) followed by the
// data and the metadata exactly as they lie in the arena, written with one
// gathered write straight from the mapping. Objects are immutable, so a file
// stays valid after a restore and spilling the object again costs no write.
// Keys are unique per node, so a file is never confused with a later object
// of the same id. No fsync: the files only need to outlive memory pressure,
// not the node (Close() removes them).
//
// Not thread-safe: the node event loop serialises calls.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common.h"

namespace rayfield {

class SpillFiles {
 public:
  // `directory` empty: spilling disabled. It is created (with parents) at the
  // first spill; `node` names the files so nodes may share a directory.
  SpillFiles(std::string directory, const UniqueID& node);
  ~SpillFiles() { Close(); }
  SpillFiles(const SpillFiles&) = delete;
  SpillFiles& operator=(const SpillFiles&) = delete;

  bool enabled() const { return !directory_.empty(); }
  const std::string& directory() const { return directory_; }

  // Writes `data_size + metadata_size` bytes from `data` (data then metadata,
  // contiguous as in the arena) to a new file; *key names it afterwards. On
  // failure nothing is left on disk and the message says why (path, errno).
  Status Write(const UniqueID& id, const uint8_t* data, uint64_t data_size,
               uint64_t metadata_size, uint64_t* key);
  // Reads the object of file `key` into `dest`, checking the header.
  Status Read(uint64_t key, const UniqueID& id, uint8_t* dest, uint64_t data_size,
              uint64_t metadata_size) const;
  // Deletes the file of `key` (no-op for 0 or an unknown key).
  void Remove(uint64_t key);
  // Deletes every file written, and the directory if this created it and it is empty.
  void Close();

  uint64_t num_files() const { return files_.size(); }
  uint64_t disk_bytes() const { return disk_bytes_; }

 private:
  Status EnsureDirectory();

  std::string directory_;
  std::string prefix_;  // the node's id, shortened
  bool created_directory_ = false;
  bool directory_ready_ = false;
  uint64_t next_key_ = 1;
  struct File {
    std::string path;
    uint64_t bytes;
  };
  std::unordered_map<uint64_t, File> files_;
  uint64_t disk_bytes_ = 0;
};

}  // namespace rayfield
