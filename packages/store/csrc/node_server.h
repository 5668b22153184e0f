// The node event loop: a native thread (outside the GIL) that serves drivers
// and workers on a Unix socket, backed by the object store and the task manager.
//
// One epoll loop reads length-prefixed frames, verifies them, hands each
// message to its request's handler, and writes batched replies. A misbehaving
// client (bad frame, wrong protocol version, never reads) gets an error reply
// or a closed connection and a log line; the others keep being served. What
// the host process (Python) must act on is queued as NodeEvent (node_events.h)
// and taken with WaitEvents().
//
// Its parts, one file each:
//   node_loop.cc      the loop, connections, framing, Hello
//   node_handlers.cc  one handler per request type, found in a table by body type
//   node_gets.cc      gets and waits parked until their objects arrive (GetWaiters)
//   node_effects.cc   store events, the task manager's decisions, host events
//   node_host.cc      the host API (thread-safe calls from Python)
//   node_spill.cc     spilling to files and restoring
// Task and actor records live in TaskManager (task_manager.h), a pure state
// machine around the Scheduler; everything here runs under one mutex.
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
#include "get_waiters.h"
#include "node_events.h"
#include "object_store.h"
#include "protocol.h"
#include "scheduler.h"

namespace rayfield {

class SpillFiles;
class TaskManager;
struct DispatchToWorker;

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

// A task running on one of the node's workers (for the host's memory monitor).
struct RunningTaskInfo {
  int pid;
  UniqueID task_id;
  bool retriable;       // a worker death resubmits it (retries left)
  bool actor_task;      // an actor creation or call
  uint64_t dispatch_seq;  // larger: dispatched more recently
};

struct WorkerHoldingInfo {
  int pid;
  UniqueID actor_id;  // nil: the worker hosts no actor
  ResourceSet held;   // its running tasks' and its actor's resources
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
  // Bytes of the arena the warmer has populated (ArenaWarmer; 0 when it is off).
  uint64_t warmed_bytes() { return warmer_.warmed(); }

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
  // A task held for placement (TaskPlacement event) is queued here (`fail_message`
  // empty) or fails with that message; false when no such task is held.
  bool PlaceTask(const UniqueID& task_id, const std::string& fail_message);
  // Whether this node holds a handle to each actor (see ActorHandlesChanged).
  std::vector<bool> ActorsHeld(const std::vector<UniqueID>& actor_ids);
  // Whether anything here still waits for each object: a client's get or wait, or a
  // queued task's dependency.
  std::vector<bool> Waited(const std::vector<UniqueID>& object_ids);
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
  // `retry` false: its tasks fail with (tag, message) even with retries left.
  bool KillWorker(int pid, const std::string& tag, const std::string& message, bool retry = true);
  // The workers that hold resources or host an actor, with what they hold.
  std::vector<WorkerHoldingInfo> WorkerHoldings();

 private:
  struct Conn;
  using Clock = std::chrono::steady_clock;
  // One request type's handler (node_handlers.cc); `worker_only`: only a registered
  // worker may send it.
  struct Route {
    void (NodeServer::*handle)(Conn& c, uint64_t seq, const fb::Message* m) = nullptr;
    bool worker_only = false;
  };
  static const Route* Routes();

  // The loop and its connections (node_loop.cc).
  void Loop();
  void Accept();
  void OnReadable(Conn& c);
  void Flush(Conn& c);
  void FlushDirty();
  void Close(ClientID id, const std::string& reason);
  FrameWriter& Writer(Conn& c);
  int NextTimeoutMs();
  bool HandleFrame(Conn& c, const fb::Frame* frame);
  bool HandleMessage(Conn& c, const fb::Message* m);
  bool HandleHello(Conn& c, uint64_t seq, const fb::Hello* h);
  void ReplyStatus(Conn& c, uint64_t seq, const Status& s);

  // One handler per request (node_handlers.cc).
  void HandleCreate(Conn& c, uint64_t seq, const fb::Message* m);
  void HandlePut(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleSeal(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleAbort(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleGet(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleWait(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleRelease(Conn& c, uint64_t seq, const fb::Message* m);
  void HandlePin(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleContains(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleDelete(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleList(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleSubscribe(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleStats(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleNodeState(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleSubmit(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleKillActor(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleCancelTask(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleActorHandles(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleRegisterWorker(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleTaskDone(Conn& c, uint64_t seq, const fb::Message* m);
  void HandleWorkerBlocked(Conn& c, uint64_t seq, const fb::Message* m);

  // Parked gets and waits (node_gets.cc).
  void Park(std::unique_ptr<PendingGet> g, int64_t timeout_ms);
  void ReplyGet(const PendingGet& g);
  void CompleteWaiters(const UniqueID& id);
  void ExpireGets();

  // Effects (node_effects.cc): store events, the task manager's decisions, host events.
  void DrainStoreEvents();
  // Executes the task manager's decisions; `scheduler`: the scheduler's too.
  void ApplyDecisions(bool scheduler);
  void Dispatch(const DispatchToWorker& d);
  void PushEvent(NodeEvent e);
  void SealError(const UniqueID& id, const std::string& tag, const std::string& message);
  static void EndWorkerProcess(const Conn& c);
  static void InterruptWorker(const Conn& c);

  // Spilling (node_spill.cc).
  Status CreateObject(ClientID client, const UniqueID& id, uint64_t data_size,
                      uint64_t metadata_size, uint64_t* offset);
  Status SpillOldest(bool* spilled);
  bool Restore(const UniqueID& id);
  void RetryRestores();

  NodeOptions options_;
  Arena arena_;
  ArenaWarmer warmer_;  // started after the arena, stopped before it is unmapped
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<TaskManager> tasks_;
  std::unique_ptr<SpillFiles> spill_;
  GetWaiters waiters_;

  std::mutex mu_;  // guards everything below except the event queue
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  ClientID next_client_id_ = 1;
  std::unordered_map<ClientID, std::unique_ptr<Conn>> conns_;
  std::vector<ClientID> dirty_;
  // Spilled objects a parked get waits for, restored once space is freed.
  std::unordered_set<UniqueID, UniqueIDHash> restore_wanted_;
  uint64_t restore_generation_ = 0;  // the store's room_generation() at the last try
  std::string last_spill_error_;     // logged once until it changes
  static constexpr ClientID kNodeClient = 0;  // holder of the node's own pins

  std::mutex events_mu_;
  std::condition_variable events_cv_;
  std::deque<NodeEvent> events_;
};

}  // namespace rayfield
