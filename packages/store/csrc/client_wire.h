// Helpers shared by the client's connection and its requests (client_*.cc).
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "protocol.h"

namespace rayfield {

// A transport error: code Internal with the "connection: " prefix.
inline Status ConnError(const std::string& what) {
  return Status::Error(Code::Internal, "connection: " + what);
}

inline std::vector<fb::UniqueID> ToFbIds(const std::vector<UniqueID>& ids) {
  std::vector<fb::UniqueID> out;
  out.reserve(ids.size());
  for (const auto& id : ids) out.push_back(ToFb(id));
  return out;
}

}  // namespace rayfield
