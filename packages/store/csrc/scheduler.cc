// The local scheduler (see scheduler.h). Details the header leaves open:
// * A task is checked against the node's totals first; an infeasible one asks
//   for its missing dependencies only once it becomes feasible.
// * A ready task goes to the idle worker of its runtime_env with the lowest id; ready
//   tasks queue per (runtime_env, shape).
// * Actor tasks acquire their own demand (if any) per call, on top of what
//   the actor holds; their instances are reported in their dispatch.
// * An actor task taken away (TakeTask) does not hold later calls of its
//   caller; one whose sequence_no was passed already (a retry) may run at once.
// * Per-caller sequence state outlives the actor's worker, so a restarted
//   actor continues every caller's sequence.
// * NeedWorker is computed in TakeDecisions, and only after
//   an input left ready tasks that fit but no idle worker.
#include "scheduler.h"

#include <algorithm>
#include <utility>

#include "resources.h"

namespace rayfield {

namespace {

using TaskPtr = std::shared_ptr<const TaskSpec>;

enum class TaskState { Infeasible, WaitingDeps, Ready, ActorQueued };

// A submitted task that has not been dispatched yet.
struct PendingTask {
  TaskPtr spec;
  uint64_t order = 0;                   // submission order: FIFO across queues
  std::set<UniqueID> missing;           // dependencies not local yet
  std::vector<UniqueID> missing_order;  // the same, in the order given
  TaskState state = TaskState::WaitingDeps;
  bool deps_requested = false;  // MissingDependencies emitted
  std::string reason;           // when infeasible
};

struct QueuedRef {
  uint64_t order;
  UniqueID task_id;
};

struct RunningTask {
  TaskPtr spec;
  Acquisition held;  // empty for an actor creation task: the actor holds it
};

struct Worker {
  std::string env;  // the runtime_env it serves
  std::map<UniqueID, RunningTask> running;
  UniqueID actor_id;       // nil unless bound to an actor
  Acquisition actor_held;  // the actor's lifetime resources
  bool blocked = false;
};

// Actor tasks of one caller (handle), dispatched in sequence_no order.
struct CallerQueue {
  uint64_t next_seq = 0;
  std::multimap<uint64_t, UniqueID> queued;  // sequence_no -> task
  std::set<uint64_t> skipped;               // taken away before dispatch
};

struct Actor {
  bool bound = false;    // a worker hosts it
  bool created = false;  // its creation task finished on that worker
  WorkerID worker = 0;
  uint32_t max_concurrency = 1;
  size_t in_flight = 0;
  size_t queued = 0;
  std::map<UniqueID, CallerQueue> callers;
};

bool IsActorTask(const TaskSpec& spec) { return !spec.actor_id.IsNil() && !spec.actor_creation; }

void AdvanceSequence(CallerQueue& q) {
  ++q.next_seq;
  while (q.skipped.erase(q.next_seq)) ++q.next_seq;
}

}  // namespace

struct Scheduler::Impl {
  explicit Impl(ResourceSet total) : pool(std::move(total)) {}

  ResourcePool pool;
  std::unordered_map<UniqueID, PendingTask, UniqueIDHash> pending;
  // One FIFO per (runtime_env, shape).
  using ReadyKey = std::pair<std::string, ResourceSet>;
  std::map<ReadyKey, std::deque<QueuedRef>> ready;
  std::map<uint64_t, UniqueID> infeasible;             // by submission order
  std::unordered_map<UniqueID, std::vector<UniqueID>, UniqueIDHash> waiters;  // object -> tasks
  std::map<WorkerID, Worker> workers;
  std::map<std::string, std::set<WorkerID>> idle;  // per runtime_env; no empty sets
  std::unordered_map<UniqueID, WorkerID, UniqueIDHash> running_on;
  std::unordered_map<UniqueID, Actor, UniqueIDHash> actors;
  std::set<UniqueID> actors_with_work;  // actors with queued tasks
  std::vector<Decision> decisions;
  uint64_t next_order = 0;
  bool maybe_need_worker = false;

  // ---- routing of pending tasks ----
  void Place(PendingTask& t);
  void MarkInfeasible(PendingTask& t, std::string reason);
  void MakeReady(PendingTask& t);
  void EnqueueActorTask(PendingTask& t);
  void Unlink(PendingTask& t);
  void SkipSequence(const TaskSpec& spec);
  void ForgetWaiters(const PendingTask& t);
  void ReexamineFeasibility();
  PendingTask TakePending(const UniqueID& task_id);

  // ---- dispatch ----
  void Schedule();
  void DispatchReadyTasks();
  void DispatchActorTasks(Actor& a);
  const PendingTask* EligibleHead(const CallerQueue& q) const;
  std::map<ReadyKey, std::deque<QueuedRef>>::iterator PickReady();
  void MakeIdle(WorkerID w, const std::string& env) { idle[env].insert(w); }
  void ForgetIdle(WorkerID w, const std::string& env);
  std::map<std::string, size_t> CountDispatchable(std::map<std::string, ResourceSet>* first) const;
  void StartTask(WorkerID w, PendingTask t);
  void StartActorTask(WorkerID w, PendingTask t);
  static WorkerState StateOf(const Worker& w);
};

// ---------------------------------------------------------------------------
// Routing

// Routes a task held in `pending`: infeasible, waiting for dependencies,
// ready, or queued on its actor.
void Scheduler::Impl::Place(PendingTask& t) {
  std::string reason = pool.InfeasibleReason(t.spec->resources);
  if (!reason.empty()) {
    MarkInfeasible(t, std::move(reason));
    return;
  }
  if (!t.missing.empty() && !t.deps_requested) {
    t.deps_requested = true;
    MissingDependencies md{t.spec->task_id, {}};
    for (const UniqueID& id : t.missing_order) {
      if (t.missing.count(id)) md.object_ids.push_back(id);
    }
    decisions.push_back(std::move(md));
  }
  if (IsActorTask(*t.spec)) {
    EnqueueActorTask(t);
  } else if (t.missing.empty()) {
    MakeReady(t);
  } else {
    t.state = TaskState::WaitingDeps;
  }
}

void Scheduler::Impl::MarkInfeasible(PendingTask& t, std::string reason) {
  t.state = TaskState::Infeasible;
  t.reason = std::move(reason);
  infeasible.emplace(t.order, t.spec->task_id);
  decisions.push_back(TaskInfeasible{t.spec->task_id, t.spec->resources, t.reason});
}

void Scheduler::Impl::MakeReady(PendingTask& t) {
  t.state = TaskState::Ready;
  ready[{t.spec->runtime_env, t.spec->resources}].push_back({t.order, t.spec->task_id});
}

void Scheduler::Impl::EnqueueActorTask(PendingTask& t) {
  t.state = TaskState::ActorQueued;
  Actor& a = actors[t.spec->actor_id];
  auto [caller, fresh] = a.callers.try_emplace(t.spec->caller_id);
  // Calls forwarded from another node reach this one in order; a caller first seen here
  // then starts past 0 (its earlier calls ran where the actor lived before).
  if (fresh && t.spec->resume_sequence) caller->second.next_seq = t.spec->sequence_no;
  caller->second.queued.emplace(t.spec->sequence_no, t.spec->task_id);
  ++a.queued;
  actors_with_work.insert(t.spec->actor_id);
}

// Removes the task from the queue its state puts it in.
void Scheduler::Impl::Unlink(PendingTask& t) {
  const UniqueID& id = t.spec->task_id;
  if (t.state == TaskState::Infeasible) {
    infeasible.erase(t.order);
  } else if (t.state == TaskState::Ready) {
    auto it = ready.find({t.spec->runtime_env, t.spec->resources});
    auto& q = it->second;
    q.erase(std::find_if(q.begin(), q.end(), [&](const QueuedRef& r) { return r.task_id == id; }));
    if (q.empty()) ready.erase(it);
  } else if (t.state == TaskState::ActorQueued) {
    Actor& a = actors[t.spec->actor_id];
    auto& queued = a.callers[t.spec->caller_id].queued;
    auto range = queued.equal_range(t.spec->sequence_no);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second != id) continue;
      queued.erase(it);
      --a.queued;
      break;
    }
  }
  t.state = TaskState::WaitingDeps;
}

// An actor task taken away before dispatch must not hold later calls of its
// caller: its sequence number is passed over.
void Scheduler::Impl::SkipSequence(const TaskSpec& spec) {
  CallerQueue& q = actors[spec.actor_id].callers[spec.caller_id];
  if (spec.sequence_no == q.next_seq) {
    AdvanceSequence(q);
  } else if (spec.sequence_no > q.next_seq) {
    q.skipped.insert(spec.sequence_no);
  }
}

void Scheduler::Impl::ForgetWaiters(const PendingTask& t) {
  for (const UniqueID& object_id : t.missing) {
    auto it = waiters.find(object_id);
    if (it == waiters.end()) continue;
    auto& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), t.spec->task_id), ids.end());
    if (ids.empty()) waiters.erase(it);
  }
}

// After the totals changed: held tasks that no longer fit the node become
// infeasible, infeasible tasks that fit now are placed again.
void Scheduler::Impl::ReexamineFeasibility() {
  std::vector<std::pair<uint64_t, PendingTask*>> held;
  for (auto& [id, t] : pending) {
    if (t.state != TaskState::Infeasible) held.emplace_back(t.order, &t);
  }
  std::sort(held.begin(), held.end());
  for (auto& [order, t] : held) {
    std::string reason = pool.InfeasibleReason(t->spec->resources);
    if (reason.empty()) continue;
    Unlink(*t);
    MarkInfeasible(*t, std::move(reason));
  }
  for (auto it = infeasible.begin(); it != infeasible.end();) {
    PendingTask& t = pending.at(it->second);
    t.reason = pool.InfeasibleReason(t.spec->resources);
    if (!t.reason.empty()) {
      ++it;
      continue;
    }
    it = infeasible.erase(it);
    Place(t);
  }
}

PendingTask Scheduler::Impl::TakePending(const UniqueID& task_id) {
  auto it = pending.find(task_id);
  PendingTask t = std::move(it->second);
  pending.erase(it);
  return t;
}

// ---------------------------------------------------------------------------
// Dispatch

void Scheduler::Impl::Schedule() {
  for (auto it = actors_with_work.begin(); it != actors_with_work.end();) {
    Actor& a = actors[*it];
    if (a.bound && a.created) DispatchActorTasks(a);
    it = a.queued > 0 ? std::next(it) : actors_with_work.erase(it);
  }
  DispatchReadyTasks();
  maybe_need_worker = false;
  for (const auto& [key, queue] : ready) {
    if (!idle.count(key.first)) maybe_need_worker = true;
  }
}

// Oldest head among the queues that fit now and have an idle worker of their
// runtime_env, or ready.end().
std::map<Scheduler::Impl::ReadyKey, std::deque<QueuedRef>>::iterator Scheduler::Impl::PickReady() {
  auto best = ready.end();
  for (auto it = ready.begin(); it != ready.end(); ++it) {
    if (best != ready.end() && it->second.front().order > best->second.front().order) continue;
    if (idle.count(it->first.first) && pool.Fits(it->first.second)) best = it;
  }
  return best;
}

void Scheduler::Impl::ForgetIdle(WorkerID w, const std::string& env) {
  auto it = idle.find(env);
  if (it == idle.end()) return;
  it->second.erase(w);
  if (it->second.empty()) idle.erase(it);
}

void Scheduler::Impl::DispatchReadyTasks() {
  while (!idle.empty()) {
    auto it = PickReady();
    if (it == ready.end()) return;
    UniqueID task_id = it->second.front().task_id;
    std::string env = it->first.first;
    it->second.pop_front();
    if (it->second.empty()) ready.erase(it);
    WorkerID w = *idle.at(env).begin();
    ForgetIdle(w, env);
    StartTask(w, TakePending(task_id));
  }
}

// A plain task or an actor creation task onto an idle worker.
void Scheduler::Impl::StartTask(WorkerID w, PendingTask t) {
  Worker& worker = workers.at(w);
  const TaskSpec& spec = *t.spec;
  Acquisition held = pool.Acquire(spec.resources);
  std::vector<ResourceGrant> instances = held.instances;
  if (spec.actor_creation) {
    Actor& a = actors[spec.actor_id];
    if (a.bound) Log(2, "scheduler: actor " + spec.actor_id.Hex() + " created again while bound");
    a.bound = true;
    a.created = false;
    a.worker = w;
    a.max_concurrency = std::max<uint32_t>(1, spec.max_concurrency);
    a.in_flight = 0;
    worker.actor_id = spec.actor_id;
    worker.actor_held = std::move(held);
    held = Acquisition{};
  }
  running_on[spec.task_id] = w;
  worker.running.emplace(spec.task_id, RunningTask{t.spec, std::move(held)});
  decisions.push_back(DispatchTask{w, t.spec, std::move(instances)});
}

// The next call of a caller if it may start now: in sequence, its
// dependencies local and its own demand (if any) available.
const PendingTask* Scheduler::Impl::EligibleHead(const CallerQueue& q) const {
  if (q.queued.empty()) return nullptr;
  auto head = q.queued.begin();
  if (head->first > q.next_seq) return nullptr;
  const PendingTask& t = pending.at(head->second);
  if (!t.missing.empty() || !pool.Fits(t.spec->resources)) return nullptr;
  return &t;
}

void Scheduler::Impl::DispatchActorTasks(Actor& a) {
  while (a.in_flight < a.max_concurrency) {
    CallerQueue* best = nullptr;
    const PendingTask* best_task = nullptr;
    for (auto& [caller, q] : a.callers) {
      const PendingTask* t = EligibleHead(q);
      if (t && (!best_task || t->order < best_task->order)) {
        best = &q;
        best_task = t;
      }
    }
    if (!best) return;
    auto head = best->queued.begin();
    if (head->first == best->next_seq) AdvanceSequence(*best);
    UniqueID task_id = head->second;
    best->queued.erase(head);
    --a.queued;
    ++a.in_flight;
    StartActorTask(a.worker, TakePending(task_id));
  }
}

void Scheduler::Impl::StartActorTask(WorkerID w, PendingTask t) {
  Acquisition held = pool.Acquire(t.spec->resources);
  std::vector<ResourceGrant> instances = held.instances;
  running_on[t.spec->task_id] = w;
  workers.at(w).running.emplace(t.spec->task_id, RunningTask{t.spec, std::move(held)});
  decisions.push_back(DispatchTask{w, t.spec, std::move(instances)});
}

// How many ready tasks of each runtime_env that has no idle worker would start now if
// there were enough workers, taken in dispatch order; the first one's shape of each
// runtime_env goes to `first`.
std::map<std::string, size_t> Scheduler::Impl::CountDispatchable(
    std::map<std::string, ResourceSet>* first) const {
  struct Cursor {
    const ReadyKey* key;
    const std::deque<QueuedRef>* queue;
    size_t next;
  };
  std::vector<Cursor> cursors;
  for (const auto& [key, queue] : ready) {
    if (!idle.count(key.first)) cursors.push_back({&key, &queue, 0});
  }
  ResourcePool sim = pool;
  std::map<std::string, size_t> counts;
  for (;;) {
    Cursor* best = nullptr;
    for (Cursor& c : cursors) {
      if (c.next >= c.queue->size()) continue;
      if (best && (*c.queue)[c.next].order > (*best->queue)[best->next].order) continue;
      if (sim.Fits(c.key->second)) best = &c;
    }
    if (!best) return counts;
    sim.Acquire(best->key->second);
    if (counts[best->key->first]++ == 0) (*first)[best->key->first] = best->key->second;
    ++best->next;
  }
}

WorkerState Scheduler::Impl::StateOf(const Worker& w) {
  if (w.blocked) return WorkerState::Blocked;
  if (!w.actor_id.IsNil()) return WorkerState::Actor;
  return w.running.empty() ? WorkerState::Idle : WorkerState::Busy;
}

// ---------------------------------------------------------------------------
// Public interface

Scheduler::Scheduler(ResourceSet total) : impl_(std::make_unique<Impl>(std::move(total))) {}
Scheduler::~Scheduler() = default;

void Scheduler::SubmitTask(TaskSpec spec, const std::vector<UniqueID>& missing) {
  const UniqueID id = spec.task_id;
  if (impl_->pending.count(id) || impl_->running_on.count(id)) {
    Log(2, "scheduler: task " + id.Hex() + " submitted twice; ignored");
    return;
  }
  PendingTask t;
  t.spec = std::make_shared<const TaskSpec>(std::move(spec));
  t.order = impl_->next_order++;
  for (const UniqueID& object_id : missing) {
    if (!t.missing.insert(object_id).second) continue;
    t.missing_order.push_back(object_id);
    impl_->waiters[object_id].push_back(id);
  }
  PendingTask& held = impl_->pending[id] = std::move(t);
  impl_->Place(held);
  impl_->Schedule();
}

void Scheduler::ObjectAvailable(const UniqueID& object_id) {
  auto it = impl_->waiters.find(object_id);
  if (it == impl_->waiters.end()) return;
  std::vector<UniqueID> task_ids = std::move(it->second);
  impl_->waiters.erase(it);
  for (const UniqueID& id : task_ids) {
    auto t = impl_->pending.find(id);
    if (t == impl_->pending.end()) continue;
    t->second.missing.erase(object_id);
    if (t->second.missing.empty() && t->second.state == TaskState::WaitingDeps) impl_->MakeReady(t->second);
  }
  impl_->Schedule();
}

void Scheduler::AddWorker(WorkerID worker, const std::string& runtime_env) {
  Worker fresh;
  fresh.env = runtime_env;
  if (!impl_->workers.emplace(worker, std::move(fresh)).second) return;
  impl_->MakeIdle(worker, runtime_env);
  impl_->Schedule();
}

void Scheduler::RemoveWorker(WorkerID worker) {
  auto it = impl_->workers.find(worker);
  if (it == impl_->workers.end()) return;
  Worker w = std::move(it->second);
  impl_->workers.erase(it);
  impl_->ForgetIdle(worker, w.env);
  WorkerLost lost{worker, {}, w.actor_id};
  for (const auto& [task_id, task] : w.running) {
    lost.running_tasks.push_back(task_id);
    impl_->running_on.erase(task_id);
    impl_->pool.Release(task.held);
  }
  impl_->pool.Release(w.actor_held);
  if (!w.actor_id.IsNil()) {
    Actor& a = impl_->actors[w.actor_id];
    if (a.bound && a.worker == worker) {
      a.bound = a.created = false;
      a.in_flight = 0;
    }
  }
  impl_->decisions.push_back(std::move(lost));
  impl_->Schedule();
}

void Scheduler::TaskFinished(WorkerID worker, const UniqueID& task_id, bool leaving) {
  auto wit = impl_->workers.find(worker);
  if (wit == impl_->workers.end()) return;
  Worker& w = wit->second;
  auto rit = w.running.find(task_id);
  if (rit == w.running.end()) return;
  RunningTask task = std::move(rit->second);
  w.running.erase(rit);
  impl_->running_on.erase(task_id);
  impl_->pool.Release(task.held);
  if (!w.actor_id.IsNil()) {
    Actor& a = impl_->actors[w.actor_id];
    if (task.spec->actor_creation) {
      a.created = true;
    } else if (a.in_flight > 0) {
      --a.in_flight;
    }
  } else if (w.running.empty()) {
    w.blocked = false;
    if (!leaving) impl_->MakeIdle(worker, w.env);
  }
  impl_->Schedule();
}

void Scheduler::SetWorkerBlocked(WorkerID worker, bool blocked) {
  auto it = impl_->workers.find(worker);
  if (it == impl_->workers.end()) return;
  Worker& w = it->second;
  if (w.blocked == blocked || (blocked && Impl::StateOf(w) == WorkerState::Idle)) return;
  w.blocked = blocked;
  ResourcePool& pool = impl_->pool;
  for (auto& [task_id, task] : w.running) blocked ? pool.Lend(task.held) : pool.Reclaim(task.held);
  blocked ? pool.Lend(w.actor_held) : pool.Reclaim(w.actor_held);
  impl_->Schedule();
}

void Scheduler::SetTotalResources(ResourceSet total) {
  impl_->pool.SetTotal(std::move(total));
  impl_->ReexamineFeasibility();
  impl_->Schedule();
}

std::optional<TaskSpec> Scheduler::TakeTask(const UniqueID& task_id) {
  auto it = impl_->pending.find(task_id);
  if (it == impl_->pending.end()) return std::nullopt;
  PendingTask& t = it->second;
  impl_->Unlink(t);
  impl_->ForgetWaiters(t);
  if (IsActorTask(*t.spec)) impl_->SkipSequence(*t.spec);
  TaskSpec spec = *t.spec;
  impl_->pending.erase(it);
  impl_->Schedule();
  return spec;
}

std::vector<Decision> Scheduler::TakeDecisions() {
  if (impl_->maybe_need_worker) {
    impl_->maybe_need_worker = false;
    std::map<std::string, ResourceSet> shapes;
    for (auto& [env, count] : impl_->CountDispatchable(&shapes)) {
      impl_->decisions.push_back(NeedWorker{shapes[env], count, env});
    }
  }
  return std::exchange(impl_->decisions, {});
}

const ResourceSet& Scheduler::total() const { return impl_->pool.total(); }
const ResourceSet& Scheduler::available() const { return impl_->pool.available(); }

bool Scheduler::Awaits(const UniqueID& object_id) const {
  return impl_->waiters.count(object_id) > 0;
}

SchedulerSnapshot Scheduler::Snapshot() const {
  SchedulerSnapshot s;
  s.total = impl_->pool.total();
  s.available = impl_->pool.available();
  for (const auto& [key, queue] : impl_->ready) {
    const ResourceSet& shape = key.second;
    s.ready_by_shape.emplace_back(shape, queue.size());
    for (size_t i = 0; i < queue.size() && i < kSnapshotReadyPerShape; ++i) {
      const PendingTask& t = impl_->pending.at(queue[i].task_id);
      s.ready_tasks.push_back({queue[i].task_id, shape, t.spec->actor_creation});
    }
  }
  for (const auto& [id, t] : impl_->pending) {
    if (t.state != TaskState::Infeasible && !t.missing.empty()) ++s.waiting_for_dependencies;
    if (t.state == TaskState::ActorQueued) ++s.actor_tasks_queued;
  }
  for (const auto& [order, id] : impl_->infeasible) {
    const PendingTask& t = impl_->pending.at(id);
    s.infeasible.push_back({id, t.spec->resources, t.reason});
  }
  for (const auto& [id, w] : impl_->workers) s.workers.emplace(id, Impl::StateOf(w));
  s.running = impl_->running_on.size();
  s.gpu_used = impl_->pool.UsedPerDevice("GPU");
  return s;
}

std::vector<WorkerHolding> Scheduler::Holdings() const {
  std::vector<WorkerHolding> out;
  for (const auto& [id, w] : impl_->workers) {
    WorkerHolding h{id, w.actor_id, w.actor_held.amounts};
    for (const auto& [task_id, task] : w.running) {
      for (const auto& [name, amount] : task.held.amounts) h.held[name] += amount;
    }
    if (!h.held.empty() || !h.actor_id.IsNil()) out.push_back(std::move(h));
  }
  return out;
}

}  // namespace rayfield
