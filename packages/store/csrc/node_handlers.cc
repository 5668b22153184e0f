// One handler per request type (see node_server.h). Routes() maps each message body
// type to its handler; HandleMessage (node_loop.cc) looks it up, after Hello.
#include <algorithm>
#include <array>
#include <cstring>

#include "node_conn.h"
#include "node_server.h"

namespace rayfield {

namespace {

std::vector<UniqueID> Ids(const flatbuffers::Vector<const fb::UniqueID*>* v) {
  std::vector<UniqueID> out;
  if (v) {
    for (const fb::UniqueID* id : *v) out.push_back(FromFb(id));
  }
  return out;
}

}  // namespace

const NodeServer::Route* NodeServer::Routes() {
  static const auto table = [] {
    std::array<Route, static_cast<size_t>(fb::Body::MAX) + 1> t{};
    auto set = [&t](fb::Body body, void (NodeServer::*handle)(Conn&, uint64_t, const fb::Message*),
                    bool worker_only = false) {
      t[static_cast<size_t>(body)] = Route{handle, worker_only};
    };
    set(fb::Body::CreateRequest, &NodeServer::HandleCreate);
    set(fb::Body::PutRequest, &NodeServer::HandlePut);
    set(fb::Body::SealRequest, &NodeServer::HandleSeal);
    set(fb::Body::AbortRequest, &NodeServer::HandleAbort);
    set(fb::Body::GetRequest, &NodeServer::HandleGet);
    set(fb::Body::WaitRequest, &NodeServer::HandleWait);
    set(fb::Body::ReleaseRequest, &NodeServer::HandleRelease);
    set(fb::Body::PinRequest, &NodeServer::HandlePin);
    set(fb::Body::ContainsRequest, &NodeServer::HandleContains);
    set(fb::Body::DeleteRequest, &NodeServer::HandleDelete);
    set(fb::Body::ListRequest, &NodeServer::HandleList);
    set(fb::Body::SubscribeRequest, &NodeServer::HandleSubscribe);
    set(fb::Body::StatsRequest, &NodeServer::HandleStats);
    set(fb::Body::NodeStateRequest, &NodeServer::HandleNodeState);
    set(fb::Body::SubmitTaskRequest, &NodeServer::HandleSubmit);
    set(fb::Body::KillActorRequest, &NodeServer::HandleKillActor);
    set(fb::Body::CancelTaskRequest, &NodeServer::HandleCancelTask);
    set(fb::Body::ActorHandlesRequest, &NodeServer::HandleActorHandles);
    set(fb::Body::RegisterWorkerRequest, &NodeServer::HandleRegisterWorker);
    set(fb::Body::TaskDoneRequest, &NodeServer::HandleTaskDone, true);
    set(fb::Body::WorkerBlockedRequest, &NodeServer::HandleWorkerBlocked, true);
    return t;
  }();
  return table.data();
}

// ---- objects ----------------------------------------------------------------------

void NodeServer::HandleCreate(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::CreateRequest* r = m->body_as_CreateRequest();
  if (r->object_id() == nullptr) {
    return ReplyStatus(c, seq, Status::Error(Code::InvalidRequest, "CreateRequest without object_id"));
  }
  uint64_t offset = 0;
  Status s = CreateObject(c.id, FromFb(r->object_id()), r->data_size(), r->metadata_size(), &offset);
  if (!s.ok()) return ReplyStatus(c, seq, s);
  Writer(c).Add(seq, fb::CreateCreateReply(Writer(c).builder(), offset));
}

void NodeServer::HandlePut(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::PutRequest* r = m->body_as_PutRequest();
  if (r->object_id() == nullptr) {
    return ReplyStatus(c, seq, Status::Error(Code::InvalidRequest, "PutRequest without object_id"));
  }
  UniqueID id = FromFb(r->object_id());
  uint64_t dsize = r->data() ? r->data()->size() : 0, msize = r->metadata() ? r->metadata()->size() : 0;
  uint64_t offset = 0;
  Status s = CreateObject(c.id, id, dsize, msize, &offset);
  if (s.ok()) {
    if (dsize) std::memcpy(arena_.base() + offset, r->data()->Data(), dsize);
    if (msize) std::memcpy(arena_.base() + offset + dsize, r->metadata()->Data(), msize);
    s = store_->Seal(c.id, id);
  }
  // A put that asks for no reply (a worker storing a result) leaves an object that
  // exists already as it is: a retried task or a restarted actor stores it again.
  if (seq == 0 && s.code == Code::ObjectExists) return;
  ReplyStatus(c, seq, s);
}

void NodeServer::HandleSeal(Conn& c, uint64_t seq, const fb::Message* m) {
  ReplyStatus(c, seq, store_->Seal(c.id, FromFb(m->body_as_SealRequest()->object_id())));
}

void NodeServer::HandleAbort(Conn& c, uint64_t seq, const fb::Message* m) {
  ReplyStatus(c, seq, store_->Abort(c.id, FromFb(m->body_as_AbortRequest()->object_id())));
}

void NodeServer::HandleRelease(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::ReleaseRequest* r = m->body_as_ReleaseRequest();
  for (const auto& id : Ids(r->object_ids())) {
    Status s = r->unpin() ? store_->Unpin(c.id, id) : store_->Release(c.id, id);
    if (!s.ok()) ReplyStatus(c, seq, s);
    if (r->free()) store_->Delete(id);  // now if unreferenced, else with the last reference
  }
}

void NodeServer::HandlePin(Conn& c, uint64_t seq, const fb::Message* m) {
  for (const auto& id : Ids(m->body_as_PinRequest()->object_ids())) store_->Pin(c.id, id);
  ReplyStatus(c, seq, Status::OK());
}

void NodeServer::HandleContains(Conn& c, uint64_t seq, const fb::Message* m) {
  std::vector<uint8_t> present;
  for (const auto& id : Ids(m->body_as_ContainsRequest()->object_ids())) {
    if (store_->IsSpilled(id)) Restore(id);  // best effort: it is present either way
    present.push_back(store_->IsSealed(id));
  }
  auto& b = Writer(c).builder();
  Writer(c).Add(seq, fb::CreateContainsReply(b, b.CreateVector(present)));
}

void NodeServer::HandleDelete(Conn& c, uint64_t seq, const fb::Message* m) {
  std::vector<uint8_t> deleted;
  for (const auto& id : Ids(m->body_as_DeleteRequest()->object_ids())) deleted.push_back(store_->Delete(id));
  auto& b = Writer(c).builder();
  Writer(c).Add(seq, fb::CreateDeleteReply(b, b.CreateVector(deleted)));
}

void NodeServer::HandleList(Conn& c, uint64_t seq, const fb::Message*) {
  auto& b = Writer(c).builder();
  std::vector<flatbuffers::Offset<fb::ObjectInfo>> infos;
  for (const ObjectEntry* e : store_->List()) {
    fb::UniqueID oid = ToFb(e->id);
    infos.push_back(fb::CreateObjectInfo(b, &oid, e->data_size, e->metadata_size,
                                         static_cast<fb::ObjectState>(e->state), e->ref_count,
                                         e->create_time_ms));
  }
  Writer(c).Add(seq, fb::CreateListReply(b, b.CreateVector(infos)));
}

void NodeServer::HandleSubscribe(Conn& c, uint64_t seq, const fb::Message*) {
  c.subscribed = true;
  ReplyStatus(c, seq, Status::OK());
}

void NodeServer::HandleStats(Conn& c, uint64_t seq, const fb::Message*) {
  StoreStats st = store_->Stats();
  auto& b = Writer(c).builder();
  Writer(c).Add(seq, fb::CreateStatsReply(b, st.capacity_bytes, st.used_bytes, st.num_objects,
                                          st.num_evictions, st.evicted_bytes, conns_.size(),
                                          st.num_spilled, st.spilled_bytes, st.num_restored));
}

void NodeServer::HandleNodeState(Conn& c, uint64_t seq, const fb::Message*) {
  auto& b = Writer(c).builder();
  auto amounts = [&b](const ResourceSet& r) {
    std::vector<flatbuffers::Offset<fb::ResourceAmount>> out;
    for (const auto& [name, amount] : r) {
      out.push_back(fb::CreateResourceAmount(b, b.CreateString(name), amount));
    }
    return b.CreateVector(out);
  };
  auto total = amounts(tasks_->scheduler().total());
  auto available = amounts(tasks_->scheduler().available());
  Writer(c).Add(seq, fb::CreateNodeStateReply(b, total, available));
}

// ---- tasks and actors --------------------------------------------------------------------

void NodeServer::HandleSubmit(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::SubmitTaskRequest* r = m->body_as_SubmitTaskRequest();
  if (r->task_id() == nullptr) {
    return ReplyStatus(c, seq, Status::Error(Code::InvalidRequest, "SubmitTaskRequest without task_id"));
  }
  Submission sub;
  TaskSpec& spec = sub.spec;
  spec.task_id = FromFb(r->task_id());
  if (r->resources()) {
    for (const fb::ResourceAmount* ra : *r->resources()) {
      if (ra->amount() < 0) {
        return ReplyStatus(c, seq, Status::Error(Code::InvalidRequest,
                                                 "negative amount of resource " + ra->name()->str()));
      }
      if (ra->amount() > 0) spec.resources[ra->name()->str()] = ra->amount();
    }
  }
  spec.dependencies = Ids(r->dependencies());
  for (const UniqueID& d : spec.dependencies) {
    if (!store_->IsSealed(d)) sub.missing.push_back(d);
  }
  spec.actor_id = FromFb(r->actor_id());
  spec.actor_creation = r->actor_creation();
  spec.max_concurrency = std::max<uint32_t>(1, r->max_concurrency());
  spec.caller_id = FromFb(r->caller_id());
  spec.sequence_no = r->sequence_no();
  spec.resume_sequence = r->resume_sequence();
  if (r->payload()) spec.payload.assign(reinterpret_cast<const char*>(r->payload()->Data()), r->payload()->size());
  spec.return_ids = Ids(r->return_ids());
  if (r->pin_returns()) {
    for (const UniqueID& id : spec.return_ids) store_->Pin(c.id, id);
  }
  spec.pins = Ids(r->pins());
  for (const UniqueID& id : spec.pins) store_->Pin(kNodeClient, id);
  spec.max_retries = r->max_retries();
  spec.detached = r->detached();
  spec.actor_handles = Ids(r->actor_handles());
  if (r->scheduling() != nullptr) spec.scheduling = r->scheduling()->str();
  if (r->runtime_env() != nullptr) spec.runtime_env = r->runtime_env()->str();
  sub.parent_worker = c.worker ? c.id : 0;
  sub.owner = c.driver && !c.worker && !r->detached() ? c.id : 0;
  tasks_->Submit(std::move(sub));
  ReplyStatus(c, seq, Status::OK());
}

void NodeServer::HandleKillActor(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::KillActorRequest* k = m->body_as_KillActorRequest();
  ReplyStatus(c, seq, tasks_->KillActor(FromFb(k->actor_id()), k->no_restart()));
}

void NodeServer::HandleCancelTask(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::CancelTaskRequest* k = m->body_as_CancelTaskRequest();
  std::string state = tasks_->CancelTask(FromFb(k->task_id()), k->force(), k->recursive(), k->query());
  auto& b = Writer(c).builder();
  Writer(c).Add(seq, fb::CreateCancelTaskReply(b, b.CreateString(state)));
}

void NodeServer::HandleActorHandles(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::ActorHandlesRequest* r = m->body_as_ActorHandlesRequest();
  if (r->actor_ids() != nullptr) {
    std::optional<UniqueID> object;
    if (r->object_id() != nullptr) object = FromFb(r->object_id());
    tasks_->ActorHandles(c.id, Ids(r->actor_ids()), r->add(), r->scoped(), object);
  }
  ReplyStatus(c, seq, Status::OK());
}

// ---- workers -------------------------------------------------------------------------

void NodeServer::HandleRegisterWorker(Conn& c, uint64_t seq, const fb::Message* m) {
  if (!c.worker) {
    c.worker = true;
    const fb::RegisterWorkerRequest* r = m->body_as_RegisterWorkerRequest();
    std::string env = r != nullptr && r->runtime_env() != nullptr ? r->runtime_env()->str() : "";
    tasks_->WorkerRegistered(c.id, c.pid, env);
    PushEvent(WorkerRegistered{c.id, c.pid});
  }
  ReplyStatus(c, seq, Status::OK());
}

void NodeServer::HandleTaskDone(Conn& c, uint64_t seq, const fb::Message* m) {
  const fb::TaskDoneRequest* done = m->body_as_TaskDoneRequest();
  tasks_->TaskDone(c.id, FromFb(done->task_id()), done->retry(), done->exiting());
  if (done->exiting()) c.worker = false;
  ReplyStatus(c, seq, Status::OK());
}

void NodeServer::HandleWorkerBlocked(Conn& c, uint64_t seq, const fb::Message* m) {
  tasks_->SetWorkerBlocked(c.id, m->body_as_WorkerBlockedRequest()->blocked());
  ReplyStatus(c, seq, Status::OK());
}

}  // namespace rayfield
