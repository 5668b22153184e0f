// Shared basic types of the native core: IDs, status codes, fixed-point
// resource amounts and the log sink.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

namespace rayfield {

// Version of the node <-> client protocol; bump on any incompatible change to
// schema/*.fbs. Exchanged in Hello/HelloReply.
constexpr uint32_t kProtocolVersion = 1;

constexpr size_t kIdSize = 20;

// A connection to the node (a driver, a worker or a tool), numbered from 1;
// 0 is the node itself.
using ClientID = uint64_t;

struct UniqueID {
  std::array<uint8_t, kIdSize> bytes{};

  static UniqueID FromBytes(const void* data) {
    UniqueID id;
    std::memcpy(id.bytes.data(), data, kIdSize);
    return id;
  }
  bool IsNil() const {
    for (uint8_t b : bytes)
      if (b != 0) return false;
    return true;
  }
  std::string Hex() const;
  bool operator==(const UniqueID& o) const { return bytes == o.bytes; }
  bool operator!=(const UniqueID& o) const { return bytes != o.bytes; }
  bool operator<(const UniqueID& o) const { return bytes < o.bytes; }
};

struct UniqueIDHash {
  size_t operator()(const UniqueID& id) const {
    uint64_t a, b;
    std::memcpy(&a, id.bytes.data(), 8);
    std::memcpy(&b, id.bytes.data() + 8, 8);
    return static_cast<size_t>(a * 0x9E3779B97F4A7C15ULL ^ b);
  }
};

// Mirrors fb::ErrorCode (same numbers).
enum class Code : uint16_t {
  Ok = 0,
  ProtocolMismatch = 1,
  InvalidRequest = 2,
  ObjectExists = 3,
  ObjectNotFound = 4,
  ObjectNotSealed = 5,
  ObjectAlreadySealed = 6,
  StoreFull = 7,
  TooLarge = 8,
  NotOwner = 9,
  Timeout = 10,
  Internal = 11,
  NotAWorker = 12,
};

struct Status {
  Code code = Code::Ok;
  std::string message;
  // Only for StoreFull.
  uint64_t requested_bytes = 0, capacity_bytes = 0, used_bytes = 0;

  bool ok() const { return code == Code::Ok; }
  static Status OK() { return {}; }
  static Status Error(Code c, std::string msg) {
    Status s;
    s.code = c;
    s.message = std::move(msg);
    return s;
  }
};

// Resource amounts are fixed point: 1.0 == kResourceUnit.
constexpr int64_t kResourceUnit = 10000;

// Log sink: level 0=debug 1=info 2=warning 3=error. Default writes to stderr;
// the Python module redirects it to its logger.
void Log(int level, const std::string& message);
void SetLogSink(std::function<void(int, const std::string&)> sink);

}  // namespace rayfield
