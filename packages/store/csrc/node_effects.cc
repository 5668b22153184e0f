// The node's effects (see node_server.h): store events (notifications, waiters, the
// task manager), the task manager's decisions carried out (dispatches, error objects,
// pins, worker processes), and the queue of events for the host process.
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "node_conn.h"
#include "node_server.h"

namespace rayfield {

void NodeServer::DrainStoreEvents() {
  while (store_->HasEvents()) {
    for (const StoreEvent& ev : store_->TakeEvents()) {
      if (ev.spill_key != 0) spill_->Remove(ev.spill_key);  // deleted: its file goes too
      if (ev.kind == StoreEvent::Deleted) tasks_->ObjectDeleted(ev.id);  // handles inside it drop
      if (ev.kind == StoreEvent::Sealed) {
        tasks_->ObjectAvailable(ev.id);
        CompleteWaiters(ev.id);
      }
      for (auto& kv : conns_) {
        Conn& c = *kv.second;
        if (!c.subscribed) continue;
        fb::UniqueID oid = ToFb(ev.id);
        auto& b = Writer(c).builder();
        fb::ObjectEvent kind = ev.kind == StoreEvent::Sealed ? fb::ObjectEvent::Sealed
                               : ev.evicted                  ? fb::ObjectEvent::Evicted
                                                             : fb::ObjectEvent::Deleted;
        Writer(c).Add(0, fb::CreateObjectNotification(b, &oid, kind, ev.data_size, ev.metadata_size));
      }
    }
    ApplyDecisions(false);
  }
}

void NodeServer::ApplyDecisions(bool scheduler) {
  // Carrying out a decision never feeds the task manager directly (store events wait for
  // DrainStoreEvents), so one batch holds everything decided so far.
  for (TaskDecision& d : tasks_->TakeDecisions(scheduler)) {
    if (auto* dispatch = std::get_if<DispatchToWorker>(&d)) {
      Dispatch(*dispatch);
    } else if (auto* error = std::get_if<StoreErrorObject>(&d)) {
      SealError(error->object_id, error->tag, error->message);
    } else if (auto* pins = std::get_if<ReleaseNodePins>(&d)) {
      for (const auto& id : pins->object_ids) store_->Release(kNodeClient, id);
    } else if (auto* kill = std::get_if<KillWorkerProcess>(&d)) {
      if (auto w = conns_.find(kill->worker); w != conns_.end()) EndWorkerProcess(*w->second);
    } else if (auto* interrupt = std::get_if<InterruptWorkerProcess>(&d)) {
      if (auto w = conns_.find(interrupt->worker); w != conns_.end()) InterruptWorker(*w->second);
    } else {
      PushEvent(std::move(std::get<NodeEvent>(d)));
    }
  }
}

void NodeServer::Dispatch(const DispatchToWorker& d) {
  auto it = conns_.find(d.worker);
  if (it == conns_.end()) return;  // the task manager learns of the loss from Close()
  Conn& c = *it->second;
  auto& b = Writer(c).builder();
  const TaskSpec& spec = *d.spec;
  std::vector<flatbuffers::Offset<fb::ResourceInstance>> inst;
  for (const auto& g : d.instances) {
    inst.push_back(fb::CreateResourceInstance(b, b.CreateString(g.name), g.index, g.amount));
  }
  auto instances = b.CreateVector(inst);
  std::vector<flatbuffers::Offset<fb::ResourceAmount>> demand;
  for (const auto& [name, amount] : spec.resources) {
    demand.push_back(fb::CreateResourceAmount(b, b.CreateString(name), amount));
  }
  auto resources = b.CreateVector(demand);
  auto payload = b.CreateVector(reinterpret_cast<const uint8_t*>(spec.payload.data()),
                                spec.payload.size());
  fb::UniqueID tid = ToFb(spec.task_id), aid = ToFb(spec.actor_id);
  Writer(c).Add(0, fb::CreateTaskDispatch(b, &tid, spec.actor_id.IsNil() ? nullptr : &aid,
                                          spec.actor_creation, instances, payload, d.retries_left,
                                          spec.attempt, resources));
}

void NodeServer::PushEvent(NodeEvent e) {
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    // At most one NeedWorker per runtime_env waits in the queue: the newest says it all.
    auto same = events_.end();
    if (const auto* need = std::get_if<NeedWorker>(&e)) {
      same = std::find_if(events_.begin(), events_.end(), [need](const NodeEvent& q) {
        const auto* other = std::get_if<NeedWorker>(&q);
        return other != nullptr && other->runtime_env == need->runtime_env;
      });
    }
    if (same != events_.end()) {
      *same = std::move(e);
    } else {
      events_.push_back(std::move(e));
    }
  }
  events_cv_.notify_all();
}

// An error object: the message as data, the tag (e.g. "WORKER_DIED") as metadata.
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

// Interrupt the task running on the main thread of `c`'s process: SIGINT to that thread
// (tgkill; the main thread's id is the pid).
void NodeServer::InterruptWorker(const Conn& c) {
  if (c.pid > 0 && c.pid != getpid()) syscall(SYS_tgkill, c.pid, c.pid, SIGINT);
}

}  // namespace rayfield
