#include "node_server.h"

#include "node_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace rayfield {

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

fb::ObjectLocation Location(const ObjectEntry* e) {
  return fb::ObjectLocation(e->offset, e->data_size, e->metadata_size, true);
}

}  // namespace

NodeServer::NodeServer(NodeOptions options) : options_(std::move(options)) {}

NodeServer::~NodeServer() { Stop(); }

Status NodeServer::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return Status::Error(Code::InvalidRequest, "node server is already running");
  if (options_.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::Error(Code::InvalidRequest, "socket path is longer than " +
                                                   std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                                                   " bytes: " + options_.socket_path);
  }
  Status s = arena_.Open(options_.arena);
  if (!s.ok()) return s;
  store_ = std::make_unique<ObjectStore>(arena_.size());
  spill_ = std::make_unique<SpillFiles>(options_.spill_directory, options_.node_id);
  scheduler_ = std::make_unique<Scheduler>(options_.resources);

  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, options_.socket_path.c_str(), sizeof(addr.sun_path) - 1);
  unlink(options_.socket_path.c_str());
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      chmod(options_.socket_path.c_str(), 0600) != 0 || listen(listen_fd_, 512) != 0) {
    std::string err = Errno("cannot listen on " + options_.socket_path);
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
    arena_.Close();
    return Status::Error(Code::Internal, err);
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // 0: listener
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = UINT64_MAX;  // wake-up eventfd
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  stopping_ = false;
  running_ = true;
  thread_ = std::thread([this] { Loop(); });
  Log(1, "node listening on " + options_.socket_path + " with a " + std::to_string(arena_.size()) +
             "-byte object store");
  return Status::OK();
}

void NodeServer::Stop() {
  if (!running_.exchange(false)) return;
  stopping_ = true;
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) Log(2, Errno("wake-up write"));
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : conns_) close(kv.second->fd);
    conns_.clear();
    gets_.clear();
    waiting_on_.clear();
    deadlines_.clear();
    close(listen_fd_);
    close(epoll_fd_);
    close(wake_fd_);
    listen_fd_ = epoll_fd_ = wake_fd_ = -1;
    unlink(options_.socket_path.c_str());
    scheduler_.reset();
    store_.reset();
    restore_wanted_.clear();
    if (spill_) spill_->Close();  // the spill files go with the node
    spill_.reset();
    arena_.Close();
  }
  events_cv_.notify_all();
}

// ---- the loop ----------------------------------------------------------------

void NodeServer::Loop() {
  std::vector<epoll_event> ready(256);
  auto last_work = Clock::now();
  while (!stopping_) {
    // Spin briefly after work before sleeping: a client in a tight loop sends
    // its next request within microseconds, and a wake-up costs far more.
    int n = 0;
    while (!stopping_ && Clock::now() - last_work < options_.spin) {
      n = epoll_wait(epoll_fd_, ready.data(), static_cast<int>(ready.size()), 0);
      if (n != 0) break;
      sched_yield();
    }
    if (n == 0) n = epoll_wait(epoll_fd_, ready.data(), static_cast<int>(ready.size()), NextTimeoutMs());
    if (n > 0) last_work = Clock::now();
    if (n < 0 && errno != EINTR) {
      Log(3, Errno("epoll_wait"));
      break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < n; ++i) {
      uint64_t key = ready[i].data.u64;
      if (key == UINT64_MAX) continue;  // wake-up
      if (key == 0) {
        Accept();
        continue;
      }
      auto it = conns_.find(key);
      if (it == conns_.end()) continue;
      Conn& c = *it->second;
      if (ready[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) OnReadable(c);
      auto again = conns_.find(key);  // OnReadable may have closed it
      if (again != conns_.end() && (ready[i].events & EPOLLOUT)) Flush(*again->second);
    }
    RetryRestores();
    ExpireGets();
    do {
      DrainStoreEvents();
      DrainScheduler();
    } while (store_->HasEvents());
    FlushDirty();
  }
}

int NodeServer::NextTimeoutMs() {
  std::lock_guard<std::mutex> lock(mu_);
  if (deadlines_.empty()) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadlines_.begin()->first -
                                                                  Clock::now())
                .count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms + 1, 60000)));
}

void NodeServer::Accept() {
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) Log(2, Errno("accept"));
      return;
    }
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    conn->id = next_client_id_++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = conn->id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    conns_.emplace(conn->id, std::move(conn));
  }
}

void NodeServer::OnReadable(Conn& c) {
  ClientID id = c.id;
  bool eof = false;
  static thread_local char buf[1 << 16];
  while (true) {
    ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, n);
      // Bounded per wake-up: epoll is level-triggered and calls again.
      if (static_cast<size_t>(n) < sizeof(buf) ||
          c.in.size() - c.in_pos > options_.max_frame_bytes + kFrameHeader) {
        break;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
    break;
  }
  while (c.in.size() - c.in_pos >= kFrameHeader) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(c.in.data()) + c.in_pos;
    uint32_t len = ReadFrameLength(p);
    if (len > options_.max_frame_bytes) {
      Status s = Status::Error(Code::TooLarge, "frame of " + std::to_string(len) +
                                                   " bytes exceeds the limit of " +
                                                   std::to_string(options_.max_frame_bytes));
      ReplyStatus(c, 0, s);
      Flush(c);
      return Close(id, s.message);
    }
    if (c.in.size() - c.in_pos < kFrameHeader + len) break;
    std::string error;
    const fb::Frame* frame = VerifyFrame(p + kFrameHeader, len, &error);
    if (frame == nullptr) {
      ReplyStatus(c, 0, Status::Error(Code::InvalidRequest, "malformed frame: " + error));
      Flush(c);
      return Close(id, "malformed frame: " + error);
    }
    if (!HandleFrame(c, frame)) return;  // closed
    c.in_pos += kFrameHeader + len;
  }
  if (c.in_pos > 0) {
    c.in.erase(0, c.in_pos);
    c.in_pos = 0;
  }
  if (eof) {
    if (!c.in.empty()) Log(2, "client " + std::to_string(id) + " disconnected mid-frame");
    Close(id, "");
  }
}

FrameWriter& NodeServer::Writer(Conn& c) {
  if (c.writer.empty()) dirty_.push_back(c.id);
  return c.writer;
}

void NodeServer::FlushDirty() {
  std::vector<ClientID> dirty;
  dirty.swap(dirty_);
  for (ClientID id : dirty) {
    auto it = conns_.find(id);
    if (it != conns_.end()) Flush(*it->second);
  }
}

void NodeServer::Flush(Conn& c) {
  if (!c.writer.empty()) c.writer.FinishTo(&c.out);
  while (c.out_pos < c.out.size()) {
    const char* data = c.out.data() + c.out_pos;
    size_t len = c.out.size() - c.out_pos;
    ssize_t n;
    if (c.send_fd) {
      iovec iov{const_cast<char*>(data), len};
      char ctrl[CMSG_SPACE(sizeof(int))] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof(ctrl);
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      int afd = arena_.fd();
      std::memcpy(CMSG_DATA(cm), &afd, sizeof(int));
      n = sendmsg(c.fd, &msg, MSG_NOSIGNAL);
      if (n > 0) c.send_fd = false;
    } else {
      n = send(c.fd, data, len, MSG_NOSIGNAL);
    }
    if (n > 0) {
      c.out_pos += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return Close(c.id, Errno("write"));
  }
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  } else if (c.out.size() - c.out_pos > options_.max_pending_output_bytes) {
    return Close(c.id, "client does not read its replies (" +
                           std::to_string(c.out.size() - c.out_pos) + " bytes pending)");
  }
  bool want = c.out_pos < c.out.size();
  if (want != c.want_write) {
    c.want_write = want;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (want ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.u64 = c.id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  }
}

void NodeServer::Close(ClientID id, const std::string& reason) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (!reason.empty()) {
    Log(2, "closing connection of client " + std::to_string(id) + " (pid " +
               std::to_string(c.pid) + (c.name.empty() ? "" : ", " + c.name) + "): " + reason);
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  bool worker = c.worker, hello = c.hello, driver = c.driver && !c.worker;
  int pid = c.pid;
  std::unordered_map<UniqueID, int, UniqueIDHash> handles;
  handles.swap(c.actor_handles);
  conns_.erase(it);
  for (const auto& [actor_id, n] : handles) {
    for (int i = 0; i < n; ++i) DropActor(actor_id);
  }
  for (auto g = gets_.begin(); g != gets_.end();) {
    g = g->second->client == id ? gets_.erase(g) : std::next(g);
  }
  store_->ClientGone(id);
  if (worker) scheduler_->RemoveWorker(id);
  if (driver) OwnerGone(id, pid);
  if (hello) PushEvent(ClientDisconnected{id, pid, driver});
}

// ---- messages ------------------------------------------------------------------

void NodeServer::ReplyStatus(Conn& c, uint64_t seq, const Status& s) {
  if (s.ok()) {
    if (seq != 0) Writer(c).AddOk(seq);
    return;
  }
  if (seq == 0) {
    Log(2, "client " + std::to_string(c.id) + " (pid " + std::to_string(c.pid) + "): " + s.message);
  }
  Writer(c).AddError(seq, s);
}

bool NodeServer::HandleFrame(Conn& c, const fb::Frame* frame) {
  for (const fb::Message* m : *frame->messages()) {
    if (!HandleMessage(c, m)) return false;
  }
  return true;
}

bool NodeServer::HandleMessage(Conn& c, const fb::Message* m) {
  uint64_t seq = m->seq();
  if (m->body_type() == fb::Body::Hello) return HandleHello(c, seq, m->body_as_Hello());
  if (!c.hello) {
    ClientID id = c.id;
    ReplyStatus(c, seq, Status::Error(Code::InvalidRequest, "the first message must be Hello"));
    Flush(c);
    Close(id, "first message was not Hello");
    return false;
  }
  switch (m->body_type()) {
    case fb::Body::CreateRequest:
      HandleCreate(c, seq, m->body_as_CreateRequest());
      return true;
    case fb::Body::PutRequest:
      HandlePut(c, seq, m->body_as_PutRequest());
      return true;
    case fb::Body::GetRequest:
      HandleGet(c, seq, m->body_as_GetRequest());
      return true;
    case fb::Body::WaitRequest:
      HandleWait(c, seq, m->body_as_WaitRequest());
      return true;
    case fb::Body::SubmitTaskRequest:
      HandleSubmit(c, seq, m->body_as_SubmitTaskRequest());
      return true;
    case fb::Body::RegisterWorkerRequest:
    case fb::Body::TaskDoneRequest:
    case fb::Body::WorkerBlockedRequest:
      return HandleWorkerMessage(c, seq, m);
    default:
      HandleObjectQuery(c, seq, m);
      return true;
  }
}

bool NodeServer::HandleHello(Conn& c, uint64_t seq, const fb::Hello* h) {
  ClientID id = c.id;
  if (c.hello) {
    ReplyStatus(c, seq, Status::Error(Code::InvalidRequest, "Hello sent twice"));
    return true;
  }
  if (h->protocol_version() != kProtocolVersion) {
    Status s = Status::Error(Code::ProtocolMismatch,
                             "protocol version mismatch: client speaks " +
                                 std::to_string(h->protocol_version()) + ", node speaks " +
                                 std::to_string(kProtocolVersion));
    s.requested_bytes = h->protocol_version();
    s.capacity_bytes = kProtocolVersion;
    ReplyStatus(c, seq, s);
    Flush(c);
    Close(id, s.message);
    return false;
  }
  c.hello = true;
  c.pid = h->pid();
  c.driver = h->kind() == fb::ClientKind::Driver;
  c.name = h->name() ? h->name()->str() : "";
  c.send_fd = true;
  auto& b = Writer(c).builder();
  fb::UniqueID node = ToFb(options_.node_id);
  Writer(c).Add(seq, fb::CreateHelloReply(b, kProtocolVersion, &node, arena_.size(), c.id));
  return true;
}

void NodeServer::HandleCreate(Conn& c, uint64_t seq, const fb::CreateRequest* r) {
  if (r->object_id() == nullptr) {
    return ReplyStatus(c, seq, Status::Error(Code::InvalidRequest, "CreateRequest without object_id"));
  }
  uint64_t offset = 0;
  Status s = CreateObject(c.id, FromFb(r->object_id()), r->data_size(), r->metadata_size(), &offset);
  if (!s.ok()) return ReplyStatus(c, seq, s);
  Writer(c).Add(seq, fb::CreateCreateReply(Writer(c).builder(), offset));
}

void NodeServer::HandlePut(Conn& c, uint64_t seq, const fb::PutRequest* r) {
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
  ReplyStatus(c, seq, s);
}

void NodeServer::HandleGet(Conn& c, uint64_t seq, const fb::GetRequest* r) {
  auto g = std::make_unique<PendingGet>();
  g->client = c.id;
  g->seq = seq;
  size_t n = r->object_ids() ? r->object_ids()->size() : 0;
  g->ids.reserve(n);
  g->locs.assign(n, fb::ObjectLocation());
  g->remaining = 0;
  for (size_t i = 0; i < n; ++i) {
    UniqueID id = FromFb(r->object_ids()->Get(i));
    g->ids.push_back(id);
    if (store_->IsSpilled(id)) Restore(id);
    if (const ObjectEntry* e = store_->Acquire(c.id, id)) {
      g->locs[i] = Location(e);
    } else {
      g->remaining++;
    }
  }
  if (g->remaining == 0 || r->timeout_ms() == 0) return ReplyGet(*g);
  Park(std::move(g), r->timeout_ms());
}

// Registers a get or wait that cannot be answered yet: it completes when its objects are
// sealed (or restored from spill files, once space is freed) or at its deadline. Evicted
// objects nobody can rebuild are answered with an error object at once, never left to hang.
void NodeServer::Park(std::unique_ptr<PendingGet> g, int64_t timeout_ms) {
  uint64_t key = next_get_key_++;
  std::vector<UniqueID> lost;
  for (size_t i = 0; i < g->ids.size(); ++i) {
    if (g->locs[i].found()) continue;
    waiting_on_[g->ids[i]].push_back(key);
    if (store_->WasEvicted(g->ids[i])) {
      lost.push_back(g->ids[i]);
    } else if (store_->IsSpilled(g->ids[i])) {
      restore_wanted_.insert(g->ids[i]);
    } else if (store_->Find(g->ids[i]) == nullptr) {
      PushEvent(ObjectMissing{g->ids[i], g->client});
    }
  }
  if (timeout_ms > 0) {
    deadlines_.emplace(Clock::now() + std::chrono::milliseconds(timeout_ms), key);
  }
  gets_.emplace(key, std::move(g));
  for (const auto& id : lost) {
    SealError(id, "LOST", "object " + id.Hex() + " was evicted from the store of node " +
                              options_.socket_path + " and cannot be rebuilt");
  }
}

void NodeServer::ReplyGet(PendingGet& g) {
  auto it = conns_.find(g.client);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  auto& b = Writer(c).builder();
  if (g.wait_only) {
    std::vector<uint8_t> ready;
    for (const auto& l : g.locs) ready.push_back(l.found());
    Writer(c).Add(g.seq, fb::CreateWaitReply(b, b.CreateVector(ready)));
    return;
  }
  auto vec = b.CreateVectorOfStructs(g.locs);
  Writer(c).Add(g.seq, fb::CreateGetReply(b, vec));
}

void NodeServer::HandleWait(Conn& c, uint64_t seq, const fb::WaitRequest* r) {
  auto g = std::make_unique<PendingGet>();
  g->client = c.id;
  g->seq = seq;
  g->wait_only = true;
  size_t n = r->object_ids() ? r->object_ids()->size() : 0, ready = 0;
  g->locs.assign(n, fb::ObjectLocation());
  for (size_t i = 0; i < n; ++i) {
    g->ids.push_back(FromFb(r->object_ids()->Get(i)));
    if (store_->IsSpilled(g->ids.back())) Restore(g->ids.back());  // best effort
    if (store_->IsSealed(g->ids.back())) {
      g->locs[i] = fb::ObjectLocation(0, 0, 0, true);
      ready++;
    }
  }
  size_t needed = std::min<size_t>(r->num_ready(), n);
  if (ready >= needed || r->timeout_ms() == 0) return ReplyGet(*g);
  g->remaining = needed - ready;
  Park(std::move(g), r->timeout_ms());
}

void NodeServer::ExpireGets() {
  auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    uint64_t key = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = gets_.find(key);
    if (it == gets_.end()) continue;
    ReplyGet(*it->second);
    gets_.erase(it);
  }
}

void NodeServer::HandleObjectQuery(Conn& c, uint64_t seq, const fb::Message* m) {
  auto& b = Writer(c).builder();
  auto ids = [](const flatbuffers::Vector<const fb::UniqueID*>* v) {
    std::vector<UniqueID> out;
    if (v) for (const fb::UniqueID* id : *v) out.push_back(FromFb(id));
    return out;
  };
  switch (m->body_type()) {
    case fb::Body::SealRequest:
      return ReplyStatus(c, seq, store_->Seal(c.id, FromFb(m->body_as_SealRequest()->object_id())));
    case fb::Body::AbortRequest:
      return ReplyStatus(c, seq, store_->Abort(c.id, FromFb(m->body_as_AbortRequest()->object_id())));
    case fb::Body::ReleaseRequest: {
      bool free = m->body_as_ReleaseRequest()->free();
      bool unpin = m->body_as_ReleaseRequest()->unpin();
      for (const auto& id : ids(m->body_as_ReleaseRequest()->object_ids())) {
        Status s = unpin ? store_->Unpin(c.id, id) : store_->Release(c.id, id);
        if (!s.ok()) ReplyStatus(c, seq, s);
        if (free) store_->Delete(id);  // now if unreferenced, else with the last reference
      }
      return;
    }
    case fb::Body::KillActorRequest: {
      auto* k = m->body_as_KillActorRequest();
      return ReplyStatus(c, seq, KillActor(FromFb(k->actor_id()), k->no_restart()));
    }
    case fb::Body::CancelTaskRequest: {
      auto* k = m->body_as_CancelTaskRequest();
      std::string state = CancelTask(FromFb(k->task_id()), k->force(), k->recursive(), k->query());
      return Writer(c).Add(seq, fb::CreateCancelTaskReply(b, b.CreateString(state)));
    }
    case fb::Body::PinRequest:
      for (const auto& id : ids(m->body_as_PinRequest()->object_ids())) store_->Pin(c.id, id);
      return ReplyStatus(c, seq, Status::OK());
    case fb::Body::ActorHandlesRequest:
      HandleActorHandles(c, m->body_as_ActorHandlesRequest());
      return ReplyStatus(c, seq, Status::OK());
    case fb::Body::ContainsRequest: {
      std::vector<uint8_t> present;
      for (const auto& id : ids(m->body_as_ContainsRequest()->object_ids())) {
        if (store_->IsSpilled(id)) Restore(id);  // best effort: it is present either way
        present.push_back(store_->IsSealed(id));
      }
      return Writer(c).Add(seq, fb::CreateContainsReply(b, b.CreateVector(present)));
    }
    case fb::Body::DeleteRequest: {
      std::vector<uint8_t> deleted;
      for (const auto& id : ids(m->body_as_DeleteRequest()->object_ids()))
        deleted.push_back(store_->Delete(id));
      return Writer(c).Add(seq, fb::CreateDeleteReply(b, b.CreateVector(deleted)));
    }
    case fb::Body::ListRequest: {
      std::vector<flatbuffers::Offset<fb::ObjectInfo>> infos;
      for (const ObjectEntry* e : store_->List()) {
        fb::UniqueID oid = ToFb(e->id);
        infos.push_back(fb::CreateObjectInfo(b, &oid, e->data_size, e->metadata_size,
                                             static_cast<fb::ObjectState>(e->state), e->ref_count,
                                             e->create_time_ms));
      }
      return Writer(c).Add(seq, fb::CreateListReply(b, b.CreateVector(infos)));
    }
    case fb::Body::SubscribeRequest:
      c.subscribed = true;
      return ReplyStatus(c, seq, Status::OK());
    case fb::Body::NodeStateRequest: {
      auto amounts = [&b](const ResourceSet& r) {
        std::vector<flatbuffers::Offset<fb::ResourceAmount>> out;
        for (const auto& [name, amount] : r) {
          out.push_back(fb::CreateResourceAmount(b, b.CreateString(name), amount));
        }
        return b.CreateVector(out);
      };
      auto total = amounts(scheduler_->total());
      auto available = amounts(scheduler_->available());
      return Writer(c).Add(seq, fb::CreateNodeStateReply(b, total, available));
    }
    case fb::Body::StatsRequest: {
      StoreStats st = store_->Stats();
      return Writer(c).Add(seq, fb::CreateStatsReply(b, st.capacity_bytes, st.used_bytes,
                                                      st.num_objects, st.num_evictions,
                                                      st.evicted_bytes, conns_.size(),
                                                      st.num_spilled, st.spilled_bytes,
                                                      st.num_restored));
    }
    default:
      return ReplyStatus(c, seq, Status::Error(Code::InvalidRequest,
                                               std::string("unexpected message from a client: ") +
                                                   fb::EnumNameBody(m->body_type())));
  }
}

void NodeServer::HandleSubmit(Conn& c, uint64_t seq, const fb::SubmitTaskRequest* r) {
  if (r->task_id() == nullptr) {
    return ReplyStatus(c, seq, Status::Error(Code::InvalidRequest, "SubmitTaskRequest without task_id"));
  }
  TaskSpec spec;
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
  std::vector<UniqueID> missing;
  if (r->dependencies()) {
    for (const fb::UniqueID* d : *r->dependencies()) {
      spec.dependencies.push_back(FromFb(d));
      if (!store_->IsSealed(spec.dependencies.back())) missing.push_back(spec.dependencies.back());
    }
  }
  spec.actor_id = FromFb(r->actor_id());
  spec.actor_creation = r->actor_creation();
  spec.max_concurrency = std::max<uint32_t>(1, r->max_concurrency());
  spec.caller_id = FromFb(r->caller_id());
  spec.sequence_no = r->sequence_no();
  spec.resume_sequence = r->resume_sequence();
  if (r->payload()) spec.payload.assign(reinterpret_cast<const char*>(r->payload()->Data()), r->payload()->size());
  TaskRecord rec;
  if (r->return_ids()) {
    for (const fb::UniqueID* id : *r->return_ids()) {
      rec.return_ids.push_back(FromFb(id));
      if (r->pin_returns()) store_->Pin(c.id, rec.return_ids.back());
    }
  }
  if (r->pins()) {
    for (const fb::UniqueID* id : *r->pins()) {
      rec.pins.push_back(FromFb(id));
      store_->Pin(kNodeClient, rec.pins.back());
    }
  }
  rec.retries_left = r->max_retries();
  rec.actor_task = !spec.actor_id.IsNil();
  rec.actor_id = spec.actor_id;
  if (r->actor_handles()) {
    for (const fb::UniqueID* id : *r->actor_handles()) spec.actor_handles.push_back(FromFb(id));
  }
  rec.held_actors = spec.actor_handles;
  if (rec.actor_task) rec.held_actors.push_back(spec.actor_id);  // a call holds its actor
  for (const UniqueID& a : rec.held_actors) HoldActor(a);
  if (rec.retries_left != 0 && !rec.actor_task) rec.retry_spec = std::make_unique<TaskSpec>(spec);
  UniqueID task_id = spec.task_id;
  if (c.worker) RecordChild(c.id, task_id);
  tasks_[task_id] = std::move(rec);
  if (spec.actor_creation) {
    ActorRecord& actor = actors_[spec.actor_id];
    actor.creation = std::make_unique<TaskSpec>(spec);
    actor.creation->return_ids.clear();  // a restart's result is not awaited
    actor.restarts_left = r->max_retries();
    actor.owner = c.driver && !c.worker && !r->detached() ? c.id : 0;
    dead_actors_.erase(spec.actor_id);
    remote_actors_.erase(spec.actor_id);  // (re)created here, e.g. after its node died
  } else if (rec.actor_task) {
    auto dead = dead_actors_.find(spec.actor_id);
    if (dead != dead_actors_.end()) return FailTask(task_id, "ACTOR_DIED", dead->second);
    if (remote_actors_.count(spec.actor_id) || !actors_.count(spec.actor_id)) {
      HoldForElsewhere(std::move(spec));
      ReplyStatus(c, seq, Status::OK());
      return;
    }
  }
  scheduler_->SubmitTask(std::move(spec), missing);
  ReplyStatus(c, seq, Status::OK());
}

bool NodeServer::HandleWorkerMessage(Conn& c, uint64_t seq, const fb::Message* m) {
  if (m->body_type() == fb::Body::RegisterWorkerRequest) {
    if (!c.worker) {
      c.worker = true;
      scheduler_->AddWorker(c.id);
      worker_pids_[c.id] = c.pid;
      PushEvent(WorkerRegistered{c.id, c.pid});
    }
    ReplyStatus(c, seq, Status::OK());
    return true;
  }
  if (!c.worker) {
    ReplyStatus(c, seq, Status::Error(Code::NotAWorker, "only a registered worker may send " +
                                                            std::string(fb::EnumNameBody(m->body_type()))));
    return true;
  }
  if (m->body_type() == fb::Body::TaskDoneRequest) {
    auto* done = m->body_as_TaskDoneRequest();
    UniqueID task_id = FromFb(done->task_id());
    for (const auto& [actor_id, actor] : actors_) {  // (a worker hosts at most one actor)
      if (actor.worker == c.id && actor.creation && actor.creation->task_id == task_id) {
        PushEvent(ActorStateChanged{actor_id, true});
        break;
      }
    }
    scheduler_->TaskFinished(c.id, task_id);
    running_plain_.erase(c.id);
    EndRun(task_id, done->retry());
    if (done->exiting()) {
      c.worker = false;
      scheduler_->RemoveWorker(c.id);
    }
  } else {
    scheduler_->SetWorkerBlocked(c.id, m->body_as_WorkerBlockedRequest()->blocked());
  }
  ReplyStatus(c, seq, Status::OK());
  return true;
}

// ---- effects -------------------------------------------------------------------

void NodeServer::DrainStoreEvents() {
  while (store_->HasEvents()) {
    for (const StoreEvent& ev : store_->TakeEvents()) {
      if (ev.spill_key != 0) spill_->Remove(ev.spill_key);  // deleted: its file goes too
      if (ev.kind == StoreEvent::Deleted && !object_handles_.empty()) {
        auto held = object_handles_.find(ev.id);
        if (held != object_handles_.end()) {
          std::vector<UniqueID> actors = std::move(held->second);
          object_handles_.erase(held);
          for (const UniqueID& a : actors) DropActor(a);
        }
      }
      if (ev.kind == StoreEvent::Sealed) {
        scheduler_->ObjectAvailable(ev.id);
        CompleteWaiters(ev.id);
      }
      for (auto& kv : conns_) {
        Conn& c = *kv.second;
        if (!c.subscribed) continue;
        fb::UniqueID oid = ToFb(ev.id);
        auto& b = Writer(c).builder();
        Writer(c).Add(0, fb::CreateObjectNotification(b, &oid, static_cast<fb::ObjectEvent>(ev.kind),
                                                      ev.data_size, ev.metadata_size));
      }
    }
  }
}

void NodeServer::CompleteWaiters(const UniqueID& id) {
  auto w = waiting_on_.find(id);
  if (w == waiting_on_.end()) return;
  std::vector<uint64_t> keys;
  keys.swap(w->second);
  waiting_on_.erase(w);
  for (uint64_t key : keys) {
    auto g = gets_.find(key);
    if (g == gets_.end()) continue;
    PendingGet& pg = *g->second;
    for (size_t i = 0; i < pg.ids.size() && pg.remaining > 0; ++i) {
      if (pg.ids[i] != id || pg.locs[i].found()) continue;
      if (pg.wait_only) {
        pg.locs[i] = fb::ObjectLocation(0, 0, 0, true);
        pg.remaining--;
      } else if (const ObjectEntry* e = store_->Acquire(pg.client, id)) {
        pg.locs[i] = Location(e);
        pg.remaining--;
      }
    }
    if (pg.remaining == 0) {
      ReplyGet(pg);
      gets_.erase(g);
    }
  }
}

void NodeServer::DrainScheduler() {
  // Acting on a decision can feed the scheduler (a retried task): drain until quiet.
  for (std::vector<Decision> batch = scheduler_->TakeDecisions(); !batch.empty();
       batch = scheduler_->TakeDecisions()) {
    DrainDecisions(batch);
  }
}

void NodeServer::DrainDecisions(std::vector<Decision>& batch) {
  for (Decision& d : batch) {
    if (auto* dispatch = std::get_if<DispatchTask>(&d)) {
      auto it = conns_.find(dispatch->worker);
      if (it == conns_.end()) continue;  // the scheduler learns of the loss from Close()
      Conn& c = *it->second;
      auto& b = Writer(c).builder();
      const TaskSpec& spec = *dispatch->spec;
      auto rec = tasks_.find(spec.task_id);
      int32_t retries_left = 0;
      if (rec != tasks_.end()) {
        rec->second.worker = c.id;
        rec->second.dispatch_seq = ++dispatch_count_;
        if (rec->second.retry_spec) retries_left = rec->second.retries_left;
      }
      if (spec.actor_id.IsNil()) running_plain_[c.id] = spec.task_id;
      if (spec.actor_creation) actors_[spec.actor_id].worker = c.id;
      std::vector<flatbuffers::Offset<fb::ResourceInstance>> inst;
      for (const auto& g : dispatch->instances) {
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
                                              spec.actor_creation, instances, payload, retries_left,
                                              spec.attempt, resources));
    } else {
      if (auto* lost = std::get_if<WorkerLost>(&d)) HandleWorkerLost(*lost);
      std::visit([this](auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (!std::is_same_v<T, DispatchTask>) PushEvent(std::move(v));
      }, d);
    }
  }
}

void NodeServer::PushEvent(NodeEvent e) {
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    // At most one NeedWorker waits in the queue: the newest says it all.
    auto same = events_.end();
    if (std::holds_alternative<NeedWorker>(e)) {
      same = std::find_if(events_.begin(), events_.end(),
                          [](const NodeEvent& q) { return std::holds_alternative<NeedWorker>(q); });
    }
    if (same != events_.end()) {
      *same = std::move(e);
    } else {
      events_.push_back(std::move(e));
    }
  }
  events_cv_.notify_all();
}

// ---- host API --------------------------------------------------------------------

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
    } else if (auto w = worker_pids_.find(e->creator); w != worker_pids_.end()) {
      owner = w->second;
    }
    out.push_back({e->id, e->data_size, e->metadata_size, e->state, e->ref_count, e->create_time_ms,
                   owner, pins, e->buffer_count, e->spilled});
  }
  return out;
}

SchedulerSnapshot NodeServer::SchedulerState() {
  std::lock_guard<std::mutex> lock(mu_);
  return scheduler_ ? scheduler_->Snapshot() : SchedulerSnapshot{};
}

void NodeServer::HoldForElsewhere(TaskSpec spec) {
  UniqueID task_id = spec.task_id, actor_id = spec.actor_id;
  elsewhere_.emplace(task_id, std::move(spec));
  PushEvent(ActorTaskElsewhere{task_id, actor_id});
}

std::optional<TaskSpec> NodeServer::TakeTask(const UniqueID& task_id, ClientID pin_for,
                                             std::vector<UniqueID>* kept_pins,
                                             std::vector<UniqueID>* kept_handles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return std::nullopt;
  auto rec = tasks_.find(task_id);
  std::optional<TaskSpec> spec;
  UniqueID moved_actor;
  if (auto held = elsewhere_.find(task_id); held != elsewhere_.end()) {
    spec = std::move(held->second);
    elsewhere_.erase(held);
  } else if (rec != tasks_.end() && rec->second.actor_task) {
    auto a = actors_.find(rec->second.actor_id);
    bool unplaced_creation = a != actors_.end() && a->second.worker == 0 && a->second.creation &&
                             a->second.creation->task_id == task_id;
    if (!unplaced_creation) return std::nullopt;
    spec = scheduler_->TakeTask(task_id);
    if (spec) moved_actor = rec->second.actor_id;
  } else {
    spec = scheduler_->TakeTask(task_id);
  }
  if (!spec) return spec;
  if (rec != tasks_.end()) {  // what the node kept: the task may run elsewhere with it
    spec->return_ids = rec->second.return_ids;
    spec->max_retries = rec->second.retries_left;
    if (pin_for != 0 && conns_.count(pin_for)) {  // before FinishTask drops the node's pins
      for (const auto& id : rec->second.pins) {
        store_->Pin(pin_for, id);
        if (kept_pins != nullptr) kept_pins->push_back(id);
      }
      Conn& keeper = *conns_[pin_for];  // its handles, before FinishTask drops the task's
      for (const auto& a : rec->second.held_actors) {
        keeper.actor_handles[a]++;
        HoldActor(a);
        if (kept_handles != nullptr) kept_handles->push_back(a);
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
      std::optional<TaskSpec> call = scheduler_->TakeTask(id);
      if (call) HoldForElsewhere(std::move(*call));
    }
  }
  return spec;
}

void NodeServer::SetTotalResources(ResourceSet total) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.resources = total;
  if (!scheduler_) return;
  scheduler_->SetTotalResources(std::move(total));
  DrainScheduler();
  FlushDirty();
}

}  // namespace rayfield
