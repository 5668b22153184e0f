// The local scheduler: a pure state machine (events in, decisions out).
//
// No sockets, threads or clocks here. The node event loop feeds it inputs
// (task submitted, object sealed, worker registered/finished/blocked/gone)
// and executes the decisions it takes out (dispatch a task to a worker, ask
// the host process for a worker, report an infeasible task, ask for missing
// objects). Unit tests drive it directly through the Python binding
// `rayfield.store._native.SchedulerState`.
//
// Semantics:
// * Resources are fixed point (common.h, kResourceUnit = 1.0). Instanced
//   resources (GPU) are tracked per device index so tasks learn their ids.
// * A task is ready when all its dependencies are local. Ready tasks wait in
//   one FIFO queue per resource shape; dispatch takes the oldest head among
//   the shapes that fit now, so a big shape never blocks a small one.
// * Resources are acquired at dispatch and released when the task finishes
//   (actor creation: when the actor's worker goes away).
// * A worker blocked in get lends its CPU back until it unblocks.
// * Actor tasks run on the worker bound by the actor's creation task, in
//   per-caller sequence order, at most max_concurrency at a time.
// * A task whose demand exceeds the node's totals is held as infeasible with
//   a reason, never dropped; it is re-examined when the totals change.
// * Every task and worker has a runtime_env (a string, "" the default one): a task
//   runs only on a worker of its own runtime_env, and NeedWorker says which one lacks
//   workers (one decision per runtime_env).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common.h"

namespace rayfield {

// name -> fixed-point amount. Entries with amount 0 are omitted.
using ResourceSet = std::map<std::string, int64_t>;

// Human-readable form, e.g. "{CPU: 1, GPU: 0.5}".
std::string FormatResources(const ResourceSet& r);

// Resource names tracked per instance (device index).
bool IsInstancedResource(const std::string& name);

using WorkerID = uint64_t;

struct TaskSpec {
  UniqueID task_id;
  ResourceSet resources;
  std::vector<UniqueID> dependencies;
  UniqueID actor_id;  // nil for a plain task
  bool actor_creation = false;
  uint32_t max_concurrency = 1;  // actor creation only
  UniqueID caller_id;            // actor tasks: the submitting handle
  uint64_t sequence_no = 0;      // actor tasks: order per caller, from 0
  std::string payload;           // opaque, handed to the worker
  // Used by the node, not by the scheduler:
  std::vector<UniqueID> return_ids;  // error objects go here if the worker dies
  int32_t max_retries = 0;           // after a worker death; -1: unlimited
  std::vector<UniqueID> pins;        // kept alive until the task finishes
  bool pin_returns = false;          // the submitter holds its returns from the start
  bool resume_sequence = false;      // a caller first seen here starts at this sequence_no
  bool detached = false;             // actor creation: does not fate-share with its driver
  uint32_t attempt = 0;              // earlier runs (retries) or starts (actor restarts)
  std::vector<UniqueID> actor_handles;  // actors whose handles are in its arguments
  std::string scheduling;  // a strategy its host places ("": queue here); see node.fbs
  std::string runtime_env;  // runs only on a worker of this runtime_env ("": the default)
};

struct ResourceGrant {
  std::string name;
  uint32_t index;
  int64_t amount;
};

// ---- decisions ----
struct DispatchTask {
  WorkerID worker;
  std::shared_ptr<const TaskSpec> spec;
  std::vector<ResourceGrant> instances;  // instanced resources given to the task
};
struct NeedWorker {
  ResourceSet shape;   // shape of the oldest ready task lacking a worker
  size_t num_waiting;  // ready tasks that fit now but lack an idle worker
  std::string runtime_env;  // the runtime_env of those tasks and of the workers to start
};
struct TaskInfeasible {
  UniqueID task_id;
  ResourceSet demand;
  std::string reason;
};
struct MissingDependencies {
  UniqueID task_id;
  std::vector<UniqueID> object_ids;  // not local: the host should fetch them
};
struct WorkerLost {
  WorkerID worker;
  std::vector<UniqueID> running_tasks;  // dispatched and not finished
  UniqueID actor_id;                    // nil unless the worker hosted an actor
};
using Decision = std::variant<DispatchTask, NeedWorker, TaskInfeasible, MissingDependencies, WorkerLost>;

enum class WorkerState { Idle, Busy, Blocked, Actor };

// A task whose dependencies are local and that waits for resources (or a worker).
struct ReadyTask {
  UniqueID task_id;
  ResourceSet demand;
  bool actor_creation = false;
};

struct SchedulerSnapshot {
  ResourceSet total, available;
  std::vector<std::pair<ResourceSet, size_t>> ready_by_shape;  // queued ready tasks
  // The oldest few ready tasks of each shape (kSnapshotReadyPerShape), oldest first per
  // shape: what a cluster agent may move to a node with free resources.
  std::vector<ReadyTask> ready_tasks;
  size_t waiting_for_dependencies = 0;  // plain and actor tasks, not infeasible
  size_t actor_tasks_queued = 0;        // actor tasks waiting for their actor
  std::vector<TaskInfeasible> infeasible;
  std::map<WorkerID, WorkerState> workers;
  size_t running = 0;
  std::vector<int64_t> gpu_used;  // plain GPU in use per device index
};

inline constexpr size_t kSnapshotReadyPerShape = 16;

// What one worker holds now: its running tasks' acquisitions and, for an actor's worker,
// the actor's lifetime resources, summed.
struct WorkerHolding {
  WorkerID worker;
  UniqueID actor_id;  // nil: no actor
  ResourceSet held;
};

class Scheduler {
 public:
  explicit Scheduler(ResourceSet total);
  ~Scheduler();

  // ---- inputs ----
  // `missing` lists the dependencies that are not local now.
  void SubmitTask(TaskSpec spec, const std::vector<UniqueID>& missing);
  void ObjectAvailable(const UniqueID& object_id);
  // A worker that runs only tasks of `runtime_env`.
  void AddWorker(WorkerID worker, const std::string& runtime_env = "");
  // Emits WorkerLost; releases what the worker held.
  void RemoveWorker(WorkerID worker);
  // `leaving`: the worker exits after this task; it takes no new task (the caller
  // removes it next).
  void TaskFinished(WorkerID worker, const UniqueID& task_id, bool leaving = false);
  void SetWorkerBlocked(WorkerID worker, bool blocked);
  void SetTotalResources(ResourceSet total);
  // Removes a task that is queued, waiting or infeasible (not running), e.g.
  // to forward it to another node or to cancel it.
  std::optional<TaskSpec> TakeTask(const UniqueID& task_id);

  // ---- outputs ----
  std::vector<Decision> TakeDecisions();

  // ---- introspection ----
  // Whether a task here waits for `object_id` (a dependency that is not local yet).
  bool Awaits(const UniqueID& object_id) const;
  const ResourceSet& total() const;
  const ResourceSet& available() const;
  SchedulerSnapshot Snapshot() const;
  // Every worker that holds resources or hosts an actor (see WorkerHolding).
  std::vector<WorkerHolding> Holdings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rayfield
