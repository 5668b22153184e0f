// The node's host API (see node_server.h): thread-safe calls from the host process,
// each under the loop's mutex; those that change tasks carry out the task manager's
// decisions and flush the replies at once.
#include <signal.h>
#include <unistd.h>

#include "node_conn.h"
#include "node_server.h"

namespace rayfield {

std::vector<NodeEvent> NodeServer::WaitEvents(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(events_mu_);
  auto ready = [this] { return !events_.empty() || !running_; };
  if (timeout_ms < 0) {
    events_cv_.wait(lock, ready);
  } else if (timeout_ms > 0) {
    events_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
  }
  std::vector<NodeEvent> out(std::make_move_iterator(events_.begin()),
                             std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

StoreStats NodeServer::Stats(uint64_t* num_clients) {
  std::lock_guard<std::mutex> lock(mu_);
  *num_clients = conns_.size();
  return store_ ? store_->Stats() : StoreStats{};
}

std::vector<ObjectInfoCopy> NodeServer::ListObjects() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ObjectInfoCopy> out;
  if (!store_) return out;
  for (const ObjectEntry* e : store_->List()) {
    uint32_t pins = 0;
    for (const auto& kv : e->refs) pins += kv.second.pins;
    int owner = 0;
    auto conn = conns_.find(e->creator);
    if (conn != conns_.end()) {
      owner = conn->second->pid;
    } else {
      owner = tasks_->WorkerPid(e->creator);  // a worker whose loss is not handled yet
    }
    out.push_back({e->id, e->data_size, e->metadata_size, e->state, e->ref_count, e->create_time_ms,
                   owner, pins, e->buffer_count, e->spilled});
  }
  return out;
}

SchedulerSnapshot NodeServer::SchedulerState() {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_ ? tasks_->scheduler().Snapshot() : SchedulerSnapshot{};
}

std::optional<TaskSpec> NodeServer::TakeTask(const UniqueID& task_id, ClientID pin_for,
                                             std::vector<UniqueID>* kept_pins,
                                             std::vector<UniqueID>* kept_handles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tasks_) return std::nullopt;
  ClientID keeper = pin_for != 0 && conns_.count(pin_for) ? pin_for : 0;
  std::optional<TakenTask> taken = tasks_->TakeTask(task_id, keeper);
  if (!taken) return std::nullopt;
  for (const auto& id : taken->kept_pins) store_->Pin(keeper, id);  // before the node's go
  if (kept_pins != nullptr) *kept_pins = taken->kept_pins;
  if (kept_handles != nullptr) *kept_handles = taken->kept_handles;
  ApplyDecisions(false);
  return std::move(taken->spec);
}

bool NodeServer::PlaceTask(const UniqueID& task_id, const std::string& fail_message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tasks_) return false;
  bool held = fail_message.empty() ? tasks_->PlaceHere(task_id)
                                   : tasks_->FailPlacement(task_id, fail_message);
  ApplyDecisions(true);
  FlushDirty();
  return held;
}

void NodeServer::SetTotalResources(ResourceSet total) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.resources = total;
  if (!tasks_) return;
  tasks_->SetTotalResources(std::move(total));
  ApplyDecisions(true);
  FlushDirty();
}

std::vector<bool> NodeServer::ActorsHeld(const std::vector<UniqueID>& actor_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tasks_) return std::vector<bool>(actor_ids.size(), false);
  return tasks_->ActorsHeld(actor_ids);
}

std::vector<bool> NodeServer::Waited(const std::vector<UniqueID>& object_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<bool> out;
  out.reserve(object_ids.size());
  for (const auto& id : object_ids) {
    out.push_back(waiters_.Waited(id) || (tasks_ && tasks_->scheduler().Awaits(id)));
  }
  return out;
}

std::string NodeServer::EndActor(const UniqueID& actor_id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tasks_) return "unknown";
  std::string outcome = tasks_->EndActor(actor_id, reason);
  ApplyDecisions(true);
  FlushDirty();
  return outcome;
}

int NodeServer::CancelJob(const std::string& prefix, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tasks_) return 0;
  int cancelled = tasks_->CancelJob(prefix, reason);
  ApplyDecisions(true);
  FlushDirty();
  return cancelled;
}

std::vector<WorkerHoldingInfo> NodeServer::WorkerHoldings() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerHoldingInfo> out;
  if (!tasks_) return out;
  for (WorkerHolding& h : tasks_->scheduler().Holdings()) {
    auto w = conns_.find(h.worker);
    if (w == conns_.end() || !w->second->worker || w->second->pid <= 0) continue;
    out.push_back({w->second->pid, h.actor_id, std::move(h.held)});
  }
  return out;
}

std::vector<RunningTaskInfo> NodeServer::RunningTasks() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RunningTaskInfo> out;
  if (!tasks_) return out;
  for (const RunningTask& t : tasks_->RunningTasks()) {
    auto w = conns_.find(t.worker);
    if (w == conns_.end() || !w->second->worker || w->second->pid <= 0) continue;
    out.push_back({w->second->pid, t.task_id, t.retriable, t.actor_task, t.dispatch_seq});
  }
  return out;
}

bool NodeServer::KillWorker(int pid, const std::string& tag, const std::string& message, bool retry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pid <= 0) return false;
  for (const auto& [id, conn] : conns_) {
    if (!conn->worker || conn->pid != pid) continue;
    tasks_->SetKillReason(id, tag, message, retry);
    EndWorkerProcess(*conn);
    return true;
  }
  return false;
}

}  // namespace rayfield
