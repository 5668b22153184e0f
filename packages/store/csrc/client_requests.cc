// The requests of a node client (see client.h): one function per request type,
// each building its message, sending it over the connection (client_conn.cc) and
// reading the typed reply.
#include <algorithm>
#include <cstring>

#include "client.h"
#include "client_wire.h"

namespace rayfield {

// ---- objects ----------------------------------------------------------------------

Status Client::Create(const UniqueID& id, uint64_t data_size, uint64_t metadata_size,
                      uint64_t* offset) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  fb::UniqueID oid = ToFb(id);
  w.Add(seq, fb::CreateCreateRequest(w.builder(), &oid, data_size, metadata_size));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::CreateReply);
  if (s.ok()) {
    *offset = r.message->body_as_CreateReply()->offset();
    if (*offset + data_size + metadata_size > arena_size_) return ConnError("offset outside the arena");
    Populate(*offset, data_size + metadata_size);
  }
  return s;
}

#define RF_SIMPLE_CALL(BuildExpr)               \
  FrameWriter w;                                \
  uint64_t seq = NextSeq();                     \
  auto& b = w.builder();                        \
  (void)b;                                      \
  w.Add(seq, BuildExpr);                        \
  Reply r;                                      \
  Status s = Call(w, seq, &r);                  \
  if (s.ok()) s = StatusOf(r, fb::Body::OkReply); \
  return s

Status Client::Seal(const UniqueID& id) {
  fb::UniqueID oid = ToFb(id);
  RF_SIMPLE_CALL(fb::CreateSealRequest(b, &oid));
}

Status Client::Abort(const UniqueID& id) {
  fb::UniqueID oid = ToFb(id);
  RF_SIMPLE_CALL(fb::CreateAbortRequest(b, &oid));
}

Status Client::Put(const UniqueID& id, const uint8_t* data, uint64_t size, const uint8_t* meta,
                   uint64_t meta_size, bool wait_reply) {
  fb::UniqueID oid = ToFb(id);
  if (!wait_reply) {  // errors are logged by the node; later requests see the object
    FrameWriter w;
    auto& b = w.builder();
    w.Add(0, fb::CreatePutRequest(b, &oid, b.CreateVector(data, size), b.CreateVector(meta, meta_size)));
    return Send(w);
  }
  RF_SIMPLE_CALL(fb::CreatePutRequest(b, &oid, b.CreateVector(data, size), b.CreateVector(meta, meta_size)));
}

Status Client::Subscribe() { RF_SIMPLE_CALL(fb::CreateSubscribeRequest(b)); }

Status Client::RegisterWorker(const UniqueID& worker_id, const std::string& runtime_env) {
  fb::UniqueID wid = ToFb(worker_id);
  RF_SIMPLE_CALL(fb::CreateRegisterWorkerRequest(
      b, &wid, runtime_env.empty() ? 0 : b.CreateString(runtime_env)));
}

#undef RF_SIMPLE_CALL

Status Client::Get(const std::vector<UniqueID>& ids, int64_t timeout_ms, std::vector<ObjectLoc>* out) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  auto& b = w.builder();
  auto fids = ToFbIds(ids);
  w.Add(seq, fb::CreateGetRequest(b, b.CreateVectorOfStructs(fids), timeout_ms));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::GetReply);
  if (!s.ok()) return s;
  const auto* objs = r.message->body_as_GetReply()->objects();
  out->assign(ids.size(), ObjectLoc{});
  if (objs == nullptr || objs->size() != ids.size()) return ConnError("GetReply of the wrong size");
  for (size_t i = 0; i < ids.size(); ++i) {
    const fb::ObjectLocation* l = objs->Get(i);
    (*out)[i] = ObjectLoc{l->offset(), l->data_size(), l->metadata_size(), l->found()};
    if (l->found() && (l->offset() + l->data_size() + l->metadata_size() > arena_size_)) {
      return ConnError("object location outside the arena");
    }
  }
  return Status::OK();
}

Status Client::Release(const std::vector<UniqueID>& ids, bool free, bool unpin) {
  FrameWriter w;
  auto& b = w.builder();
  auto fids = ToFbIds(ids);
  w.Add(0, fb::CreateReleaseRequest(b, b.CreateVectorOfStructs(fids), free, unpin));
  return Send(w);
}

Status Client::Pin(const std::vector<UniqueID>& ids) {
  FrameWriter w;
  auto& b = w.builder();
  auto fids = ToFbIds(ids);
  w.Add(0, fb::CreatePinRequest(b, b.CreateVectorOfStructs(fids)));
  return Send(w);
}

Status Client::Wait(const std::vector<UniqueID>& ids, uint32_t num_ready, int64_t timeout_ms,
                    std::vector<bool>* ready) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  auto& b = w.builder();
  auto fids = ToFbIds(ids);
  w.Add(seq, fb::CreateWaitRequest(b, b.CreateVectorOfStructs(fids), num_ready, timeout_ms));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::WaitReply);
  if (!s.ok()) return s;
  ready->assign(ids.size(), false);
  const auto* v = r.message->body_as_WaitReply()->ready();
  if (v == nullptr || v->size() != ids.size()) return ConnError("WaitReply of the wrong size");
  for (size_t i = 0; i < ids.size(); ++i) (*ready)[i] = v->Get(i);
  return Status::OK();
}

Status Client::Contains(const std::vector<UniqueID>& ids, std::vector<bool>* out) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  auto& b = w.builder();
  auto fids = ToFbIds(ids);
  w.Add(seq, fb::CreateContainsRequest(b, b.CreateVectorOfStructs(fids)));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::ContainsReply);
  if (!s.ok()) return s;
  out->clear();
  if (auto* v = r.message->body_as_ContainsReply()->present()) {
    for (bool p : *v) out->push_back(p);
  }
  return Status::OK();
}

Status Client::Delete(const std::vector<UniqueID>& ids, std::vector<bool>* out) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  auto& b = w.builder();
  auto fids = ToFbIds(ids);
  w.Add(seq, fb::CreateDeleteRequest(b, b.CreateVectorOfStructs(fids)));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::DeleteReply);
  if (!s.ok()) return s;
  out->clear();
  if (auto* v = r.message->body_as_DeleteReply()->deleted()) {
    for (bool d : *v) out->push_back(d);
  }
  return Status::OK();
}

Status Client::List(std::vector<ObjectInfoData>* out) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  w.Add(seq, fb::CreateListRequest(w.builder()));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::ListReply);
  if (!s.ok()) return s;
  out->clear();
  if (auto* v = r.message->body_as_ListReply()->objects()) {
    for (const fb::ObjectInfo* o : *v) {
      out->push_back({FromFb(o->object_id()), o->data_size(), o->metadata_size(),
                      static_cast<uint8_t>(o->state()), o->ref_count(), o->create_time_ms()});
    }
  }
  return Status::OK();
}

Status Client::Stats(std::vector<uint64_t>* out) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  w.Add(seq, fb::CreateStatsRequest(w.builder()));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::StatsReply);
  if (!s.ok()) return s;
  const fb::StatsReply* st = r.message->body_as_StatsReply();
  *out = {st->capacity_bytes(), st->used_bytes(), st->num_objects(), st->num_evictions(),
          st->evicted_bytes(), st->num_clients(),    st->num_spilled(),
          st->spilled_bytes(), st->num_restored()};
  return Status::OK();
}

// ---- scheduling -------------------------------------------------------------------

Status Client::SubmitTask(const TaskSpec& spec) {
  FrameWriter w;
  auto& b = w.builder();
  std::vector<flatbuffers::Offset<fb::ResourceAmount>> res;
  for (const auto& [name, amount] : spec.resources) {
    res.push_back(fb::CreateResourceAmount(b, b.CreateString(name), amount));
  }
  auto resources = b.CreateVector(res);
  auto deps = ToFbIds(spec.dependencies);
  auto dependencies = b.CreateVectorOfStructs(deps);
  auto payload = b.CreateVector(reinterpret_cast<const uint8_t*>(spec.payload.data()), spec.payload.size());
  fb::UniqueID tid = ToFb(spec.task_id), aid = ToFb(spec.actor_id), cid = ToFb(spec.caller_id);
  auto rids = ToFbIds(spec.return_ids);
  auto return_ids = b.CreateVectorOfStructs(rids);
  auto pids = ToFbIds(spec.pins);
  auto pins = b.CreateVectorOfStructs(pids);
  auto hids = ToFbIds(spec.actor_handles);
  auto handles = spec.actor_handles.empty() ? 0 : b.CreateVectorOfStructs(hids);
  auto scheduling = spec.scheduling.empty() ? 0 : b.CreateString(spec.scheduling);
  auto runtime_env = spec.runtime_env.empty() ? 0 : b.CreateString(spec.runtime_env);
  w.Add(0, fb::CreateSubmitTaskRequest(b, &tid, resources, dependencies,
                                       spec.actor_id.IsNil() ? nullptr : &aid, spec.actor_creation,
                                       spec.max_concurrency, &cid, spec.sequence_no, payload,
                                       return_ids, spec.max_retries, pins, spec.pin_returns,
                                       spec.resume_sequence, spec.detached, handles, scheduling,
                                       runtime_env));
  return Send(w);
}

Status Client::ActorHandles(const std::vector<UniqueID>& actor_ids, bool add,
                            const UniqueID* object_id, bool scoped) {
  FrameWriter w;
  auto& b = w.builder();
  auto fids = ToFbIds(actor_ids);
  auto ids = b.CreateVectorOfStructs(fids);
  fb::UniqueID oid = object_id != nullptr ? ToFb(*object_id) : fb::UniqueID();
  w.Add(0, fb::CreateActorHandlesRequest(b, ids, add, object_id != nullptr ? &oid : nullptr, scoped));
  return Send(w);
}

Status Client::TaskDone(const UniqueID& task_id, bool exiting,
                        const std::vector<InlineResult>& results, bool retry) {
  FrameWriter w;
  auto& b = w.builder();
  for (const InlineResult& r : results) {
    fb::UniqueID oid = ToFb(r.id);
    w.Add(0, fb::CreatePutRequest(b, &oid, b.CreateVector(r.data, r.size),
                                  b.CreateVector(r.metadata, r.metadata_size)));
  }
  fb::UniqueID tid = ToFb(task_id);
  w.Add(0, fb::CreateTaskDoneRequest(b, &tid, exiting, retry));
  int running = running_tasks_.load(std::memory_order_relaxed);  // never below zero
  while (running > 0 && !running_tasks_.compare_exchange_weak(running, running - 1)) {
  }
  return Send(w);
}

Status Client::SetBlocked(bool blocked) {
  FrameWriter w;
  w.Add(0, fb::CreateWorkerBlockedRequest(w.builder(), blocked));
  return Send(w);
}

Status Client::KillActor(const UniqueID& actor_id, bool no_restart) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  fb::UniqueID aid = ToFb(actor_id);
  w.Add(seq, fb::CreateKillActorRequest(w.builder(), &aid, no_restart));
  Reply r;
  Status s = Call(w, seq, &r);
  return s.ok() ? StatusOf(r, fb::Body::OkReply) : s;
}

Status Client::CancelTask(const UniqueID& task_id, bool force, bool recursive, bool query,
                          std::string* state) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  fb::UniqueID tid = ToFb(task_id);
  w.Add(seq, fb::CreateCancelTaskRequest(w.builder(), &tid, force, recursive, query));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::CancelTaskReply);
  if (!s.ok()) return s;
  auto* st = r.message->body_as_CancelTaskReply()->state();
  *state = st ? st->str() : "unknown";
  return Status::OK();
}

Status Client::NodeState(ResourceSet* total, ResourceSet* available) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  w.Add(seq, fb::CreateNodeStateRequest(w.builder()));
  Reply r;
  Status s = Call(w, seq, &r);
  if (s.ok()) s = StatusOf(r, fb::Body::NodeStateReply);
  if (!s.ok()) return s;
  auto fill = [](const flatbuffers::Vector<flatbuffers::Offset<fb::ResourceAmount>>* v,
                 ResourceSet* out) {
    out->clear();
    if (v) for (const fb::ResourceAmount* a : *v) (*out)[a->name()->str()] = a->amount();
  };
  const fb::NodeStateReply* st = r.message->body_as_NodeStateReply();
  fill(st->total(), total);
  fill(st->available(), available);
  return Status::OK();
}

}  // namespace rayfield
