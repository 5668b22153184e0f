// Node-side records of tasks and actors (see node_server.h): pins held for
// running tasks, retries and error objects when a worker dies or a task asks for a
// retry (retry_exceptions), actor restarts, kill and cancel (interrupt, force,
// recursive), and answers for evicted objects.
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "node_conn.h"
#include "node_server.h"

namespace rayfield {

// ---- task records: pins, retries, errors for lost work -------------------------------------

void NodeServer::FinishTask(const UniqueID& task_id) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  for (const auto& id : it->second.pins) store_->Release(kNodeClient, id);
  std::vector<UniqueID> held = std::move(it->second.held_actors);
  tasks_.erase(it);
  for (const auto& a : held) DropActor(a);
}

// ---- actor handles: what keeps an actor alive ---------------------------------------

void NodeServer::HoldActor(const UniqueID& actor_id) {
  if (actor_holds_[actor_id]++ == 0) {
    PushEvent(ActorHandlesChanged{actor_id, true, scoped_actors_.count(actor_id) > 0});
  }
}

void NodeServer::DropActor(const UniqueID& actor_id) {
  auto it = actor_holds_.find(actor_id);
  if (it == actor_holds_.end()) return;
  if (--it->second > 0) return;
  actor_holds_.erase(it);
  PushEvent(ActorHandlesChanged{actor_id, false, scoped_actors_.count(actor_id) > 0});
}

void NodeServer::HandleActorHandles(Conn& c, const fb::ActorHandlesRequest* r) {
  if (r->actor_ids() == nullptr) return;
  std::vector<UniqueID> ids;
  for (const fb::UniqueID* id : *r->actor_ids()) ids.push_back(FromFb(id));
  if (r->scoped()) scoped_actors_.insert(ids.begin(), ids.end());
  if (r->object_id() != nullptr) {  // inside an object: held until the object is deleted
    if (!r->add()) return;
    auto& held = object_handles_[FromFb(r->object_id())];
    for (const auto& a : ids) {
      held.push_back(a);
      HoldActor(a);
    }
    return;
  }
  for (const auto& a : ids) {
    if (r->add()) {
      c.actor_handles[a]++;
      HoldActor(a);
      continue;
    }
    auto h = c.actor_handles.find(a);
    if (h == c.actor_handles.end()) continue;  // not held by this client: ignored
    if (--h->second == 0) c.actor_handles.erase(h);
    DropActor(a);
  }
}

std::vector<bool> NodeServer::ActorsHeld(const std::vector<UniqueID>& actor_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<bool> out;
  for (const auto& a : actor_ids) out.push_back(actor_holds_.count(a) > 0);
  return out;
}

std::string NodeServer::EndActor(const UniqueID& actor_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return "unknown";
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
  DrainScheduler();
  FlushDirty();
  return outcome;
}

void NodeServer::HandleWorkerLost(const WorkerLost& lost) {
  auto killed = kill_reasons_.find(lost.worker);  // killed by the host, with a reason
  for (const UniqueID& task_id : lost.running_tasks) {
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) continue;
    TaskRecord& rec = it->second;
    if (RetryTask(task_id, "its worker died")) continue;
    std::string where = "task " + task_id.Hex() + ", worker pid " +
                        std::to_string(worker_pids_[lost.worker]) + ", node " +
                        options_.socket_path;
    if (rec.cancelled) {
      FailTask(task_id, "CANCELLED", "the task was cancelled (" + where + ")");
    } else if (killed != kill_reasons_.end()) {
      bool actor = rec.actor_task;
      FailTask(task_id, actor ? "ACTOR_DIED" : killed->second.first,
               killed->second.second + " (" + where + ")");
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

void NodeServer::EndRun(const UniqueID& task_id, bool retry) {
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

void NodeServer::RecordChild(ClientID worker, const UniqueID& task_id) {
  auto parent = running_plain_.find(worker);
  if (parent == running_plain_.end()) return;
  auto p = tasks_.find(parent->second);
  if (p != tasks_.end()) p->second.children.push_back(task_id);
}

bool NodeServer::RetryTask(const UniqueID& task_id, const std::string& why) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return false;
  TaskRecord& rec = it->second;
  if (!rec.retry_spec || rec.retries_left == 0 || rec.cancelled) return false;
  if (rec.retries_left > 0) rec.retries_left--;
  std::vector<UniqueID> missing;
  for (const auto& d : rec.retry_spec->dependencies) {
    if (!store_->IsSealed(d)) missing.push_back(d);
  }
  rec.worker = 0;
  rec.children.clear();
  rec.retry_spec->attempt++;
  Log(2, "retrying task " + task_id.Hex().substr(0, 16) + " after " + why);
  scheduler_->SubmitTask(*rec.retry_spec, missing);
  return true;
}

std::vector<RunningTaskInfo> NodeServer::RunningTasks() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RunningTaskInfo> out;
  for (const auto& [task_id, rec] : tasks_) {
    if (rec.worker == 0) continue;
    auto w = conns_.find(rec.worker);
    if (w == conns_.end() || !w->second->worker || w->second->pid <= 0) continue;
    out.push_back({w->second->pid, task_id, rec.retry_spec && rec.retries_left != 0,
                   rec.actor_task, rec.dispatch_seq});
  }
  return out;
}

// SIGKILL the worker process of `c`. A "worker" in this very process (a test's in-process
// client) is not killed, which would take the node down with it: its connection is shut
// down instead, which the event loop handles as the worker's death.
void NodeServer::EndWorkerProcess(const Conn& c) {
  if (c.pid == getpid()) {
    ::shutdown(c.fd, SHUT_RDWR);
  } else if (c.pid > 0) {
    kill(c.pid, SIGKILL);
  }
}

bool NodeServer::KillWorker(int pid, const std::string& tag, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid <= 0) return false;
  for (const auto& [id, conn] : conns_) {
    if (!conn->worker || conn->pid != pid) continue;
    kill_reasons_[id] = {tag, message};
    EndWorkerProcess(*conn);
    return true;
  }
  return false;
}

void NodeServer::FailTask(const UniqueID& task_id, const std::string& tag, const std::string& message) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  for (const auto& id : it->second.return_ids) SealError(id, tag, message);
  FinishTask(task_id);
}

// The actor's worker is gone: restart it if it may, otherwise fail what waits for it.
void NodeServer::ActorGone(const UniqueID& actor_id) {
  auto a = actors_.find(actor_id);
  if (a != actors_.end() && a->second.creation && a->second.restarts_left != 0) {
    if (a->second.restarts_left > 0) a->second.restarts_left--;
    a->second.worker = 0;
    Log(2, "restarting actor " + actor_id.Hex().substr(0, 16));
    a->second.creation->attempt++;
    PushEvent(ActorStateChanged{actor_id, false});
    TaskSpec spec = *a->second.creation;
    std::vector<UniqueID> missing;
    for (const auto& d : spec.dependencies) {
      if (!store_->IsSealed(d)) missing.push_back(d);
    }
    scheduler_->SubmitTask(std::move(spec), missing);
    return;
  }
  std::string why = "the actor is dead: its worker process exited and no restart is left";
  if (a != actors_.end() && !a->second.end_reason.empty()) why = a->second.end_reason;
  dead_actors_.emplace(actor_id, why);
  actors_.erase(actor_id);
  scoped_actors_.erase(actor_id);
  PushEvent(ActorDied{actor_id, why});
  std::vector<UniqueID> pending;
  for (const auto& [task_id, rec] : tasks_) {
    if (rec.actor_id == actor_id) pending.push_back(task_id);
  }
  for (const auto& task_id : pending) {
    scheduler_->TakeTask(task_id);
    FailTask(task_id, "ACTOR_DIED", why);
  }
}

// A driver disconnected: kill the non-detached actors it created (Ray's fate-sharing of
// actors with their owner); those it moved to other nodes are the host's to kill.
void NodeServer::OwnerGone(ClientID client, int pid) {
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
  if (!elsewhere.empty()) PushEvent(OwnerDied{client, pid, std::move(elsewhere)});
}

Status NodeServer::KillActor(const UniqueID& actor_id, bool no_restart) {
  auto a = actors_.find(actor_id);
  if (a == actors_.end()) {
    if (dead_actors_.count(actor_id)) return Status::OK();
    return Status::Error(Code::ObjectNotFound, "no actor " + actor_id.Hex() + " on this node");
  }
  if (no_restart) a->second.restarts_left = 0;
  auto w = conns_.find(a->second.worker);
  if (a->second.worker == 0 || w == conns_.end()) {  // not placed yet
    a->second.restarts_left = 0;
    ActorGone(actor_id);
    return Status::OK();
  }
  EndWorkerProcess(*w->second);
  return Status::OK();
}

int NodeServer::CancelJob(const std::string& prefix, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_ || prefix.empty() || prefix.size() > kIdSize) return 0;
  std::vector<UniqueID> queued;
  for (const auto& [task_id, rec] : tasks_) {
    if (rec.worker == 0 && std::memcmp(task_id.bytes.data(), prefix.data(), prefix.size()) == 0) {
      queued.push_back(task_id);
    }
  }
  int cancelled = 0;
  for (const UniqueID& task_id : queued) {
    bool taken = elsewhere_.erase(task_id) > 0 || scheduler_->TakeTask(task_id).has_value();
    if (!taken) continue;  // dispatched meanwhile
    FailTask(task_id, "CANCELLED", reason);
    ++cancelled;
  }
  DrainScheduler();
  FlushDirty();
  return cancelled;
}

// Interrupt the task running on the main thread of `c`'s process: SIGINT to that thread
// (tgkill; the main thread's id is the pid). The worker asks back (CancelTaskRequest with
// `query`) before it raises KeyboardInterrupt, so a late signal never stops another task.
void NodeServer::InterruptWorker(const Conn& c) {
  if (c.pid > 0 && c.pid != getpid()) syscall(SYS_tgkill, c.pid, c.pid, SIGINT);
}

std::string NodeServer::CancelTask(const UniqueID& task_id, bool force, bool recursive,
                                   bool query) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return "done";
  if (query) return it->second.cancelled ? "cancelled" : "running";
  std::vector<UniqueID> children;
  if (recursive) children = it->second.children;
  std::string state = "running";
  if (scheduler_->TakeTask(task_id)) {
    FailTask(task_id, "CANCELLED", "the task was cancelled before it ran");
    state = "queued";
  } else if (it->second.worker != 0 && !it->second.actor_task) {
    TaskRecord& rec = it->second;
    bool first = !rec.cancelled;
    rec.cancelled = true;
    rec.retry_spec.reset();
    auto w = conns_.find(rec.worker);
    if (w != conns_.end() && force) {
      EndWorkerProcess(*w->second);
    } else if (w != conns_.end() && first) {
      InterruptWorker(*w->second);
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
  if (!gone.empty()) PushEvent(CancelElsewhere{std::move(gone), force});
  return state;
}

void NodeServer::SealError(const UniqueID& id, const std::string& tag, const std::string& message) {
  if (store_->Find(id) != nullptr) return;  // the worker sealed a result before it died
  uint64_t offset = 0;
  Status s = CreateObject(kNodeClient, id, message.size(), tag.size(), &offset);
  if (!s.ok()) {
    Log(3, "cannot store the error for object " + id.Hex() + ": " + s.message);
    return;
  }
  std::memcpy(arena_.base() + offset, message.data(), message.size());
  std::memcpy(arena_.base() + offset + message.size(), tag.data(), tag.size());
  store_->Seal(kNodeClient, id);
}

}  // namespace rayfield
