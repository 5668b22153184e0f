// The node's task and actor manager: a pure state machine (events in, decisions out).
//
// No sockets, threads or clocks here. It owns the local Scheduler and the records the
// node keeps beside it: every submitted task that has not finished (its return ids for
// error objects, the pins it holds, retries left, the worker running it, the tasks it
// submitted), the actors hosted here (creation spec for restarts, owner driver, worker),
// actors known to be dead or to live on other nodes, actor calls held for forwarding,
// and the count of handles that keep each actor alive.
//
// The node event loop feeds it what happened (task submitted, worker registered, task
// done, client gone, object sealed or deleted, cancel, kill) and executes what it takes
// out of TakeDecisions() in order: dispatch a task to a worker, store an error object,
// drop the node's pins, kill or interrupt a worker process, or tell the host process
// (a NodeEvent). Unit tests drive it through the Python binding
// `rayfield.store._native.TaskManagerState` (tests/unit/test_task_manager.py).
//
// Semantics:
// * A task whose worker dies is submitted again while it has retries left (plain tasks);
//   otherwise its returns become error objects: CANCELLED (it was cancelled), the host's
//   tag (KillWorker), ACTOR_DIED (actor calls) or WORKER_DIED.
// * An actor whose worker dies is created again while it has restarts left; otherwise it
//   is dead for good (ActorDied) and its queued and later calls fail with ACTOR_DIED.
// * An actor whose creation cannot be placed (FailPlacement) is dead for good: its
//   creation and its queued and later calls fail with ACTOR_UNSCHEDULABLE.
// * A driver's non-detached actors end when the driver disconnects (OwnerDied for those
//   that moved to other nodes).
// * Cancel: a queued task fails with CANCELLED at once; a running plain task is
//   interrupted (or, with force, its worker killed); recursive cancel follows the tasks
//   it submitted (CancelElsewhere for those no longer here).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "common.h"
#include "node_events.h"
#include "scheduler.h"

namespace rayfield {

// ---- decisions for the node ----
// Send the task to the worker (a connected client); `retries_left` travels with it.
struct DispatchToWorker {
  WorkerID worker;
  std::shared_ptr<const TaskSpec> spec;
  std::vector<ResourceGrant> instances;
  int32_t retries_left = 0;
};
// Store an error object (message as data, tag as metadata) unless the object exists.
struct StoreErrorObject {
  UniqueID object_id;
  std::string tag, message;
};
// Drop the node's own pins on these objects (a task's arguments).
struct ReleaseNodePins {
  std::vector<UniqueID> object_ids;
};
// SIGKILL the worker's process (an in-process worker: shut its connection down).
struct KillWorkerProcess {
  WorkerID worker;
};
// SIGINT the main thread of the worker's process (cancel of a running task).
struct InterruptWorkerProcess {
  WorkerID worker;
};
using TaskDecision = std::variant<DispatchToWorker, StoreErrorObject, ReleaseNodePins,
                                  KillWorkerProcess, InterruptWorkerProcess, NodeEvent>;

// A submitted task with what the node keeps for it beside its spec.
struct Submission {
  TaskSpec spec;  // return_ids, pins, max_retries, detached and actor_handles filled in
  std::vector<UniqueID> missing;  // dependencies not local now
  ClientID parent_worker = 0;     // the worker that submitted it (0: a driver or tool)
  ClientID owner = 0;             // actor creation: the driver it fate-shares with (0: none)
};

// A task removed to run elsewhere (TakeTask).
struct TakenTask {
  TaskSpec spec;                     // return_ids and max_retries (retries left) filled in
  std::vector<UniqueID> kept_pins;     // the node's pins the caller must now hold
  std::vector<UniqueID> kept_handles;  // actor handles moved to the caller
};

// A task running on a worker now.
struct RunningTask {
  WorkerID worker;
  UniqueID task_id;
  bool retriable;  // a worker death resubmits it
  bool actor_task;
  uint64_t dispatch_seq;  // larger: dispatched more recently
};

class TaskManager {
 public:
  // `is_local`: whether an object is sealed in the node's store (dependencies of a task
  // submitted again). `node_name` appears in error messages.
  TaskManager(ResourceSet total, std::function<bool(const UniqueID&)> is_local,
              std::string node_name);
  ~TaskManager();
  TaskManager(const TaskManager&) = delete;
  TaskManager& operator=(const TaskManager&) = delete;

  // ---- inputs ----
  void Submit(Submission s);
  // `runtime_env`: the worker runs only tasks of that runtime_env ("": the default).
  void WorkerRegistered(WorkerID worker, int pid, const std::string& runtime_env = "");
  // A worker reported the end of a run (`retry`: an exception its retry_exceptions allow;
  // `exiting`: the worker leaves after this task).
  void TaskDone(WorkerID worker, const UniqueID& task_id, bool retry, bool exiting);
  void SetWorkerBlocked(WorkerID worker, bool blocked);
  // A connection closed: its actor handles drop, a worker's tasks are lost, a driver's
  // non-detached actors end.
  void ClientGone(ClientID client, bool worker, bool driver, int pid);
  void ObjectAvailable(const UniqueID& object_id);
  // An object left the store: the actor handles inside it drop.
  void ObjectDeleted(const UniqueID& object_id);
  // A client holds (`add`) or dropped handles; with `object_id`, handles inside that
  // object (held until ObjectDeleted). `scoped`: actors that end with their last handle.
  void ActorHandles(ClientID client, const std::vector<UniqueID>& actor_ids, bool add,
                    bool scoped, const std::optional<UniqueID>& object_id);
  // The host kills this worker (KillWorker): its tasks fail with `tag` and `message`
  // (those with retries left are retried when `retry`).
  void SetKillReason(WorkerID worker, const std::string& tag, const std::string& message,
                     bool retry = true);
  // "done" (not here), "queued" (failed with CANCELLED), "running" (interrupted, killed
  // with force, or an actor call left running); with `query`: "cancelled" or "running".
  std::string CancelTask(const UniqueID& task_id, bool force, bool recursive, bool query);
  // Error ObjectNotFound: no such actor here (and none dead).
  Status KillActor(const UniqueID& actor_id, bool no_restart);
  // Fails every queued (not running) task whose id starts with `prefix`; how many.
  int CancelJob(const std::string& prefix, const std::string& reason);
  // "ended", "held" (a handle is held here: nothing done), "elsewhere", "unknown".
  std::string EndActor(const UniqueID& actor_id, const std::string& reason);
  // Removes a task so it can run on another node (see NodeServer::TakeTask). With
  // `keeper` (a connected client), the task's pins and actor handles move to it.
  std::optional<TakenTask> TakeTask(const UniqueID& task_id, ClientID keeper);
  // A task held for placement (TaskPlacement) is queued here: false if no such task.
  bool PlaceHere(const UniqueID& task_id);
  // A task held for placement fails with `message` (a plain task's returns become
  // UNSCHEDULABLE error objects; an actor is dead for good and its creation and calls
  // fail with ACTOR_UNSCHEDULABLE): false if no such task.
  bool FailPlacement(const UniqueID& task_id, const std::string& message);
  void SetTotalResources(ResourceSet total);

  // ---- outputs ----
  // What to do, in order. With `scheduler`, the scheduler's decisions too (dispatches,
  // and what a lost worker leads to), until it has none left.
  std::vector<TaskDecision> TakeDecisions(bool scheduler = true);

  // ---- introspection ----
  std::vector<bool> ActorsHeld(const std::vector<UniqueID>& actor_ids) const;
  std::vector<RunningTask> RunningTasks() const;
  int WorkerPid(WorkerID worker) const;  // 0: unknown
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  // A submitted task that has not finished: pins to drop, objects to fail.
  struct TaskRecord {
    std::vector<UniqueID> return_ids, pins;
    int32_t retries_left = 0;
    bool actor_task = false;
    UniqueID actor_id;
    WorkerID worker = 0;        // set while running
    uint64_t dispatch_seq = 0;  // order of the last dispatch
    bool cancelled = false;
    std::unique_ptr<TaskSpec> retry_spec;  // kept only when a retry is possible
    std::vector<UniqueID> children;        // tasks it submitted while running
    std::vector<UniqueID> held_actors;     // handles counted until it finishes
  };
  struct ActorRecord {
    std::unique_ptr<TaskSpec> creation;  // submitted again on restart
    int32_t restarts_left = 0;
    WorkerID worker = 0;
    ClientID owner = 0;      // the driver it fate-shares with (0: none, e.g. detached)
    std::string end_reason;  // why it is being ended for good, when the node ends it
    bool unschedulable = false;  // its creation could not be placed: it never ran
  };
  // An actor dead for good: the tag and message of the error objects of its calls.
  struct DeadActor {
    std::string tag, why;
  };

  void Emit(TaskDecision d) { out_.push_back(std::move(d)); }
  void Tell(NodeEvent e) { out_.emplace_back(std::move(e)); }
  void DrainScheduler();
  void FinishTask(const UniqueID& task_id);
  void FailTask(const UniqueID& task_id, const std::string& tag, const std::string& message);
  void EndRun(const UniqueID& task_id, bool retry);
  bool RetryTask(const UniqueID& task_id, const std::string& why);
  void HandleWorkerLost(const WorkerLost& lost);
  void ActorGone(const UniqueID& actor_id);
  void OwnerGone(ClientID client, int pid);
  void HoldActor(const UniqueID& actor_id);
  void DropActor(const UniqueID& actor_id);
  void HoldForElsewhere(TaskSpec spec);
  std::vector<UniqueID> Missing(const std::vector<UniqueID>& dependencies) const;

  Scheduler scheduler_;
  std::function<bool(const UniqueID&)> is_local_;
  std::string node_name_;
  std::vector<TaskDecision> out_;

  std::unordered_map<UniqueID, TaskRecord, UniqueIDHash> tasks_;
  // The plain task each worker runs now: the parent of the tasks that worker submits.
  std::unordered_map<WorkerID, UniqueID> running_plain_;
  std::unordered_map<UniqueID, ActorRecord, UniqueIDHash> actors_;
  std::unordered_map<UniqueID, DeadActor, UniqueIDHash> dead_actors_;
  std::unordered_set<UniqueID, UniqueIDHash> remote_actors_;  // created on other nodes
  // Actors a driver of this node created that moved to other nodes: id -> that driver.
  std::unordered_map<UniqueID, ClientID, UniqueIDHash> remote_owned_;
  std::unordered_map<UniqueID, TaskSpec, UniqueIDHash> elsewhere_;  // calls to forward
  // Handle counts per actor (clients, unfinished tasks, objects), the handles of each
  // client and inside each object, and the actors that end when no handle remains.
  std::unordered_map<UniqueID, int64_t, UniqueIDHash> actor_holds_;
  std::unordered_map<ClientID, std::unordered_map<UniqueID, int, UniqueIDHash>> client_handles_;
  std::unordered_map<UniqueID, std::vector<UniqueID>, UniqueIDHash> object_handles_;
  std::unordered_set<UniqueID, UniqueIDHash> scoped_actors_;
  std::unordered_set<WorkerID> workers_;        // registered and connected
  std::unordered_map<WorkerID, int> worker_pids_;  // kept until their loss is handled
  // Workers the host killed (SetKillReason): the error tag and message for their tasks.
  struct KillReason {
    std::string tag, message;
    bool retry = true;  // false: its tasks fail even with retries left
  };
  std::unordered_map<WorkerID, KillReason> kill_reasons_;
  uint64_t dispatch_count_ = 0;
};

}  // namespace rayfield
