// The node event loop and its connections (see node_server.h): start and stop, epoll,
// accepting, reading and verifying frames, batched writes (the arena fd rides on the
// first reply), closing, and Hello.
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
  tasks_ = std::make_unique<TaskManager>(
      options_.resources, [this](const UniqueID& id) { return store_->IsSealed(id); },
      options_.socket_path);

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
  if (!options_.arena.prefault) {
    warmer_.Start(arena_.base(), arena_.size(), options_.arena.warm_ahead);
  }
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
    waiters_.Clear();
    close(listen_fd_);
    close(epoll_fd_);
    close(wake_fd_);
    listen_fd_ = epoll_fd_ = wake_fd_ = -1;
    unlink(options_.socket_path.c_str());
    tasks_.reset();
    store_.reset();
    restore_wanted_.clear();
    if (spill_) spill_->Close();  // the spill files go with the node
    spill_.reset();
    warmer_.Stop();
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
      ApplyDecisions(true);
    } while (store_->HasEvents());
    FlushDirty();
  }
}

int NodeServer::NextTimeoutMs() {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<Clock::time_point> deadline = waiters_.NextDeadline();
  if (!deadline) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
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
  conns_.erase(it);
  waiters_.ClientGone(id);
  store_->ClientGone(id);
  tasks_->ClientGone(id, worker, driver, pid);  // its handles drop; a driver's actors end
  ApplyDecisions(false);
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
  const size_t body = static_cast<size_t>(m->body_type());  // a newer client's type: past MAX
  const Route* route = body <= static_cast<size_t>(fb::Body::MAX) ? &Routes()[body] : nullptr;
  if (route == nullptr || route->handle == nullptr) {
    ReplyStatus(c, seq, Status::Error(Code::InvalidRequest,
                                      std::string("unexpected message from a client: ") +
                                          fb::EnumNameBody(m->body_type())));
  } else if (route->worker_only && !c.worker) {
    ReplyStatus(c, seq, Status::Error(Code::NotAWorker, "only a registered worker may send " +
                                                            std::string(fb::EnumNameBody(m->body_type()))));
  } else {
    (this->*route->handle)(c, seq, m);
    ApplyDecisions(false);  // what the task manager decided, before the next message
  }
  return true;
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

}  // namespace rayfield
