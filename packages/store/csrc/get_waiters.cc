// Parked gets and waits (see get_waiters.h).
#include "get_waiters.h"

namespace rayfield {

void GetWaiters::Park(std::unique_ptr<PendingGet> g, std::optional<Clock::time_point> deadline) {
  uint64_t key = next_key_++;
  for (size_t i = 0; i < g->ids.size(); ++i) {
    if (!g->locs[i].found()) waiting_on_[g->ids[i]].push_back(key);
  }
  if (deadline) deadlines_.emplace(*deadline, key);
  gets_.emplace(key, std::move(g));
}

std::vector<std::unique_ptr<PendingGet>> GetWaiters::Available(const UniqueID& id,
                                                               const Acquire& acquire) {
  std::vector<std::unique_ptr<PendingGet>> done;
  auto w = waiting_on_.find(id);
  if (w == waiting_on_.end()) return done;
  std::vector<uint64_t> keys;
  keys.swap(w->second);
  waiting_on_.erase(w);
  for (uint64_t key : keys) {
    auto g = gets_.find(key);
    if (g == gets_.end()) continue;
    PendingGet& pg = *g->second;
    for (size_t i = 0; i < pg.ids.size() && pg.remaining > 0; ++i) {
      if (pg.ids[i] != id || pg.locs[i].found()) continue;
      if (pg.wait_only) {
        pg.locs[i] = fb::ObjectLocation(0, 0, 0, true);
        pg.remaining--;
      } else if (std::optional<fb::ObjectLocation> loc = acquire(pg.client, id)) {
        pg.locs[i] = *loc;
        pg.remaining--;
      }
    }
    if (pg.remaining == 0) {
      done.push_back(std::move(g->second));
      gets_.erase(g);
    }
  }
  return done;
}

std::vector<std::unique_ptr<PendingGet>> GetWaiters::Expire(Clock::time_point now) {
  std::vector<std::unique_ptr<PendingGet>> done;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    uint64_t key = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = gets_.find(key);
    if (it == gets_.end()) continue;
    done.push_back(std::move(it->second));
    gets_.erase(it);
  }
  return done;
}

void GetWaiters::ClientGone(ClientID client) {
  for (auto g = gets_.begin(); g != gets_.end();) {
    g = g->second->client == client ? gets_.erase(g) : std::next(g);
  }
}

void GetWaiters::Clear() {
  gets_.clear();
  waiting_on_.clear();
  deadlines_.clear();
}

std::optional<GetWaiters::Clock::time_point> GetWaiters::NextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

}  // namespace rayfield
