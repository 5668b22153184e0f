// The object table of a node: create/seal/get/release/delete of immutable
// objects in the arena, per-client reference counts, LRU eviction and the
// bookkeeping of spilling (which objects may go to disk, which are there).
//
// Pure state: no sockets, no file I/O and no locking (the node event loop
// serialises calls and does the spill I/O). Events (sealed, deleted)
// accumulate for the caller to take out.
//
// References come in two kinds. A buffer reference stands for a mapping a
// client reads or writes (get, and the creator's until seal); a pin only keeps
// the object alive (PinRequest, pinned task returns). A sealed object held by
// pins alone may be spilled: its data moves to a spill file and its arena
// space is freed; a get restores it first.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <unordered_set>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "common.h"

namespace rayfield {

enum class ObjectState : uint8_t { Created = 0, Sealed = 1 };

struct Holds {
  uint32_t pins = 0, buffers = 0;
};

struct ObjectEntry {
  UniqueID id;
  uint64_t offset = 0;  // meaningless while spilled
  uint64_t data_size = 0;
  uint64_t metadata_size = 0;
  ObjectState state = ObjectState::Created;
  ClientID creator = 0;
  uint32_t ref_count = 0;     // pins + buffers; the creator holds a buffer while unsealed
  uint32_t buffer_count = 0;  // references of mapped buffers
  std::unordered_map<ClientID, Holds> refs;
  bool delete_pending = false;
  uint64_t create_time_ms = 0;
  uint64_t seal_seq = 0;   // order of sealing: spill victims are the oldest
  bool spilled = false;    // the data is only in spill file `spill_key`
  uint64_t spill_key = 0;  // a file holding a copy of the data (0: none)
  bool in_lru = false;
  std::list<UniqueID>::iterator lru_pos;
  bool spillable = false;  // in spillable_
};

struct StoreEvent {
  enum Kind : uint8_t { Sealed = 0, Deleted = 1 } kind;
  UniqueID id;
  uint64_t data_size, metadata_size;
  uint64_t spill_key = 0;  // Deleted: the spill file to remove (0: none)
  bool evicted = false;    // Deleted: dropped to make room (or its spill file lost), not deleted by a client
};

struct StoreStats {
  uint64_t capacity_bytes, used_bytes, num_objects, num_evictions, evicted_bytes;
  uint64_t num_spilled, spilled_bytes, num_restored;
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
  // Adds a buffer reference for `client` when the object is sealed and in
  // the arena (not spilled); else nullptr.
  const ObjectEntry* Acquire(ClientID client, const UniqueID& id);
  // Drops a buffer reference (a pin if the client holds no buffer of it).
  Status Release(ClientID client, const UniqueID& id);
  // Adds a pin for `client`; for an object not created yet, the pin is
  // applied at its creation (a pending pin).
  void Pin(ClientID client, const UniqueID& id);
  // Drops a pin (a buffer reference if the client holds no pin of it).
  Status Unpin(ClientID client, const UniqueID& id);
  const ObjectEntry* Find(const UniqueID& id) const;
  // Sealed, in the arena or spilled.
  bool IsSealed(const UniqueID& id) const;
  bool IsSpilled(const UniqueID& id) const;

  // ---- spilling (the caller does the file I/O) ----
  // The oldest sealed object in the arena held by pins only; nullptr if none.
  const ObjectEntry* SpillCandidate() const;
  // The candidate's data is safe in spill file `key` (or already was, when it
  // has one): frees its arena space.
  void MarkSpilled(const UniqueID& id, uint64_t key);
  // Reserves arena space for a spilled object's data, evicting like Create.
  // nullopt when it does not fit now (the caller spills others and retries).
  std::optional<uint64_t> ReserveRestore(const UniqueID& id);
  // The data was read into the reserved space at `offset`; ok=false gives it back.
  void FinishRestore(const UniqueID& id, uint64_t offset, bool ok);
  // Drops a spilled object that cannot be restored; a later get answers "lost".
  void DropSpilled(const UniqueID& id);
  // Grows whenever arena space is freed or an object becomes evictable or
  // spillable: a reason to retry a restore.
  uint64_t room_generation() const { return room_generation_; }
  // True if deleted now; otherwise deleted when its last reference goes. An id not
  // here (and pinned by no client) is reported deleted with no bytes.
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
  using Table = std::unordered_map<UniqueID, ObjectEntry, UniqueIDHash>;
  std::optional<uint64_t> AllocateEvicting(uint64_t size);
  void FreeSpace(uint64_t offset);
  void Remove(Table::iterator it, bool evicted);
  // Drops one reference of `client`, a pin or a buffer as asked (else the other kind).
  Status Drop(ClientID client, const UniqueID& id, bool pin);
  // Puts the object in the LRU list and the spillable set as its state says.
  void Classify(ObjectEntry& e);
  void LruAdd(ObjectEntry& e);
  void LruDrop(ObjectEntry& e);
  void SpillableDrop(ObjectEntry& e);

  Allocator allocator_;
  Table objects_;
  std::unordered_map<UniqueID, std::unordered_map<ClientID, uint32_t>, UniqueIDHash> pending_pins_;
  std::list<UniqueID> lru_;  // sealed, unreferenced; front = least recently used
  std::map<uint64_t, UniqueID> spillable_;  // by seal_seq: in the arena, pins only
  uint64_t next_seal_seq_ = 1, room_generation_ = 0;
  uint64_t num_spilled_ = 0, spilled_bytes_ = 0, num_restored_ = 0;
  std::vector<StoreEvent> events_;
  std::unordered_set<UniqueID, UniqueIDHash> evicted_;
  std::deque<UniqueID> evicted_order_;
  uint64_t num_evictions_ = 0, evicted_bytes_ = 0;
};

}  // namespace rayfield
