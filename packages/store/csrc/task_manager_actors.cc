// The task manager's lost work, actors and cancels (see task_manager.h): actor handle
// counts, a lost worker's tasks (retry or error objects), actor restarts and deaths,
// drivers' actors ending with them, kill, cancel (interrupt, force, recursive) and job
// cancel.
#include <cstring>

#include "task_manager.h"

namespace rayfield {

// ---- actor handles: what keeps an actor alive ---------------------------------------

void TaskManager::HoldActor(const UniqueID& actor_id) {
  if (actor_holds_[actor_id]++ == 0) {
    Tell(ActorHandlesChanged{actor_id, true, scoped_actors_.count(actor_id) > 0});
  }
}

void TaskManager::DropActor(const UniqueID& actor_id) {
  auto it = actor_holds_.find(actor_id);
  if (it == actor_holds_.end()) return;
  if (--it->second > 0) return;
  actor_holds_.erase(it);
  Tell(ActorHandlesChanged{actor_id, false, scoped_actors_.count(actor_id) > 0});
}

void TaskManager::ActorHandles(ClientID client, const std::vector<UniqueID>& ids, bool add,
                               bool scoped, const std::optional<UniqueID>& object_id) {
  if (scoped) scoped_actors_.insert(ids.begin(), ids.end());
  if (object_id) {  // inside an object: held until the object is deleted
    if (!add) return;
    auto& held = object_handles_[*object_id];
    for (const auto& a : ids) {
      held.push_back(a);
      HoldActor(a);
    }
    return;
  }
  for (const auto& a : ids) {
    if (add) {
      client_handles_[client][a]++;
      HoldActor(a);
      continue;
    }
    auto c = client_handles_.find(client);
    if (c == client_handles_.end()) continue;
    auto h = c->second.find(a);
    if (h == c->second.end()) continue;  // not held by this client: ignored
    if (--h->second == 0) c->second.erase(h);
    if (c->second.empty()) client_handles_.erase(c);
    DropActor(a);
  }
}

void TaskManager::ObjectDeleted(const UniqueID& object_id) {
  auto held = object_handles_.find(object_id);
  if (held == object_handles_.end()) return;
  std::vector<UniqueID> actors = std::move(held->second);
  object_handles_.erase(held);
  for (const UniqueID& a : actors) DropActor(a);
}

std::vector<bool> TaskManager::ActorsHeld(const std::vector<UniqueID>& actor_ids) const {
  std::vector<bool> out;
  for (const auto& a : actor_ids) out.push_back(actor_holds_.count(a) > 0);
  return out;
}

std::string TaskManager::EndActor(const UniqueID& actor_id, const std::string& reason) {
  if (actor_holds_.count(actor_id)) return "held";
  std::string outcome = "unknown";
  if (auto a = actors_.find(actor_id); a != actors_.end()) {
    a->second.end_reason = reason;
    KillActor(actor_id, true);
    outcome = "ended";
  } else if (remote_actors_.count(actor_id)) {
    remote_owned_.erase(actor_id);
    outcome = "elsewhere";
  }
  scoped_actors_.erase(actor_id);
  return outcome;
}

// ---- lost workers and clients -------------------------------------------------------------

void TaskManager::ClientGone(ClientID client, bool worker, bool driver, int pid) {
  if (auto h = client_handles_.find(client); h != client_handles_.end()) {
    std::unordered_map<UniqueID, int, UniqueIDHash> handles = std::move(h->second);
    client_handles_.erase(h);
    for (const auto& [actor_id, n] : handles) {
      for (int i = 0; i < n; ++i) DropActor(actor_id);
    }
  }
  if (worker) {
    workers_.erase(client);
    scheduler_.RemoveWorker(client);
  }
  if (driver) OwnerGone(client, pid);
}

void TaskManager::SetKillReason(WorkerID worker, const std::string& tag, const std::string& message,
                                bool retry) {
  kill_reasons_[worker] = {tag, message, retry};
}

void TaskManager::HandleWorkerLost(const WorkerLost& lost) {
  auto killed = kill_reasons_.find(lost.worker);  // killed by the host, with a reason
  for (const UniqueID& task_id : lost.running_tasks) {
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) continue;
    TaskRecord& rec = it->second;
    const bool may_retry = killed == kill_reasons_.end() || killed->second.retry;
    if (may_retry && RetryTask(task_id, "its worker died")) continue;
    std::string where = "task " + task_id.Hex() + ", worker pid " +
                        std::to_string(WorkerPid(lost.worker)) + ", node " + node_name_;
    if (rec.cancelled) {
      FailTask(task_id, "CANCELLED", "the task was cancelled (" + where + ")");
    } else if (killed != kill_reasons_.end()) {
      bool actor = rec.actor_task;
      FailTask(task_id, actor ? "ACTOR_DIED" : killed->second.tag,
               killed->second.message + " (" + where + ")");
    } else if (rec.actor_task) {
      FailTask(task_id, "ACTOR_DIED",
               "the actor's worker process died while running this call (" + where + ")");
    } else {
      FailTask(task_id, "WORKER_DIED",
               "the worker process died while running this task, no retries left (" + where + ")");
    }
  }
  worker_pids_.erase(lost.worker);
  running_plain_.erase(lost.worker);
  if (killed != kill_reasons_.end()) kill_reasons_.erase(killed);
  if (!lost.actor_id.IsNil()) ActorGone(lost.actor_id);
}

// The actor's worker is gone (or its creation could not be placed): restart it if it
// may, otherwise fail what waits for it.
void TaskManager::ActorGone(const UniqueID& actor_id) {
  auto a = actors_.find(actor_id);
  if (a != actors_.end() && a->second.creation && a->second.restarts_left != 0) {
    if (a->second.restarts_left > 0) a->second.restarts_left--;
    a->second.worker = 0;
    Log(2, "restarting actor " + actor_id.Hex().substr(0, 16));
    a->second.creation->attempt++;
    Tell(ActorStateChanged{actor_id, false});
    TaskSpec spec = *a->second.creation;
    std::vector<UniqueID> missing = Missing(spec.dependencies);
    scheduler_.SubmitTask(std::move(spec), missing);
    return;
  }
  std::string why = "the actor is dead: its worker process exited and no restart is left";
  if (a != actors_.end() && !a->second.end_reason.empty()) why = a->second.end_reason;
  const char* tag = a != actors_.end() && a->second.unschedulable ? "ACTOR_UNSCHEDULABLE"
                                                                  : "ACTOR_DIED";
  dead_actors_.emplace(actor_id, DeadActor{tag, why});
  actors_.erase(actor_id);
  scoped_actors_.erase(actor_id);
  Tell(ActorDied{actor_id, why});
  std::vector<UniqueID> pending;
  for (const auto& [task_id, rec] : tasks_) {
    if (rec.actor_id == actor_id) pending.push_back(task_id);
  }
  for (const auto& task_id : pending) {
    scheduler_.TakeTask(task_id);
    FailTask(task_id, tag, why);
  }
}

// A driver disconnected: kill the non-detached actors it created (Ray's fate-sharing of
// actors with their owner); those it moved to other nodes are the host's to kill.
void TaskManager::OwnerGone(ClientID client, int pid) {
  std::vector<UniqueID> here, elsewhere;
  for (const auto& [actor_id, rec] : actors_) {
    if (rec.owner == client) here.push_back(actor_id);
  }
  for (auto it = remote_owned_.begin(); it != remote_owned_.end();) {
    if (it->second != client) {
      ++it;
      continue;
    }
    elsewhere.push_back(it->first);
    it = remote_owned_.erase(it);
  }
  if (here.empty() && elsewhere.empty()) return;
  Log(2, "driver pid " + std::to_string(pid) + " disconnected: killing its " +
             std::to_string(here.size() + elsewhere.size()) + " non-detached actor(s)");
  std::string why = "the actor is dead: the driver (pid " + std::to_string(pid) +
                    ") that created it exited, and a non-detached actor ends with its driver";
  for (const UniqueID& actor_id : here) {
    auto a = actors_.find(actor_id);
    if (a == actors_.end()) continue;
    a->second.end_reason = why;
    KillActor(actor_id, true);
  }
  if (!elsewhere.empty()) Tell(OwnerDied{client, pid, std::move(elsewhere)});
}

// ---- kill and cancel --------------------------------------------------------------------

Status TaskManager::KillActor(const UniqueID& actor_id, bool no_restart) {
  auto a = actors_.find(actor_id);
  if (a == actors_.end()) {
    if (dead_actors_.count(actor_id)) return Status::OK();
    return Status::Error(Code::ObjectNotFound, "no actor " + actor_id.Hex() + " on this node");
  }
  if (no_restart) a->second.restarts_left = 0;
  if (a->second.worker == 0 || !workers_.count(a->second.worker)) {  // not placed yet
    a->second.restarts_left = 0;
    ActorGone(actor_id);
    return Status::OK();
  }
  Emit(KillWorkerProcess{a->second.worker});
  return Status::OK();
}

int TaskManager::CancelJob(const std::string& prefix, const std::string& reason) {
  if (prefix.empty() || prefix.size() > kIdSize) return 0;
  std::vector<UniqueID> queued;
  for (const auto& [task_id, rec] : tasks_) {
    if (rec.worker == 0 && std::memcmp(task_id.bytes.data(), prefix.data(), prefix.size()) == 0) {
      queued.push_back(task_id);
    }
  }
  int cancelled = 0;
  for (const UniqueID& task_id : queued) {
    bool taken = elsewhere_.erase(task_id) > 0 || scheduler_.TakeTask(task_id).has_value();
    if (!taken) continue;  // dispatched meanwhile
    FailTask(task_id, "CANCELLED", reason);
    ++cancelled;
  }
  return cancelled;
}

// A running plain task is interrupted: SIGINT to its worker's main thread. The worker asks
// back (a cancel with `query`) before it raises KeyboardInterrupt, so a late signal never
// stops another task.
std::string TaskManager::CancelTask(const UniqueID& task_id, bool force, bool recursive,
                                    bool query) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return "done";
  if (query) return it->second.cancelled ? "cancelled" : "running";
  std::vector<UniqueID> children;
  if (recursive) children = it->second.children;
  std::string state = "running";
  if (scheduler_.TakeTask(task_id)) {
    FailTask(task_id, "CANCELLED", "the task was cancelled before it ran");
    state = "queued";
  } else if (it->second.worker != 0 && !it->second.actor_task) {
    TaskRecord& rec = it->second;
    bool first = !rec.cancelled;
    rec.cancelled = true;
    rec.retry_spec.reset();
    bool connected = workers_.count(rec.worker) > 0;
    if (connected && force) {
      Emit(KillWorkerProcess{rec.worker});
    } else if (connected && first) {
      Emit(InterruptWorkerProcess{rec.worker});
    }
  }
  std::vector<UniqueID> gone;  // forwarded to other nodes (or finished)
  for (const UniqueID& child : children) {
    if (tasks_.count(child) == 0) {
      gone.push_back(child);
    } else {
      CancelTask(child, force, true, false);
    }
  }
  if (!gone.empty()) Tell(CancelElsewhere{std::move(gone), force});
  return state;
}

}  // namespace rayfield
