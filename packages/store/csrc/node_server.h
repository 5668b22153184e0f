// The node event loop: a native thread (outside the GIL) that serves drivers
// and workers on a Unix socket, backed by the object store and the local
// scheduler.
//
// One epoll loop reads length-prefixed frames, verifies them, applies each
// message to the object store or the scheduler, and writes batched replies.
// A misbehaving client (bad frame, wrong protocol version, never reads) gets
// an error reply or a closed connection and a log line; the others keep
// being served. What the host process (Python) must act on is queued as
// NodeEvent and taken with WaitEvents().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "arena.h"
#include "common.h"
#include "object_store.h"
#include "protocol.h"
#include "scheduler.h"
#include "spill.h"

namespace rayfield {

struct NodeOptions {
  std::string socket_path;
  ArenaOptions arena;
  ResourceSet resources;
  UniqueID node_id;
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  // A client whose unread replies exceed this is disconnected.
  uint64_t max_pending_output_bytes = 256ull << 20;
  // How long the loop polls without sleeping after serving a request.
  std::chrono::microseconds spin{200};
  // Where objects held only by pins are spilled when the store is full;
  // empty: no spilling (a full store answers StoreFull).
  std::string spill_directory;
};

// ---- events for the host process ----
struct ObjectMissing {
  UniqueID object_id;  // a client waits for an object this node has never seen
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
using NodeEvent = std::variant<ObjectMissing, ClientDisconnected, WorkerRegistered, StoreFullEvent, NeedWorker,
                               TaskInfeasible, MissingDependencies, WorkerLost, ActorTaskElsewhere,
                               ActorDied, OwnerDied, ActorHandlesChanged, ActorStateChanged,
                               CancelElsewhere>;

// A task running on one of the node's workers (for the host's memory monitor).
struct RunningTaskInfo {
  int pid;
  UniqueID task_id;
  bool retriable;       // a worker death resubmits it (retries left)
  bool actor_task;      // an actor creation or call
  uint64_t dispatch_seq;  // larger: dispatched more recently
};

struct ObjectInfoCopy {
  UniqueID id;
  uint64_t data_size, metadata_size;
  ObjectState state;
  uint32_t ref_count;
  uint64_t create_time_ms;
  int owner_pid;         // the process that created it (0: gone or unknown)
  uint32_t pin_count;    // pins (the node's own holds, e.g. task returns kept for owners)
  uint32_t buffer_count; // mapped buffers of clients
  bool spilled;          // its data is only in a spill file
};

class NodeServer {
 public:
  explicit NodeServer(NodeOptions options);
  ~NodeServer();
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  Status Start();
  void Stop();
  bool running() const { return running_.load(); }
  const NodeOptions& options() const { return options_; }

  // Host API; every call is thread-safe.
  // Waits up to timeout_ms (-1: forever) for events; empty after Stop().
  std::vector<NodeEvent> WaitEvents(int64_t timeout_ms);
  StoreStats Stats(uint64_t* num_clients);
  std::vector<ObjectInfoCopy> ListObjects();
  SchedulerSnapshot SchedulerState();
  // Removes a task so it can run on another node: a queued plain task, an actor
  // creation not placed yet (the actor then lives elsewhere: its calls queued here and
  // submitted later are held as ActorTaskElsewhere), or a held actor call. The spec
  // includes the return ids and retries the node recorded. Nothing for other tasks.
  // With `pin_for` (a connected client), the objects the node pinned for the task (its
  // arguments) stay pinned, by that client, and are listed in `kept_pins`: the task
  // will still read them, from another node.
  // The actor handles the task held (its arguments', a call's own actor) move to
  // `pin_for` too, listed in `kept_handles`.
  std::optional<TaskSpec> TakeTask(const UniqueID& task_id, ClientID pin_for = 0,
                                   std::vector<UniqueID>* kept_pins = nullptr,
                                   std::vector<UniqueID>* kept_handles = nullptr);
  // Whether this node holds a handle to each actor (see ActorHandlesChanged).
  std::vector<bool> ActorsHeld(const std::vector<UniqueID>& actor_ids);
  // Ends an actor no handle reaches any more, for good, with `reason` as its calls'
  // error: "ended" (it lived here), "held" (a handle appeared here meanwhile: nothing
  // done), "elsewhere" (it moved to another node: the host ends it there), "unknown".
  std::string EndActor(const UniqueID& actor_id, const std::string& reason);
  // Cancels every task queued here (not running) whose id starts with `prefix` (a
  // driver's job id: the driver exited): its returns become CANCELLED error objects.
  // Returns how many.
  int CancelJob(const std::string& prefix, const std::string& reason);
  void SetTotalResources(ResourceSet total);
  // The tasks running on workers now, with their worker's pid.
  std::vector<RunningTaskInfo> RunningTasks();
  // SIGKILLs the worker process `pid`. Its tasks that are not retried then fail with
  // error objects tagged `tag` (actor calls: ACTOR_DIED) whose text starts with
  // `message`. False when no connected worker has that pid.
  bool KillWorker(int pid, const std::string& tag, const std::string& message);

 private:
  struct Conn;
  struct PendingGet;
  using Clock = std::chrono::steady_clock;

  void Loop();
  void Accept();
  void OnReadable(Conn& c);
  void Flush(Conn& c);
  void FlushDirty();
  void Close(ClientID id, const std::string& reason);
  FrameWriter& Writer(Conn& c);
  bool HandleFrame(Conn& c, const fb::Frame* frame);
  bool HandleMessage(Conn& c, const fb::Message* m);
  bool HandleHello(Conn& c, uint64_t seq, const fb::Hello* h);
  void HandleCreate(Conn& c, uint64_t seq, const fb::CreateRequest* r);
  void HandlePut(Conn& c, uint64_t seq, const fb::PutRequest* r);
  void HandleGet(Conn& c, uint64_t seq, const fb::GetRequest* r);
  void HandleWait(Conn& c, uint64_t seq, const fb::WaitRequest* r);
  void Park(std::unique_ptr<PendingGet> g, int64_t timeout_ms);
  void FinishTask(const UniqueID& task_id);
  // A worker reported the end of a run: finish the task, fail it (cancelled meanwhile),
  // or run it again (`retry`: an exception its retry_exceptions allow).
  void EndRun(const UniqueID& task_id, bool retry);
  // `task_id` was submitted by worker `worker`: a child of the plain task it runs.
  void RecordChild(ClientID worker, const UniqueID& task_id);
  void HandleWorkerLost(const WorkerLost& lost);
  void ActorGone(const UniqueID& actor_id);
  void OwnerGone(ClientID client, int pid);
  void FailTask(const UniqueID& task_id, const std::string& tag, const std::string& message);
  Status KillActor(const UniqueID& actor_id, bool no_restart);
  static void EndWorkerProcess(const Conn& c);
  static void InterruptWorker(const Conn& c);
  std::string CancelTask(const UniqueID& task_id, bool force, bool recursive, bool query);
  // Submits a task again after its run failed (worker death or a retriable exception)
  // if it has retries left; false otherwise (nothing changed).
  bool RetryTask(const UniqueID& task_id, const std::string& why);
  void SealError(const UniqueID& id, const std::string& tag, const std::string& message);
  // Spilling (node_spill.cc).
  Status CreateObject(ClientID client, const UniqueID& id, uint64_t data_size,
                      uint64_t metadata_size, uint64_t* offset);
  Status SpillOldest(bool* spilled);
  bool Restore(const UniqueID& id);
  void RetryRestores();
  void HandleObjectQuery(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleSubmit(Conn& c, uint64_t seq, const fb::SubmitTaskRequest* r);
  void HandleActorHandles(Conn& c, const fb::ActorHandlesRequest* r);
  void HoldActor(const UniqueID& actor_id);
  void DropActor(const UniqueID& actor_id);
  bool HandleWorkerMessage(Conn& c, uint64_t seq, const fb::Message* m);
  void ReplyStatus(Conn& c, uint64_t seq, const Status& s);
  void ReplyGet(PendingGet& g);
  void CompleteWaiters(const UniqueID& id);
  void DrainStoreEvents();
  void DrainScheduler();
  void DrainDecisions(std::vector<Decision>& batch);
  void ExpireGets();
  int NextTimeoutMs();
  void PushEvent(NodeEvent e);

  NodeOptions options_;
  Arena arena_;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<SpillFiles> spill_;

  std::mutex mu_;  // guards everything below except the event queue
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  ClientID next_client_id_ = 1;
  std::unordered_map<ClientID, std::unique_ptr<Conn>> conns_;
  std::vector<ClientID> dirty_;
  uint64_t next_get_key_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<PendingGet>> gets_;
  std::unordered_map<UniqueID, std::vector<uint64_t>, UniqueIDHash> waiting_on_;
  std::multimap<Clock::time_point, uint64_t> deadlines_;
  // Spilled objects a parked get waits for, restored once space is freed.
  std::unordered_set<UniqueID, UniqueIDHash> restore_wanted_;
  uint64_t restore_generation_ = 0;  // the store's room_generation() at the last try
  std::string last_spill_error_;     // logged once until it changes
  // Submitted tasks that have not finished: pins to drop, objects to fail.
  struct TaskRecord {
    std::vector<UniqueID> return_ids, pins;
    int32_t retries_left = 0;
    bool actor_task = false;
    UniqueID actor_id;
    ClientID worker = 0;  // set while running
    uint64_t dispatch_seq = 0;  // order of the last dispatch
    bool cancelled = false;
    std::unique_ptr<TaskSpec> retry_spec;  // kept only when a retry is possible
    std::vector<UniqueID> children;  // tasks it submitted while running (recursive cancel)
    std::vector<UniqueID> held_actors;  // handles counted until it finishes
  };
  std::unordered_map<UniqueID, TaskRecord, UniqueIDHash> tasks_;
  // The plain task each worker runs now: the parent of the tasks that worker submits.
  std::unordered_map<ClientID, UniqueID> running_plain_;
  struct ActorRecord {
    std::unique_ptr<TaskSpec> creation;  // resubmitted on restart
    int32_t restarts_left = 0;
    ClientID worker = 0;
    ClientID owner = 0;  // the driver it fate-shares with (0: none, e.g. detached)
    std::string end_reason;  // why it is being ended for good, when the node ends it
  };
  std::unordered_map<UniqueID, ActorRecord, UniqueIDHash> actors_;
  std::unordered_map<UniqueID, std::string, UniqueIDHash> dead_actors_;  // id -> why
  std::unordered_set<UniqueID, UniqueIDHash> remote_actors_;  // created on other nodes
  // Actors a driver of this node created that moved to other nodes: id -> that driver.
  std::unordered_map<UniqueID, ClientID, UniqueIDHash> remote_owned_;
  std::unordered_map<UniqueID, TaskSpec, UniqueIDHash> elsewhere_;  // calls to forward
  void HoldForElsewhere(TaskSpec spec);
  // Handle counts per actor (clients, unfinished tasks, objects), the handles inside
  // objects (until the object is deleted), and the actors created here that end when no
  // handle remains.
  std::unordered_map<UniqueID, int64_t, UniqueIDHash> actor_holds_;
  std::unordered_map<UniqueID, std::vector<UniqueID>, UniqueIDHash> object_handles_;
  std::unordered_set<UniqueID, UniqueIDHash> scoped_actors_;
  std::unordered_map<ClientID, int> worker_pids_;  // for error messages after a worker is gone
  uint64_t dispatch_count_ = 0;
  // Workers the host killed (KillWorker): the error tag and message for their tasks.
  std::unordered_map<ClientID, std::pair<std::string, std::string>> kill_reasons_;
  static constexpr ClientID kNodeClient = 0;  // holder of the node's own pins

  std::mutex events_mu_;
  std::condition_variable events_cv_;
  std::deque<NodeEvent> events_;
};

}  // namespace rayfield
