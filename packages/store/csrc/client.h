// A driver's or worker's connection to its node.
//
// Requests carry a sequence number and wait for the reply with the same
// number. Any number of threads may call at once: whichever thread waits
// reads the socket and hands replies to the others (leader/follower), so a
// single-threaded caller never pays a thread switch. Messages the node pushes
// (task dispatch, object notifications) are queued for NextTask and
// NextNotification.
//
// The connection (connect, handshake, framing, send/receive, the reading
// hand-off, the queues of pushed messages) is in client_conn.cc; the requests
// built on it (one function per request type) are in client_requests.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "protocol.h"
#include "scheduler.h"

namespace rayfield {

struct ObjectLoc {
  uint64_t offset = 0, data_size = 0, metadata_size = 0;
  bool found = false;
};

struct Notification {
  bool deleted;          // deleted or evicted (else sealed)
  bool evicted = false;  // dropped to make room, not deleted by a client
  UniqueID object_id;
  uint64_t data_size, metadata_size;
};

struct TaskAssignment {
  UniqueID task_id, actor_id;
  bool actor_creation = false;
  std::vector<ResourceGrant> instances;
  std::string payload;
  int32_t retries_left = 0;  // runs the node may still start after this one (-1: unlimited)
  uint32_t attempt = 0;      // earlier runs of the task (starts of the actor)
  ResourceSet resources;     // the task's demand
};

struct ObjectInfoData {
  UniqueID id;
  uint64_t data_size, metadata_size;
  uint8_t state;
  uint32_t ref_count;
  uint64_t create_time_ms;
};

class Client {
 public:
  Client() = default;
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Code Internal with message prefix "connection:" marks transport errors.
  Status Connect(const std::string& socket_path, uint8_t kind, const std::string& name,
                 int64_t timeout_ms);
  // Shuts the connection; the arena stays mapped until destruction.
  void Close();
  bool closed();

  uint8_t* base() const { return base_; }
  uint64_t arena_size() const { return arena_size_; }
  uint64_t client_id() const { return client_id_; }
  const UniqueID& node_id() const { return node_id_; }

  Status Create(const UniqueID& id, uint64_t data_size, uint64_t metadata_size, uint64_t* offset);
  Status Seal(const UniqueID& id);
  Status Abort(const UniqueID& id);
  Status Put(const UniqueID& id, const uint8_t* data, uint64_t size, const uint8_t* meta,
             uint64_t meta_size, bool wait_reply = true);
  Status Get(const std::vector<UniqueID>& ids, int64_t timeout_ms, std::vector<ObjectLoc>* out);
  // Drops buffer references (unpin: pins). No reply.
  Status Release(const std::vector<UniqueID>& ids, bool free = false, bool unpin = false);
  Status Pin(const std::vector<UniqueID>& ids);      // no reply
  Status Wait(const std::vector<UniqueID>& ids, uint32_t num_ready, int64_t timeout_ms,
              std::vector<bool>* ready);
  Status Contains(const std::vector<UniqueID>& ids, std::vector<bool>* out);
  Status Delete(const std::vector<UniqueID>& ids, std::vector<bool>* out);
  Status List(std::vector<ObjectInfoData>* out);
  // capacity, used, objects, evictions, evicted, clients, spilled, spilled bytes, restored
  Status Stats(std::vector<uint64_t>* out);
  Status Subscribe();
  Status NodeState(ResourceSet* total, ResourceSet* available);
  Status NextNotification(int64_t timeout_ms, std::optional<Notification>* out);

  Status SubmitTask(const TaskSpec& spec);  // no reply
  // Handles this client holds (add) or dropped; with `object_id`, handles inside that
  // object (held until the node deletes it); `scoped`: new actors that end with their
  // last handle. No reply.
  Status ActorHandles(const std::vector<UniqueID>& actor_ids, bool add,
                      const UniqueID* object_id = nullptr, bool scoped = false);
  // `runtime_env`: the worker runs only tasks of that runtime_env ("": the default).
  Status RegisterWorker(const UniqueID& worker_id, const std::string& runtime_env = "");
  // Tasks are taken in two steps so that a threaded actor's worker wakes as few threads as
  // it can. TryNextTask pops the oldest dispatched task without waiting (the Python layer
  // calls it with the GIL held, so a thread that finishes a call takes the next one with no
  // thread switch). WaitForTask sleeps until this thread is sent to take queued tasks
  // (reading the socket meanwhile if nobody else does) or timeout_ms (-1: forever) passes
  // (Code::Timeout); the thread must then call TryNextTask(after_wait=true) once.
  // At most one thread is on its way to the queue at a time: it is sent when tasks arrive
  // or when a pop leaves tasks behind, so a thread blocked in a call never keeps queued
  // calls from another thread, while cheap calls run one after the other on one thread.
  bool TryNextTask(std::optional<TaskAssignment>* out, bool after_wait);
  Status WaitForTask(int64_t timeout_ms);
  // A small result stored with TaskDone: PutRequests in the same frame, before it.
  struct InlineResult {
    UniqueID id;
    const uint8_t* data;
    uint64_t size;
    const uint8_t* metadata;
    uint64_t metadata_size;
  };
  // Reports a finished task, storing `results` first in the same frame (one send). No reply.
  // With `retry` the task raised an exception its retry_exceptions allow: run it again.
  Status TaskDone(const UniqueID& task_id, bool exiting = false,
                  const std::vector<InlineResult>& results = {}, bool retry = false);
  Status SetBlocked(bool blocked);           // no reply
  Status KillActor(const UniqueID& actor_id, bool no_restart);
  Status CancelTask(const UniqueID& task_id, bool force, bool recursive, bool query,
                    std::string* state);

 private:
  struct Reply {
    std::shared_ptr<std::string> frame;
    const fb::Message* message = nullptr;
  };
  uint64_t NextSeq();
  Status Send(FrameWriter& w);
  Status Call(FrameWriter& w, uint64_t seq, Reply* reply);
  // Waits until `ready()` holds (checked under mu_) or the deadline passes.
  // Threads waiting on the connection, by what they wait for: task waiters are woken one
  // at a time (see WaitForTask), the others (replies, notifications) all at once.
  struct Waiters {
    std::condition_variable cv;
    int count = 0;
  };
  template <typename Pred>
  Status WaitUntil(Pred ready, int64_t timeout_ms, Waiters& group);
  // With mu_ held and nobody reading: wake one waiter to take over the socket.
  void HandOff();
  void WakeAll();
  // `reader` is the group of the calling thread (nullptr: none): a task waiter that reads
  // goes to the tasks it finds itself, so no other waiter is woken.
  Status ReadOneFrame(int64_t timeout_ms, const Waiters* reader = nullptr);
  template <typename T>
  Status PopWhenReady(std::deque<T>& queue, int64_t timeout_ms, std::optional<T>* out,
                      Waiters& group);
  // Spins briefly for data; gives up early when `interrupted` (may be null) turns true.
  bool TryReceive(int* passed_fd, std::string* buf, const std::atomic<bool>* interrupted);
  static constexpr int kSpinMicros = 50;
  static constexpr int kHotSpinMicros = 300;
  std::chrono::steady_clock::time_point last_receive_{};
  void Populate(uint64_t offset, uint64_t size);
  static constexpr uint64_t kPopulateBytes = 256 << 10;
  std::mutex populate_mu_;
  std::vector<bool> populated_;  // 2 MiB chunks of the arena already mapped here
  Status StatusOf(const Reply& r, fb::Body expected);
  Status Handshake(uint8_t kind, const std::string& name, int64_t timeout_ms);

  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t arena_size_ = 0;
  uint64_t client_id_ = 0;
  UniqueID node_id_;

  std::mutex send_mu_;
  std::mutex mu_;
  Waiters reply_waiters_;
  Waiters task_waiters_;
  bool reading_ = false;
  const Waiters* reader_group_ = nullptr;  // the group of the thread reading, if any
  // Sends the reading thread to the task queue (it polls wake_fd_ too when a task waiter).
  void InterruptReader();
  void DrainWakeFd();
  int wake_fd_ = -1;
  // Tasks taken and not yet done, and tasks queued. While a task runs and others wait in
  // the queue, a task waiter reading the socket does not spin for the next message: the
  // running thread has work after its call, and the spin would take a core from it.
  std::atomic<int> running_tasks_{0};
  std::atomic<size_t> queued_tasks_{0};
  std::atomic<bool> reader_interrupted_{false};
  bool closed_ = false;
  std::string close_reason_;
  uint64_t next_seq_ = 1;
  std::unordered_map<uint64_t, Reply> replies_;
  std::deque<Notification> notifications_;
  std::deque<TaskAssignment> tasks_;
  // Task waiters sent to the queue (a WaitForTask returns for each) and threads that have
  // returned but not yet called TryNextTask: together, the threads on their way.
  int task_tokens_ = 0;
  int task_coming_ = 0;
  // With mu_ held: send one more task waiter if tasks are queued and none is on its way.
  void SendTaskWaiter(bool notify);
  std::string rbuf_;  // owned by the reading thread
  size_t rpos_ = 0;
  int received_fd_ = -1;
};

}  // namespace rayfield
