#include "protocol.h"

namespace rayfield {

void FrameWriter::Add(uint64_t seq, fb::Body type, flatbuffers::Offset<void> body) {
  fb::MessageBuilder m(builder_);
  m.add_seq(seq);
  m.add_body_type(type);
  m.add_body(body);
  messages_.push_back(m.Finish());
}

void FrameWriter::AddError(uint64_t seq, const Status& s) {
  auto msg = builder_.CreateString(s.message);
  Add(seq, fb::CreateErrorReply(builder_, static_cast<fb::ErrorCode>(s.code), msg,
                                s.requested_bytes, s.capacity_bytes, s.used_bytes));
}

void FrameWriter::AddOk(uint64_t seq) { Add(seq, fb::CreateOkReply(builder_)); }

void FrameWriter::FinishTo(std::string* out) {
  auto vec = builder_.CreateVector(messages_);
  builder_.Finish(fb::CreateFrame(builder_, vec));
  uint32_t len = builder_.GetSize();
  char header[kFrameHeader] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                               static_cast<char>((len >> 16) & 0xff),
                               static_cast<char>((len >> 24) & 0xff)};
  out->append(header, kFrameHeader);
  out->append(reinterpret_cast<const char*>(builder_.GetBufferPointer()), len);
  builder_.Clear();
  messages_.clear();
}

const fb::Frame* VerifyFrame(const uint8_t* data, size_t size, std::string* error) {
  if (size < 8) {
    *error = "frame of " + std::to_string(size) + " bytes is too short";
    return nullptr;
  }
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 16;
  opts.max_tables = 1u << 22;
  flatbuffers::Verifier verifier(data, size, opts);
  if (!fb::VerifyFrameBuffer(verifier)) {
    *error = "frame failed flatbuffers verification";
    return nullptr;
  }
  const fb::Frame* frame = fb::GetFrame(data);
  if (frame->messages() == nullptr) {
    *error = "frame has no messages";
    return nullptr;
  }
  for (const fb::Message* m : *frame->messages()) {
    if (m == nullptr || m->body() == nullptr || m->body_type() == fb::Body::NONE) {
      *error = "message without a body";
      return nullptr;
    }
  }
  return frame;
}

}  // namespace rayfield
