// The node's task and actor manager (see task_manager.h): task records with pins,
// retries and error objects for lost work, actor restarts and deaths, actor handle
// counts, kill and cancel (interrupt, force, recursive), job cancel, and tasks taken to
// run on other nodes.
#include "task_manager.h"

#include <cstring>

namespace rayfield {

TaskManager::TaskManager(ResourceSet total, std::function<bool(const UniqueID&)> is_local,
                         std::string node_name)
    : scheduler_(std::move(total)), is_local_(std::move(is_local)), node_name_(std::move(node_name)) {}

TaskManager::~TaskManager() = default;

std::vector<UniqueID> TaskManager::Missing(const std::vector<UniqueID>& dependencies) const {
  std::vector<UniqueID> missing;
  for (const auto& d : dependencies) {
    if (!is_local_(d)) missing.push_back(d);
  }
  return missing;
}

// ---- submit, run, finish ----------------------------------------------------------------

void TaskManager::Submit(Submission s) {
  TaskSpec& spec = s.spec;
  TaskRecord rec;
  rec.return_ids = std::move(spec.return_ids);
  rec.pins = std::move(spec.pins);
  spec.return_ids.clear();
  spec.pins.clear();
  rec.retries_left = spec.max_retries;
  rec.actor_task = !spec.actor_id.IsNil();
  rec.actor_id = spec.actor_id;
  rec.held_actors = spec.actor_handles;
  if (rec.actor_task) rec.held_actors.push_back(spec.actor_id);  // a call holds its actor
  for (const UniqueID& a : rec.held_actors) HoldActor(a);
  // Plain tasks (max_retries) and actor calls (their actor's max_task_retries) run again
  // when their worker dies; an actor creation is restarted by ActorGone instead.
  if (rec.retries_left != 0 && !spec.actor_creation) {
    rec.retry_spec = std::make_unique<TaskSpec>(spec);
  }
  const UniqueID task_id = spec.task_id;
  const bool actor_task = rec.actor_task;
  if (s.parent_worker != 0) {  // a child of the plain task that worker runs
    auto parent = running_plain_.find(s.parent_worker);
    if (parent != running_plain_.end()) {
      auto p = tasks_.find(parent->second);
      if (p != tasks_.end()) p->second.children.push_back(task_id);
    }
  }
  tasks_[task_id] = std::move(rec);
  if (spec.actor_creation) {
    ActorRecord& actor = actors_[spec.actor_id];
    actor.creation = std::make_unique<TaskSpec>(spec);
    actor.restarts_left = spec.max_retries;
    actor.owner = s.owner;
    dead_actors_.erase(spec.actor_id);
    remote_actors_.erase(spec.actor_id);  // (re)created here, e.g. after its node died
  } else if (actor_task) {
    auto dead = dead_actors_.find(spec.actor_id);
    if (dead != dead_actors_.end()) return FailTask(task_id, dead->second.tag, dead->second.why);
    if (remote_actors_.count(spec.actor_id) || !actors_.count(spec.actor_id)) {
      return HoldForElsewhere(std::move(spec));
    }
  }
  if (!spec.scheduling.empty() && (spec.actor_creation || spec.actor_id.IsNil())) {
    TaskPlacement placement{task_id, spec.scheduling, spec.resources, spec.actor_creation};
    elsewhere_.emplace(task_id, std::move(spec));
    return Tell(std::move(placement));
  }
  scheduler_.SubmitTask(std::move(spec), s.missing);
}

bool TaskManager::PlaceHere(const UniqueID& task_id) {
  auto held = elsewhere_.find(task_id);
  if (held == elsewhere_.end() || held->second.scheduling.empty()) return false;
  TaskSpec spec = std::move(held->second);
  elsewhere_.erase(held);
  spec.scheduling.clear();
  std::vector<UniqueID> missing = Missing(spec.dependencies);
  scheduler_.SubmitTask(std::move(spec), missing);
  return true;
}

bool TaskManager::FailPlacement(const UniqueID& task_id, const std::string& message) {
  auto held = elsewhere_.find(task_id);
  if (held == elsewhere_.end() || held->second.scheduling.empty()) return false;
  const bool creation = held->second.actor_creation;
  const UniqueID actor_id = held->second.actor_id;
  elsewhere_.erase(held);
  if (!creation) {
    FailTask(task_id, "UNSCHEDULABLE", message);
    return true;
  }
  if (auto a = actors_.find(actor_id); a != actors_.end()) {  // dead for good, never placed
    a->second.end_reason = message;
    a->second.restarts_left = 0;
    a->second.unschedulable = true;
  }
  ActorGone(actor_id);  // its creation and calls fail with ACTOR_UNSCHEDULABLE, `message`
  return true;
}

void TaskManager::HoldForElsewhere(TaskSpec spec) {
  UniqueID task_id = spec.task_id, actor_id = spec.actor_id;
  elsewhere_.emplace(task_id, std::move(spec));
  Tell(ActorTaskElsewhere{task_id, actor_id});
}

void TaskManager::WorkerRegistered(WorkerID worker, int pid, const std::string& runtime_env) {
  workers_.insert(worker);
  worker_pids_[worker] = pid;
  scheduler_.AddWorker(worker, runtime_env);
}

void TaskManager::TaskDone(WorkerID worker, const UniqueID& task_id, bool retry, bool exiting) {
  for (const auto& [actor_id, actor] : actors_) {  // (a worker hosts at most one actor)
    if (actor.worker == worker && actor.creation && actor.creation->task_id == task_id) {
      Tell(ActorStateChanged{actor_id, true});
      break;
    }
  }
  scheduler_.TaskFinished(worker, task_id, exiting);  // a leaving worker gets no new task
  running_plain_.erase(worker);
  EndRun(task_id, retry);
  if (exiting) {
    workers_.erase(worker);
    scheduler_.RemoveWorker(worker);
  }
}

void TaskManager::SetWorkerBlocked(WorkerID worker, bool blocked) {
  scheduler_.SetWorkerBlocked(worker, blocked);
}

void TaskManager::ObjectAvailable(const UniqueID& object_id) { scheduler_.ObjectAvailable(object_id); }

void TaskManager::SetTotalResources(ResourceSet total) { scheduler_.SetTotalResources(std::move(total)); }

// A run ended: finish the task, fail it (cancelled meanwhile), or run it again (`retry`).
void TaskManager::EndRun(const UniqueID& task_id, bool retry) {
  auto rec = tasks_.find(task_id);
  if (rec != tasks_.end() && rec->second.cancelled) {  // interrupted, or it finished first
    FailTask(task_id, "CANCELLED", "the task was cancelled while it ran (task " + task_id.Hex() + ")");
  } else if (!retry) {
    FinishTask(task_id);
  } else if (!RetryTask(task_id, "an exception its retry_exceptions allow")) {
    FailTask(task_id, "WORKER_DIED",
             "the task asked for a retry after an exception but none is left (task " +
                 task_id.Hex() + ")");
  }
}

void TaskManager::FinishTask(const UniqueID& task_id) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  if (!it->second.pins.empty()) Emit(ReleaseNodePins{std::move(it->second.pins)});
  std::vector<UniqueID> held = std::move(it->second.held_actors);
  tasks_.erase(it);
  for (const auto& a : held) DropActor(a);
}

void TaskManager::FailTask(const UniqueID& task_id, const std::string& tag, const std::string& message) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  for (const auto& id : it->second.return_ids) Emit(StoreErrorObject{id, tag, message});
  FinishTask(task_id);
}

// Submits a task again after its run failed, if it has retries left; false otherwise.
bool TaskManager::RetryTask(const UniqueID& task_id, const std::string& why) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return false;
  TaskRecord& rec = it->second;
  if (!rec.retry_spec || rec.retries_left == 0 || rec.cancelled) return false;
  if (rec.retries_left > 0) rec.retries_left--;
  rec.worker = 0;
  rec.children.clear();
  rec.retry_spec->attempt++;
  Log(2, "retrying task " + task_id.Hex().substr(0, 16) + " after " + why);
  scheduler_.SubmitTask(*rec.retry_spec, Missing(rec.retry_spec->dependencies));
  return true;
}

// ---- decisions -----------------------------------------------------------------------

std::vector<TaskDecision> TaskManager::TakeDecisions(bool scheduler) {
  if (scheduler) DrainScheduler();
  std::vector<TaskDecision> out;
  out.swap(out_);
  return out;
}

void TaskManager::DrainScheduler() {
  // Acting on a decision can feed the scheduler (a retried task): drain until quiet.
  for (std::vector<Decision> batch = scheduler_.TakeDecisions(); !batch.empty();
       batch = scheduler_.TakeDecisions()) {
    for (Decision& d : batch) {
      if (auto* dispatch = std::get_if<DispatchTask>(&d)) {
        const TaskSpec& spec = *dispatch->spec;
        int32_t retries_left = 0;
        if (auto rec = tasks_.find(spec.task_id); rec != tasks_.end()) {
          rec->second.worker = dispatch->worker;
          rec->second.dispatch_seq = ++dispatch_count_;
          if (rec->second.retry_spec) retries_left = rec->second.retries_left;
        }
        if (spec.actor_id.IsNil()) running_plain_[dispatch->worker] = spec.task_id;
        if (spec.actor_creation) actors_[spec.actor_id].worker = dispatch->worker;
        Emit(DispatchToWorker{dispatch->worker, dispatch->spec, std::move(dispatch->instances),
                              retries_left});
        continue;
      }
      if (auto* lost = std::get_if<WorkerLost>(&d)) HandleWorkerLost(*lost);
      std::visit([this](auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (!std::is_same_v<T, DispatchTask>) Tell(std::move(v));
      }, d);
    }
  }
}

// ---- introspection -----------------------------------------------------------------------

std::vector<RunningTask> TaskManager::RunningTasks() const {
  std::vector<RunningTask> out;
  for (const auto& [task_id, rec] : tasks_) {
    if (rec.worker == 0) continue;
    out.push_back({rec.worker, task_id, rec.retry_spec && rec.retries_left != 0, rec.actor_task,
                   rec.dispatch_seq});
  }
  return out;
}

int TaskManager::WorkerPid(WorkerID worker) const {
  auto it = worker_pids_.find(worker);
  return it == worker_pids_.end() ? 0 : it->second;
}

// ---- taking a task to run elsewhere ---------------------------------------------------------

std::optional<TakenTask> TaskManager::TakeTask(const UniqueID& task_id, ClientID keeper) {
  auto rec = tasks_.find(task_id);
  std::optional<TaskSpec> spec;
  UniqueID moved_actor;
  if (auto held = elsewhere_.find(task_id); held != elsewhere_.end()) {
    spec = std::move(held->second);
    elsewhere_.erase(held);
    if (spec->actor_creation) moved_actor = spec->actor_id;  // held for placement
  } else if (rec != tasks_.end() && rec->second.actor_task) {
    auto a = actors_.find(rec->second.actor_id);
    bool unplaced_creation = a != actors_.end() && a->second.worker == 0 && a->second.creation &&
                             a->second.creation->task_id == task_id;
    if (!unplaced_creation) return std::nullopt;
    spec = scheduler_.TakeTask(task_id);
    if (spec) moved_actor = rec->second.actor_id;
  } else {
    spec = scheduler_.TakeTask(task_id);
  }
  if (!spec) return std::nullopt;
  TakenTask taken;
  if (rec != tasks_.end()) {  // what the node kept: the task may run elsewhere with it
    spec->return_ids = rec->second.return_ids;
    spec->max_retries = rec->second.retries_left;
    if (keeper != 0) {  // the keeper holds them before FinishTask drops the task's
      taken.kept_pins = rec->second.pins;
      auto& handles = client_handles_[keeper];
      for (const auto& a : rec->second.held_actors) {
        handles[a]++;
        HoldActor(a);
        taken.kept_handles.push_back(a);
      }
    }
  }
  FinishTask(task_id);
  if (!moved_actor.IsNil()) {  // the actor lives elsewhere now; its queued calls follow it
    if (auto a = actors_.find(moved_actor); a != actors_.end() && a->second.owner != 0) {
      remote_owned_[moved_actor] = a->second.owner;
    }
    actors_.erase(moved_actor);
    remote_actors_.insert(moved_actor);
    std::vector<UniqueID> calls;
    for (const auto& [id, r] : tasks_) {
      if (r.actor_id == moved_actor && !elsewhere_.count(id)) calls.push_back(id);
    }
    for (const UniqueID& id : calls) {
      std::optional<TaskSpec> call = scheduler_.TakeTask(id);
      if (call) HoldForElsewhere(std::move(*call));
    }
  }
  taken.spec = std::move(*spec);
  return taken;
}

}  // namespace rayfield
