// Gets and waits in the node (see node_server.h, get_waiters.h): answered at once when
// their objects are here, otherwise parked until the objects are sealed (or restored
// from spill files) or the deadline passes.
#include <algorithm>

#include "node_conn.h"
#include "node_server.h"

namespace rayfield {

namespace {

fb::ObjectLocation Location(const ObjectEntry* e) {
  return fb::ObjectLocation(e->offset, e->data_size, e->metadata_size, true);
}

}  // namespace

void NodeServer::HandleGet(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::GetRequest* r = m->body_as_GetRequest();
  auto g = std::make_unique<PendingGet>();
  g->client = c.id;
  g->seq = seq;
  size_t n = r->object_ids() ? r->object_ids()->size() : 0;
  g->ids.reserve(n);
  g->locs.assign(n, fb::ObjectLocation());
  g->remaining = 0;
  for (size_t i = 0; i < n; ++i) {
    UniqueID id = FromFb(r->object_ids()->Get(i));
    g->ids.push_back(id);
    if (store_->IsSpilled(id)) Restore(id);
    if (const ObjectEntry* e = store_->Acquire(c.id, id)) {
      g->locs[i] = Location(e);
    } else {
      g->remaining++;
    }
  }
  if (g->remaining == 0 || r->timeout_ms() == 0) return ReplyGet(*g);
  Park(std::move(g), r->timeout_ms());
}

void NodeServer::HandleWait(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::WaitRequest* r = m->body_as_WaitRequest();
  auto g = std::make_unique<PendingGet>();
  g->client = c.id;
  g->seq = seq;
  g->wait_only = true;
  size_t n = r->object_ids() ? r->object_ids()->size() : 0, ready = 0;
  g->locs.assign(n, fb::ObjectLocation());
  for (size_t i = 0; i < n; ++i) {
    g->ids.push_back(FromFb(r->object_ids()->Get(i)));
    if (store_->IsSpilled(g->ids.back())) Restore(g->ids.back());  // best effort
    if (store_->IsSealed(g->ids.back())) {
      g->locs[i] = fb::ObjectLocation(0, 0, 0, true);
      ready++;
    }
  }
  size_t needed = std::min<size_t>(r->num_ready(), n);
  if (ready >= needed || r->timeout_ms() == 0) return ReplyGet(*g);
  g->remaining = needed - ready;
  Park(std::move(g), r->timeout_ms());
}

// Registers a get or wait that cannot be answered yet: it completes when its objects are
// sealed (or restored from spill files, once space is freed) or at its deadline. Evicted
// objects nobody can rebuild are answered with an error object at once, never left to hang;
// objects this node has never seen are reported to the host (ObjectMissing).
void NodeServer::Park(std::unique_ptr<PendingGet> g, int64_t timeout_ms) {
  std::vector<UniqueID> lost;
  for (size_t i = 0; i < g->ids.size(); ++i) {
    if (g->locs[i].found()) continue;
    if (store_->WasEvicted(g->ids[i])) {
      lost.push_back(g->ids[i]);
    } else if (store_->IsSpilled(g->ids[i])) {
      restore_wanted_.insert(g->ids[i]);
    } else if (store_->Find(g->ids[i]) == nullptr) {
      PushEvent(ObjectMissing{g->ids[i], g->client});
    }
  }
  std::optional<Clock::time_point> deadline;
  if (timeout_ms > 0) deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  waiters_.Park(std::move(g), deadline);
  for (const auto& id : lost) {
    SealError(id, "LOST", "object " + id.Hex() + " was evicted from the store of node " +
                              options_.socket_path + " and cannot be rebuilt");
  }
}

void NodeServer::ReplyGet(const PendingGet& g) {
  auto it = conns_.find(g.client);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  auto& b = Writer(c).builder();
  if (g.wait_only) {
    std::vector<uint8_t> ready;
    for (const auto& l : g.locs) ready.push_back(l.found());
    Writer(c).Add(g.seq, fb::CreateWaitReply(b, b.CreateVector(ready)));
    return;
  }
  auto vec = b.CreateVectorOfStructs(g.locs);
  Writer(c).Add(g.seq, fb::CreateGetReply(b, vec));
}

void NodeServer::CompleteWaiters(const UniqueID& id) {
  auto acquire = [this](ClientID client, const UniqueID& oid) -> std::optional<fb::ObjectLocation> {
    const ObjectEntry* e = store_->Acquire(client, oid);
    if (e == nullptr) return std::nullopt;
    return Location(e);
  };
  for (const auto& g : waiters_.Available(id, acquire)) ReplyGet(*g);
}

void NodeServer::ExpireGets() {
  for (const auto& g : waiters_.Expire(Clock::now())) ReplyGet(*g);
}

}  // namespace rayfield
