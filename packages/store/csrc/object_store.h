// The object table of a node: create/seal/get/release/delete of immutable
// objects in the arena, per-client reference counts and LRU eviction.
//
// Pure state: no sockets and no locking (the node event loop serialises
// calls). Events (sealed, deleted) accumulate for the caller to take out.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <unordered_set>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "common.h"

namespace rayfield {

using ClientID = uint64_t;

enum class ObjectState : uint8_t { Created = 0, Sealed = 1 };

struct ObjectEntry {
  UniqueID id;
  uint64_t offset = 0;
  uint64_t data_size = 0;
  uint64_t metadata_size = 0;
  ObjectState state = ObjectState::Created;
  ClientID creator = 0;
  uint32_t ref_count = 0;  // the creator holds one while unsealed
  std::unordered_map<ClientID, uint32_t> refs;  // client -> references held
  bool delete_pending = false;
  uint64_t create_time_ms = 0;
  bool in_lru = false;
  std::list<UniqueID>::iterator lru_pos;
};

struct StoreEvent {
  enum Kind : uint8_t { Sealed = 0, Deleted = 1 } kind;
  UniqueID id;
  uint64_t data_size, metadata_size;
};

struct StoreStats {
  uint64_t capacity_bytes, used_bytes, num_objects, num_evictions, evicted_bytes;
};

class ObjectStore {
 public:
  explicit ObjectStore(uint64_t capacity);

  // Reserves space (evicting unreferenced sealed objects in LRU order when
  // needed). On success *offset is where the data starts.
  Status Create(ClientID client, const UniqueID& id, uint64_t data_size, uint64_t metadata_size,
                uint64_t* offset);
  Status Seal(ClientID client, const UniqueID& id);
  Status Abort(ClientID client, const UniqueID& id);
  // Adds a reference for `client` when the object is sealed; else nullptr.
  const ObjectEntry* Acquire(ClientID client, const UniqueID& id);
  Status Release(ClientID client, const UniqueID& id);
  // Adds a reference for `client`; for an object not created yet, the
  // reference is applied at its creation (a pending pin).
  void Pin(ClientID client, const UniqueID& id);
  const ObjectEntry* Find(const UniqueID& id) const;
  bool IsSealed(const UniqueID& id) const;
  // True if deleted now; otherwise deleted when its last reference goes.
  bool Delete(const UniqueID& id);
  // Drops every reference of a client and aborts what it left unsealed.
  void ClientGone(ClientID client);

  std::vector<const ObjectEntry*> List() const;
  StoreStats Stats() const;
  std::vector<StoreEvent> TakeEvents();
  // True if the object was evicted (recently: the last kEvictedMemory evictions).
  bool WasEvicted(const UniqueID& id) const { return evicted_.count(id) > 0; }
  static constexpr size_t kEvictedMemory = 100000;
  bool HasEvents() const { return !events_.empty(); }

 private:
  std::optional<uint64_t> AllocateEvicting(uint64_t size);
  void Remove(std::unordered_map<UniqueID, ObjectEntry, UniqueIDHash>::iterator it, bool evicted);
  void LruAdd(ObjectEntry& e);
  void LruDrop(ObjectEntry& e);

  Allocator allocator_;
  std::unordered_map<UniqueID, ObjectEntry, UniqueIDHash> objects_;
  std::unordered_map<UniqueID, std::unordered_map<ClientID, uint32_t>, UniqueIDHash> pending_pins_;
  std::list<UniqueID> lru_;  // sealed, unreferenced; front = least recently used
  std::vector<StoreEvent> events_;
  std::unordered_set<UniqueID, UniqueIDHash> evicted_;
  std::deque<UniqueID> evicted_order_;
  uint64_t num_evictions_ = 0, evicted_bytes_ = 0;
};

}  // namespace rayfield
