// Frame encoding and verification for the node <-> client protocol.
//
// A frame on the wire: little-endian uint32 length, then one `Frame`
// flatbuffer (schema/node.fbs) that batches messages. Every received frame is
// length-capped and verified before any field is read.
#pragma once

#include <cstdint>
#include <string>

#include "common.h"
#include "generated/node_generated.h"

namespace rayfield {

namespace fb = rayfield::store::protocol::fb;

constexpr size_t kFrameHeader = 4;
constexpr uint32_t kDefaultMaxFrameBytes = 64u << 20;

inline fb::UniqueID ToFb(const UniqueID& id) {
  return fb::UniqueID(flatbuffers::span<const uint8_t, kIdSize>(id.bytes.data(), kIdSize));
}

inline UniqueID FromFb(const fb::UniqueID* id) {
  return id == nullptr ? UniqueID{} : UniqueID::FromBytes(id->bytes()->Data());
}

// Collects messages and writes them out as one frame.
class FrameWriter {
 public:
  FrameWriter() : builder_(1024) {}
  flatbuffers::FlatBufferBuilder& builder() { return builder_; }
  template <typename T>
  void Add(uint64_t seq, flatbuffers::Offset<T> body) {
    Add(seq, fb::BodyTraits<T>::enum_value, body.Union());
  }
  void Add(uint64_t seq, fb::Body type, flatbuffers::Offset<void> body);
  void AddError(uint64_t seq, const Status& status);
  void AddOk(uint64_t seq);
  bool empty() const { return messages_.empty(); }
  // Appends [length][frame] to *out and resets the writer.
  void FinishTo(std::string* out);

 private:
  flatbuffers::FlatBufferBuilder builder_;
  std::vector<flatbuffers::Offset<fb::Message>> messages_;
};

// Verifies a frame body (without its length prefix). Returns the Frame or
// nullptr when malformed; `error` says why.
const fb::Frame* VerifyFrame(const uint8_t* data, size_t size, std::string* error);

// Reads the length prefix at `p` (4 bytes, little endian).
inline uint32_t ReadFrameLength(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace rayfield
