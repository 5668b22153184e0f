#include "object_store.h"

#include <algorithm>
#include <chrono>

namespace rayfield {

namespace {
uint64_t NowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}
std::string Short(const UniqueID& id) { return id.Hex().substr(0, 16); }
}  // namespace

ObjectStore::ObjectStore(uint64_t capacity) : allocator_(capacity) {}

void ObjectStore::LruAdd(ObjectEntry& e) {
  if (e.in_lru) return;
  e.lru_pos = lru_.insert(lru_.end(), e.id);
  e.in_lru = true;
  room_generation_++;
}

void ObjectStore::LruDrop(ObjectEntry& e) {
  if (!e.in_lru) return;
  lru_.erase(e.lru_pos);
  e.in_lru = false;
}

void ObjectStore::SpillableDrop(ObjectEntry& e) {
  if (!e.spillable) return;
  spillable_.erase(e.seal_seq);
  e.spillable = false;
}

void ObjectStore::Classify(ObjectEntry& e) {
  bool sealed = e.state == ObjectState::Sealed;
  if (sealed && e.ref_count == 0 && !e.delete_pending) {
    LruAdd(e);  // at the back if new: most recently used, evicted last
  } else {
    LruDrop(e);
  }
  if (sealed && !e.spilled && e.ref_count > 0 && e.buffer_count == 0) {
    if (!e.spillable) {
      spillable_.emplace(e.seal_seq, e.id);
      e.spillable = true;
      room_generation_++;
    }
  } else {
    SpillableDrop(e);
  }
}

void ObjectStore::FreeSpace(uint64_t offset) {
  allocator_.Free(offset);
  room_generation_++;
}

std::optional<uint64_t> ObjectStore::AllocateEvicting(uint64_t size) {
  while (true) {
    if (auto off = allocator_.Allocate(size)) return off;
    if (lru_.empty()) return std::nullopt;
    auto it = objects_.find(lru_.front());
    Remove(it, /*evicted=*/true);  // a spilled one frees no arena space, only its file
  }
}

Status ObjectStore::Create(ClientID client, const UniqueID& id, uint64_t data_size,
                           uint64_t metadata_size, uint64_t* offset) {
  if (objects_.count(id)) {
    return Status::Error(Code::ObjectExists, "object " + Short(id) + " already exists");
  }
  uint64_t total = data_size + metadata_size;
  if (total < data_size || total > allocator_.capacity()) {
    Status s = Status::Error(Code::TooLarge, "object " + Short(id) + " of " +
                                                 std::to_string(total) +
                                                 " bytes is larger than the store's capacity of " +
                                                 std::to_string(allocator_.capacity()) + " bytes");
    s.requested_bytes = total;
    s.capacity_bytes = allocator_.capacity();
    s.used_bytes = allocator_.used();
    return s;
  }
  auto off = AllocateEvicting(total);
  if (!off) {
    Status s = Status::Error(
        Code::StoreFull,
        "object store full: " + std::to_string(total) + " bytes requested, " +
            std::to_string(allocator_.used()) + " of " + std::to_string(allocator_.capacity()) +
            " bytes in use by referenced or unsealed objects, largest free block " +
            std::to_string(allocator_.largest_free()) +
            " bytes; release references or raise object_store_memory");
    s.requested_bytes = total;
    s.capacity_bytes = allocator_.capacity();
    s.used_bytes = allocator_.used();
    return s;
  }
  if (evicted_.erase(id)) {  // created again (a retry): no longer lost
    evicted_order_.erase(std::find(evicted_order_.begin(), evicted_order_.end(), id));
  }
  ObjectEntry& e = objects_[id];
  e.id = id;
  e.offset = *off;
  e.data_size = data_size;
  e.metadata_size = metadata_size;
  e.creator = client;
  e.ref_count = 1;  // the creator's buffer, until seal or abort
  e.buffer_count = 1;
  e.refs[client].buffers = 1;
  auto pending = pending_pins_.find(id);
  if (pending != pending_pins_.end()) {
    for (const auto& [holder, n] : pending->second) {
      e.refs[holder].pins += n;
      e.ref_count += n;
    }
    pending_pins_.erase(pending);
  }
  e.create_time_ms = NowMs();
  *offset = *off;
  return Status::OK();
}

Status ObjectStore::Seal(ClientID client, const UniqueID& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    return Status::Error(Code::ObjectNotFound, "cannot seal unknown object " + Short(id));
  }
  ObjectEntry& e = it->second;
  if (e.state == ObjectState::Sealed) {
    return Status::Error(Code::ObjectAlreadySealed, "object " + Short(id) + " is already sealed");
  }
  if (e.creator != client) {
    return Status::Error(Code::NotOwner, "only the creator may seal object " + Short(id));
  }
  e.state = ObjectState::Sealed;
  e.seal_seq = next_seal_seq_++;
  auto creator_ref = e.refs.find(client);
  if (creator_ref != e.refs.end() && creator_ref->second.buffers > 0) {
    // sealing ends the creator's reference
    if (--creator_ref->second.buffers == 0 && creator_ref->second.pins == 0) {
      e.refs.erase(creator_ref);
    }
    e.ref_count--;
    e.buffer_count--;
  }
  events_.push_back({StoreEvent::Sealed, id, e.data_size, e.metadata_size});
  if (e.ref_count == 0 && e.delete_pending) {
    Remove(it, false);
  } else {
    Classify(e);
  }
  return Status::OK();
}

Status ObjectStore::Abort(ClientID client, const UniqueID& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    return Status::Error(Code::ObjectNotFound, "cannot abort unknown object " + Short(id));
  }
  if (it->second.state == ObjectState::Sealed) {
    return Status::Error(Code::ObjectAlreadySealed,
                         "object " + Short(id) + " is sealed and cannot be aborted");
  }
  if (it->second.creator != client) {
    return Status::Error(Code::NotOwner, "only the creator may abort object " + Short(id));
  }
  FreeSpace(it->second.offset);
  objects_.erase(it);
  return Status::OK();
}

const ObjectEntry* ObjectStore::Acquire(ClientID client, const UniqueID& id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.state != ObjectState::Sealed || it->second.spilled) {
    return nullptr;
  }
  ObjectEntry& e = it->second;
  e.ref_count++;
  e.buffer_count++;
  e.refs[client].buffers++;
  Classify(e);
  return &e;
}

void ObjectStore::Pin(ClientID client, const UniqueID& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    pending_pins_[id][client]++;
    return;
  }
  ObjectEntry& e = it->second;
  e.ref_count++;
  e.refs[client].pins++;
  Classify(e);
}

Status ObjectStore::Release(ClientID client, const UniqueID& id) { return Drop(client, id, false); }

Status ObjectStore::Unpin(ClientID client, const UniqueID& id) { return Drop(client, id, true); }

Status ObjectStore::Drop(ClientID client, const UniqueID& id, bool pin) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    auto pending = pending_pins_.find(id);
    if (pending != pending_pins_.end()) {
      auto holder = pending->second.find(client);
      if (holder != pending->second.end()) {
        if (--holder->second == 0) pending->second.erase(holder);
        if (pending->second.empty()) pending_pins_.erase(pending);
        return Status::OK();
      }
    }
    return Status::Error(Code::ObjectNotFound, "release of unknown object " + Short(id));
  }
  ObjectEntry& e = it->second;
  auto r = e.refs.find(client);
  if (r == e.refs.end()) {
    return Status::Error(Code::InvalidRequest,
                         "release of object " + Short(id) + " that this client does not hold");
  }
  // The kind asked for, else the other: a client that does not say (an older one)
  // still balances its counts.
  bool take_pin = pin ? r->second.pins > 0 : r->second.buffers == 0;
  if (take_pin) {
    r->second.pins--;
  } else {
    r->second.buffers--;
    e.buffer_count--;
  }
  if (r->second.pins == 0 && r->second.buffers == 0) e.refs.erase(r);
  if (--e.ref_count == 0 && e.state == ObjectState::Sealed && e.delete_pending) {
    Remove(it, false);
  } else {
    Classify(e);
  }
  return Status::OK();
}

const ObjectEntry* ObjectStore::Find(const UniqueID& id) const {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
}

bool ObjectStore::IsSealed(const UniqueID& id) const {
  auto it = objects_.find(id);
  return it != objects_.end() && it->second.state == ObjectState::Sealed;
}

bool ObjectStore::IsSpilled(const UniqueID& id) const {
  auto it = objects_.find(id);
  return it != objects_.end() && it->second.spilled;
}

const ObjectEntry* ObjectStore::SpillCandidate() const {
  if (spillable_.empty()) return nullptr;
  return &objects_.at(spillable_.begin()->second);
}

void ObjectStore::MarkSpilled(const UniqueID& id, uint64_t key) {
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.spillable) return;
  ObjectEntry& e = it->second;
  SpillableDrop(e);
  FreeSpace(e.offset);
  e.spilled = true;
  e.spill_key = key;
  num_spilled_++;
  spilled_bytes_ += e.data_size + e.metadata_size;
  Classify(e);
}

std::optional<uint64_t> ObjectStore::ReserveRestore(const UniqueID& id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.spilled) return std::nullopt;
  ObjectEntry& e = it->second;
  LruDrop(e);  // an unreferenced spilled object must not evict itself
  auto off = AllocateEvicting(e.data_size + e.metadata_size);
  if (!off) Classify(e);
  return off;
}

void ObjectStore::FinishRestore(const UniqueID& id, uint64_t offset, bool ok) {
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.spilled) return;
  ObjectEntry& e = it->second;
  if (ok) {
    e.offset = offset;
    e.spilled = false;
    num_spilled_--;
    spilled_bytes_ -= e.data_size + e.metadata_size;
    num_restored_++;
  } else {
    FreeSpace(offset);
  }
  Classify(e);
}

void ObjectStore::DropSpilled(const UniqueID& id) {
  auto it = objects_.find(id);
  if (it != objects_.end() && it->second.spilled) Remove(it, /*evicted=*/true);
}

bool ObjectStore::Delete(const UniqueID& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    // Freed before any copy came here (a result made on another node and never read
    // here): reported as a deletion of no bytes, so the node can tell the maker, unless
    // a client here still pins it ahead of its arrival.
    if (!pending_pins_.count(id)) events_.push_back({StoreEvent::Deleted, id, 0, 0, 0, false});
    return false;
  }
  if (it->second.ref_count == 0 && it->second.state == ObjectState::Sealed) {
    Remove(it, false);
    return true;
  }
  it->second.delete_pending = true;
  return false;
}

void ObjectStore::Remove(Table::iterator it, bool evicted) {
  ObjectEntry& e = it->second;
  LruDrop(e);
  SpillableDrop(e);
  if (e.spilled) {
    num_spilled_--;
    spilled_bytes_ -= e.data_size + e.metadata_size;
  } else {
    FreeSpace(e.offset);
  }
  if (evicted) {
    num_evictions_++;
    evicted_bytes_ += e.data_size + e.metadata_size;
    if (evicted_.insert(e.id).second) evicted_order_.push_back(e.id);
    if (evicted_order_.size() > kEvictedMemory) {
      evicted_.erase(evicted_order_.front());
      evicted_order_.pop_front();
    }
  }
  events_.push_back({StoreEvent::Deleted, e.id, e.data_size, e.metadata_size, e.spill_key, evicted});
  objects_.erase(it);
}

void ObjectStore::ClientGone(ClientID client) {
  std::vector<std::pair<UniqueID, Holds>> released;
  std::vector<UniqueID> aborted;
  for (auto& [id, e] : objects_) {
    auto r = e.refs.find(client);
    if (r != e.refs.end()) released.emplace_back(id, r->second);
    if (e.state == ObjectState::Created && e.creator == client) aborted.push_back(id);
  }
  for (auto p = pending_pins_.begin(); p != pending_pins_.end();) {
    p->second.erase(client);
    p = p->second.empty() ? pending_pins_.erase(p) : std::next(p);
  }
  for (const auto& [id, holds] : released) {
    for (uint32_t i = 0; i < holds.pins; ++i) Drop(client, id, true);
    for (uint32_t i = 0; i < holds.buffers; ++i) Drop(client, id, false);
  }
  for (const auto& id : aborted) Abort(client, id);
}

std::vector<const ObjectEntry*> ObjectStore::List() const {
  std::vector<const ObjectEntry*> out;
  out.reserve(objects_.size());
  for (const auto& kv : objects_) out.push_back(&kv.second);
  return out;
}

StoreStats ObjectStore::Stats() const {
  return {allocator_.capacity(), allocator_.used(), objects_.size(), num_evictions_,
          evicted_bytes_,         num_spilled_,      spilled_bytes_,  num_restored_};
}

std::vector<StoreEvent> ObjectStore::TakeEvents() {
  std::vector<StoreEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace rayfield
