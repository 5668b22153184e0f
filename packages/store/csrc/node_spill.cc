// Spilling in the node (see node_server.h, spill.h): a create that does not fit
// after LRU eviction spills the oldest objects held only by pins to files; a
// get, wait or contains of a spilled object restores it into the arena first.
//
// The I/O runs on the event loop thread, synchronously: one gathered write per
// object straight from the arena, one read back into it. Objects are
// immutable, so a restored object keeps its file and spilling it again frees
// its space without writing.
#include "node_conn.h"
#include "node_server.h"

namespace rayfield {

Status NodeServer::CreateObject(ClientID client, const UniqueID& id, uint64_t data_size,
                                uint64_t metadata_size, uint64_t* offset) {
  Status s = store_->Create(client, id, data_size, metadata_size, offset);
  while (s.code == Code::StoreFull && spill_ && spill_->enabled()) {
    bool spilled = false;
    Status w = SpillOldest(&spilled);
    if (!w.ok()) {
      s.message = "object store full and spilling failed: " + w.message + " (" + s.message + ")";
      break;
    }
    if (!spilled) {
      s.message += " (nothing can be spilled: every object left is mapped by a reader or unsealed)";
      break;
    }
    s = store_->Create(client, id, data_size, metadata_size, offset);
  }
  if (s.code == Code::StoreFull) {
    PushEvent(StoreFullEvent{s.requested_bytes, s.capacity_bytes, s.used_bytes});
  }
  if (s.ok()) warmer_.Allocated(*offset + data_size + metadata_size, data_size + metadata_size);
  return s;
}

// Spills the oldest object held only by pins. *spilled=false: there is none.
Status NodeServer::SpillOldest(bool* spilled) {
  *spilled = false;
  const ObjectEntry* e = store_->SpillCandidate();
  if (e == nullptr) return Status::OK();
  UniqueID id = e->id;
  uint64_t key = e->spill_key;  // restored before: its file is still valid
  if (key == 0) {
    Status s = spill_->Write(id, arena_.base() + e->offset, e->data_size, e->metadata_size, &key);
    if (!s.ok()) {
      if (s.message != last_spill_error_) Log(3, "spilling failed: " + s.message);
      last_spill_error_ = s.message;
      return s;
    }
  }
  store_->MarkSpilled(id, key);
  *spilled = true;
  return Status::OK();
}

// Brings a spilled object back into the arena, spilling others if needed, and
// completes the gets parked on it. False if it does not fit now: it stays
// spilled and is retried when space is freed. An unreadable file turns the
// object into a LOST error object.
bool NodeServer::Restore(const UniqueID& id) {
  const ObjectEntry* e = store_->Find(id);
  if (e == nullptr) return false;
  if (!e->spilled) return true;
  std::optional<uint64_t> off = store_->ReserveRestore(id);
  while (!off) {
    bool spilled = false;
    if (!SpillOldest(&spilled).ok() || !spilled) return false;
    off = store_->ReserveRestore(id);
  }
  e = store_->Find(id);
  Status s = spill_->Read(e->spill_key, id, arena_.base() + *off, e->data_size, e->metadata_size);
  store_->FinishRestore(id, *off, s.ok());
  if (!s.ok()) {
    Log(3, "cannot restore object " + id.Hex() + ": " + s.message);
    store_->DropSpilled(id);
    SealError(id, "LOST",
              "object " + id.Hex() + " was spilled to disk and cannot be restored: " + s.message);
    return store_->IsSealed(id);
  }
  CompleteWaiters(id);
  return true;
}

void NodeServer::RetryRestores() {
  if (restore_wanted_.empty() || store_->room_generation() == restore_generation_) return;
  restore_generation_ = store_->room_generation();
  std::vector<UniqueID> ids(restore_wanted_.begin(), restore_wanted_.end());
  for (const UniqueID& id : ids) {
    if (!waiters_.Waited(id)) {
      restore_wanted_.erase(id);  // its gets expired or went away
    } else if (!store_->IsSpilled(id) || Restore(id)) {
      restore_wanted_.erase(id);
      CompleteWaiters(id);
    }
  }
}

}  // namespace rayfield
