// Per-connection and per-pending-get state of the node event loop, shared by
// node_server.cc (the loop, messages) and node_tasks.cc (task and actor records).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "node_server.h"

namespace rayfield {

struct NodeServer::Conn {
  int fd = -1;
  ClientID id = 0;
  int pid = 0;
  std::string name;
  bool hello = false;
  bool send_fd = false;  // the arena fd rides on the next write
  bool subscribed = false;
  bool worker = false;
  bool driver = false;  // said ClientKind::Driver in its Hello: its actors fate-share with it
  bool want_write = false;
  std::string in;
  size_t in_pos = 0;
  std::string out;
  size_t out_pos = 0;
  FrameWriter writer;
  std::unordered_map<UniqueID, int, UniqueIDHash> actor_handles;  // handles it holds
};

struct NodeServer::PendingGet {
  ClientID client;
  uint64_t seq;
  std::vector<UniqueID> ids;
  std::vector<fb::ObjectLocation> locs;
  size_t remaining;      // objects still missing before the reply
  bool wait_only = false;  // WaitRequest: no references, reply with ready flags
};

}  // namespace rayfield
