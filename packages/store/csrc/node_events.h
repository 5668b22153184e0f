// What the node tells its host process (Python): the events NodeServer queues for
// WaitEvents(). The scheduler's NeedWorker, TaskInfeasible, MissingDependencies and
// WorkerLost decisions reach the host as events too. Python sees each as a typed
// tuple (rayfield.store._native.pyi: NodeEvent).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "common.h"
#include "scheduler.h"

namespace rayfield {

// A client waits for an object this node has never seen.
struct ObjectMissing {
  UniqueID object_id;
  ClientID client;
};
struct ClientDisconnected {
  ClientID client;
  int pid;
  bool driver;  // a driver's connection (not a worker's)
};
struct WorkerRegistered {
  ClientID client;
  int pid;
};
struct StoreFullEvent {
  uint64_t requested_bytes, capacity_bytes, used_bytes;
};
// An actor call for an actor that lives on another node (or that this node has never
// seen): the host takes it with TakeTask and forwards it.
struct ActorTaskElsewhere {
  UniqueID task_id, actor_id;
};
// An actor hosted here is dead for good (no restart left, killed, or it exited): the host
// records it (a cluster frees its name).
struct ActorDied {
  UniqueID actor_id;
  std::string reason;
};
// A driver that created actors disconnected: its non-detached actors hosted here are being
// killed; `elsewhere` lists those that were moved to other nodes, for the host to kill.
struct OwnerDied {
  ClientID client;
  int pid;
  std::vector<UniqueID> elsewhere;
};
// The node's count of handles to an actor went 0 -> 1 (`held`) or 1 -> 0: handles of its
// clients, of tasks not finished (their arguments, a call's own actor) and of objects in
// its store. `scoped`: the actor was created here and ends when no handle remains in
// the cluster (the host decides; see core's actor_scope.py).
struct ActorHandlesChanged {
  UniqueID actor_id;
  bool held;
  bool scoped;
};
// An actor hosted here finished its creation (`alive`: its constructor ran, first or
// after a restart) or lost its worker and is being created again (`alive` false): the
// host keeps the GCS actor table current.
struct ActorStateChanged {
  UniqueID actor_id;
  bool alive;
};
// A recursive cancel reached tasks the cancelled one submitted that this node no longer
// holds (forwarded to other nodes, or finished): the host cancels them where it sent them.
struct CancelElsewhere {
  std::vector<UniqueID> task_ids;
  bool force;
};
// A plain task or an actor creation submitted with a scheduling strategy (see node.fbs):
// it is held until the host places it here (PlaceTask), takes it to forward it (TakeTask)
// or fails it (FailPlacement).
struct TaskPlacement {
  UniqueID task_id;
  std::string scheduling;
  ResourceSet demand;
  bool actor_creation;
};
using NodeEvent = std::variant<ObjectMissing, ClientDisconnected, WorkerRegistered, StoreFullEvent, NeedWorker,
                               TaskInfeasible, MissingDependencies, WorkerLost, ActorTaskElsewhere,
                               ActorDied, OwnerDied, ActorHandlesChanged, ActorStateChanged,
                               CancelElsewhere, TaskPlacement>;

}  // namespace rayfield
