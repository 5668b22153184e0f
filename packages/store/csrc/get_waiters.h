// The node's parked gets and waits: requests for objects that are not sealed yet.
//
// No sockets or threads: the event loop parks a request here, tells it when an object
// becomes available, and replies to what comes back complete (all objects found, enough
// ready for a wait) or expired (its deadline passed).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "protocol.h"

namespace rayfield {

struct PendingGet {
  ClientID client;
  uint64_t seq;
  std::vector<UniqueID> ids;
  std::vector<fb::ObjectLocation> locs;
  size_t remaining;        // objects still missing before the reply
  bool wait_only = false;  // WaitRequest: no references, reply with ready flags
};

class GetWaiters {
 public:
  using Clock = std::chrono::steady_clock;
  // Where `client` finds a sealed object, taking a reference for it (nullopt: not there).
  using Acquire = std::function<std::optional<fb::ObjectLocation>(ClientID, const UniqueID&)>;

  // Parks `g` until its missing objects arrive or `deadline` (nullopt: none).
  void Park(std::unique_ptr<PendingGet> g, std::optional<Clock::time_point> deadline);
  // `id` became available: the gets it completes, taken out.
  std::vector<std::unique_ptr<PendingGet>> Available(const UniqueID& id, const Acquire& acquire);
  // The gets whose deadline passed by `now`, taken out.
  std::vector<std::unique_ptr<PendingGet>> Expire(Clock::time_point now);
  // Drops the client's gets (its connection closed).
  void ClientGone(ClientID client);
  void Clear();
  bool Waited(const UniqueID& id) const { return waiting_on_.count(id) > 0; }
  std::optional<Clock::time_point> NextDeadline() const;

 private:
  uint64_t next_key_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<PendingGet>> gets_;
  std::unordered_map<UniqueID, std::vector<uint64_t>, UniqueIDHash> waiting_on_;
  std::multimap<Clock::time_point, uint64_t> deadlines_;
};

}  // namespace rayfield
