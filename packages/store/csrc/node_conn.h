// Per-connection state of the node event loop and the headers its parts share
// (node_server.h).
#pragma once

#include <string>

#include "node_server.h"
#include "spill.h"
#include "task_manager.h"

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
};

}  // namespace rayfield
