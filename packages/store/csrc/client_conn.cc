// The client's connection to its node (see client.h): connect and handshake (the
// arena's fd arrives with the HelloReply and is mapped once), framing, sending,
// the leader/follower reading of replies, and the queues of pushed messages (task
// dispatches, object notifications) with the task waiters' hand-off. The requests
// built on it are in client_requests.cc.
#include "client.h"
#include "client_wire.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "arena.h"

namespace rayfield {

namespace {

int64_t RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now())
                .count();
  return std::max<int64_t>(0, ms);
}

// One recvmsg into `buf`, keeping a passed file descriptor if any.
ssize_t Receive(int fd, int flags, int* passed_fd, std::string* buf) {
  char data[65536];
  char ctrl[CMSG_SPACE(sizeof(int))];
  iovec iov{data, sizeof(data)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof(ctrl);
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | flags);
  if (n <= 0) return n;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      std::memcpy(passed_fd, CMSG_DATA(cm), sizeof(int));
    }
  }
  buf->append(data, n);
  return n;
}

}  // namespace

// Maps the pages of a large region in one call, so that writing it runs at
// memory bandwidth instead of taking one page fault per 4 KiB.
// Pages stay mapped in this process once populated, so each 2 MiB chunk is done once.
void Client::Populate(uint64_t offset, uint64_t size) {
  if (size < kPopulateBytes) return;
  constexpr uint64_t kChunk = 2ull << 20;
  std::lock_guard<std::mutex> lock(populate_mu_);
  if (populated_.empty()) populated_.assign(arena_size_ / kChunk + 1, false);
  uint64_t first = offset / kChunk, last = (offset + size - 1) / kChunk;
  for (uint64_t c = first; c <= last;) {
    if (populated_[c]) {
      ++c;
      continue;
    }
    uint64_t run_end = c;
    while (run_end <= last && !populated_[run_end]) populated_[run_end++] = true;
    uint64_t begin = c * kChunk, end = std::min(run_end * kChunk, arena_size_);
    madvise(base_ + begin, end - begin, 23 /* MADV_POPULATE_WRITE */);
    c = run_end;
  }
}

// Polls the socket without sleeping for a few microseconds: the node
// usually answers within that time, and sleeping costs a wake-up.
bool Client::TryReceive(int* passed_fd, std::string* buf, const std::atomic<bool>* interrupted) {
  // A client in a busy exchange (a message in the last 2 ms) spins longer: its next
  // message is likely a few hundred microseconds away, and a wake-up costs as much.
  auto now = std::chrono::steady_clock::now();
  if (interrupted != nullptr && running_tasks_.load(std::memory_order_relaxed) > 0 &&
      queued_tasks_.load(std::memory_order_relaxed) > 0) {
    ssize_t n = Receive(fd_, MSG_DONTWAIT, passed_fd, buf);
    if (n > 0) last_receive_ = now;
    return n > 0;
  }
  bool hot = now - last_receive_ < std::chrono::milliseconds(2);
  auto until = now + std::chrono::microseconds(hot ? kHotSpinMicros : kSpinMicros);
  do {
    ssize_t n = Receive(fd_, MSG_DONTWAIT, passed_fd, buf);
    if (n > 0) {
      last_receive_ = std::chrono::steady_clock::now();
      return true;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    sched_yield();  // let a runnable thread (the node, a worker) have this core
  } while (std::chrono::steady_clock::now() < until &&
           (interrupted == nullptr || !interrupted->load(std::memory_order_relaxed)));
  return false;
}

Client::~Client() {
  Close();
  UnmapArena(base_, arena_size_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

bool Client::closed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

// The socket and the wake-up eventfd are closed at once unless a thread is reading the
// socket (it may poll both); that thread closes them when it stops reading (WaitUntil).
// Only the reader polls or drains the eventfd, and InterruptReader writes to it only while
// a thread reads (both checked under mu_), so no thread touches it once it is closed.
void Client::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) {
    shutdown(fd_, SHUT_RDWR);  // wakes a thread blocked in poll
    if (!reading_) {
      close(fd_);
      fd_ = -1;
    }
  }
  if (!reading_ && wake_fd_ >= 0) {
    close(wake_fd_);
    wake_fd_ = -1;
  }
  closed_ = true;
  if (close_reason_.empty()) close_reason_ = "the client was closed";
  WakeAll();
}

Status Client::Connect(const std::string& path, uint8_t kind, const std::string& name,
                       int64_t timeout_ms) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return ConnError("socket path too long: " + path);
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  if (wake_fd_ < 0) wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return ConnError(std::string("eventfd: ") + std::strerror(errno));
  while (true) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    int err = errno;
    close(fd_);
    fd_ = -1;
    if (RemainingMs(deadline) == 0 || (err != ENOENT && err != ECONNREFUSED && err != EAGAIN)) {
      return ConnError("cannot connect to node socket " + path + ": " + std::strerror(err));
    }
    usleep(10000);
  }
  return Handshake(kind, name, RemainingMs(deadline) + 1);
}

Status Client::Handshake(uint8_t kind, const std::string& name, int64_t timeout_ms) {
  FrameWriter w;
  uint64_t seq = NextSeq();
  auto& b = w.builder();
  w.Add(seq, fb::CreateHello(b, kProtocolVersion, static_cast<fb::ClientKind>(kind), getpid(),
                             b.CreateString(name)));
  Status s = Send(w);
  if (!s.ok()) return s;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (replies_.count(seq)) break;
    }
    int64_t left = RemainingMs(deadline);
    if (left == 0) return ConnError("no handshake reply from the node");
    s = ReadOneFrame(left);
    if (!s.ok()) return s;
  }
  Reply r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r = std::move(replies_[seq]);
    replies_.erase(seq);
  }
  if (r.message->body_type() == fb::Body::ErrorReply) {
    const fb::ErrorReply* e = r.message->body_as_ErrorReply();
    Status err = Status::Error(static_cast<Code>(e->code()), e->message() ? e->message()->str() : "");
    err.requested_bytes = e->requested_bytes();
    err.capacity_bytes = e->capacity_bytes();
    return err;
  }
  const fb::HelloReply* h = r.message->body_as_HelloReply();
  if (h == nullptr) return ConnError("unexpected handshake reply");
  if (h->protocol_version() != kProtocolVersion) {
    Status err = Status::Error(Code::ProtocolMismatch,
                               "protocol version mismatch: client speaks " +
                                   std::to_string(kProtocolVersion) + ", node speaks " +
                                   std::to_string(h->protocol_version()));
    err.requested_bytes = kProtocolVersion;
    err.capacity_bytes = h->protocol_version();
    return err;
  }
  if (received_fd_ < 0) return ConnError("the node did not pass its arena file descriptor");
  client_id_ = h->client_id();
  node_id_ = FromFb(h->node_id());
  arena_size_ = h->arena_size();
  std::string error;
  base_ = MapArena(received_fd_, arena_size_, &error);
  close(received_fd_);
  received_fd_ = -1;
  if (base_ == nullptr) return ConnError(error);
  return Status::OK();
}

uint64_t Client::NextSeq() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_++;
}

Status Client::Send(FrameWriter& w) {
  std::string bytes;
  w.FinishTo(&bytes);
  std::lock_guard<std::mutex> lock(send_mu_);
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      std::lock_guard<std::mutex> l2(mu_);
      closed_ = true;
      if (close_reason_.empty()) close_reason_ = std::string("send failed: ") + std::strerror(errno);
      WakeAll();
      return ConnError(close_reason_);
    }
  }
  return Status::OK();
}

// Reads one frame from the socket (only one thread at a time does this) and
// files its messages: replies by seq, pushes into their queues.
Status Client::ReadOneFrame(int64_t timeout_ms, const Waiters* reader) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  // A task waiter stops reading when it is sent to the task queue (InterruptReader).
  const std::atomic<bool>* interrupted = reader == &task_waiters_ ? &reader_interrupted_ : nullptr;
  while (true) {
    size_t avail = rbuf_.size() - rpos_;
    if (avail >= kFrameHeader) {
      uint32_t len = ReadFrameLength(reinterpret_cast<const uint8_t*>(rbuf_.data()) + rpos_);
      if (avail >= kFrameHeader + len) {
        auto frame = std::make_shared<std::string>(rbuf_, rpos_ + kFrameHeader, len);
        rpos_ += kFrameHeader + len;
        if (rpos_ == rbuf_.size()) {
          rbuf_.clear();
          rpos_ = 0;
        }
        std::string error;
        const fb::Frame* f =
            VerifyFrame(reinterpret_cast<const uint8_t*>(frame->data()), frame->size(), &error);
        if (f == nullptr) return ConnError("malformed frame from the node: " + error);
        std::lock_guard<std::mutex> lock(mu_);
        size_t new_tasks = 0;
        bool new_other = false;
        for (const fb::Message* m : *f->messages()) {
          if (m->seq() != 0) {
            replies_[m->seq()] = Reply{frame, m};
            new_other = true;
          } else if (auto* n = m->body_as_ObjectNotification()) {
            new_other = true;
            notifications_.push_back({n->event() != fb::ObjectEvent::Sealed,
                                      n->event() == fb::ObjectEvent::Evicted, FromFb(n->object_id()),
                                      n->data_size(), n->metadata_size()});
          } else if (auto* t = m->body_as_TaskDispatch()) {
            TaskAssignment a;
            a.task_id = FromFb(t->task_id());
            a.actor_id = FromFb(t->actor_id());
            a.actor_creation = t->actor_creation();
            if (t->instances()) {
              for (const fb::ResourceInstance* ri : *t->instances()) {
                a.instances.push_back({ri->name()->str(), ri->index(), ri->amount()});
              }
            }
            if (t->payload()) a.payload.assign(reinterpret_cast<const char*>(t->payload()->Data()), t->payload()->size());
            a.retries_left = t->retries_left();
            a.attempt = t->attempt();
            if (t->resources()) {
              for (const fb::ResourceAmount* ra : *t->resources()) a.resources[ra->name()->str()] = ra->amount();
            }
            tasks_.push_back(std::move(a));
            ++new_tasks;
          } else if (auto* e = m->body_as_ErrorReply()) {
            Log(2, "node reported: " + (e->message() ? e->message()->str() : std::string()));
          }
        }
        queued_tasks_.store(tasks_.size(), std::memory_order_relaxed);
        if (new_other) reply_waiters_.cv.notify_all();
        // A task waiter that reads goes to the queue itself (its WaitUntil takes the token).
        if (new_tasks > 0) SendTaskWaiter(reader != &task_waiters_);
        return Status::OK();
      }
    }
    if (interrupted != nullptr && reader_interrupted_.exchange(false)) {
      DrainWakeFd();
      return Status::OK();  // nothing read; the caller looks at the queue
    }
    int64_t left = timeout_ms < 0 ? -1 : RemainingMs(deadline);
    if (timeout_ms >= 0 && left == 0) return Status::Error(Code::Timeout, "timed out");
    if (TryReceive(&received_fd_, &rbuf_, interrupted)) continue;  // arrived while we spun
    if (interrupted != nullptr && interrupted->load()) continue;
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int pr = poll(p, interrupted != nullptr ? 2 : 1,
                  static_cast<int>(std::min<int64_t>(left < 0 ? 1000 : left, 1000)));
    if (pr < 0 && errno != EINTR) return ConnError(std::string("poll: ") + std::strerror(errno));
    if (pr > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
      DrainWakeFd();  // InterruptReader: the check at the top returns
      continue;
    }
    if (pr <= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return ConnError(close_reason_);
      continue;
    }
    ssize_t n = Receive(fd_, 0, &received_fd_, &rbuf_);
    if (n > 0) last_receive_ = std::chrono::steady_clock::now();
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return ConnError(n == 0 ? "the node closed the connection" : std::strerror(errno));
  }
}

void Client::HandOff() {
  if (reply_waiters_.count > 0) {
    reply_waiters_.cv.notify_one();
  } else if (task_waiters_.count > 0) {
    task_waiters_.cv.notify_one();
  }
}

void Client::WakeAll() {
  reply_waiters_.cv.notify_all();
  task_waiters_.cv.notify_all();
}

template <typename Pred>
Status Client::WaitUntil(Pred ready, int64_t timeout_ms, Waiters& group) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  // Whoever leaves while nobody reads passes the socket on, so waiters never all sleep.
  struct PassOn {
    Client* c;
    ~PassOn() {
      if (!c->reading_) c->HandOff();
    }
  } pass_on{this};
  while (true) {
    if (ready()) return Status::OK();
    if (closed_) return ConnError(close_reason_);
    int64_t left = timeout_ms < 0 ? -1 : RemainingMs(deadline);
    if (left == 0) return Status::Error(Code::Timeout, "timed out");
    if (reading_) {
      ++group.count;
      if (left < 0) group.cv.wait(lock);
      else group.cv.wait_until(lock, deadline);
      --group.count;
      continue;
    }
    reading_ = true;
    reader_group_ = &group;
    lock.unlock();
    Status s = ReadOneFrame(left, &group);
    lock.lock();
    reading_ = false;
    reader_group_ = nullptr;
    if (closed_ && fd_ >= 0) {  // Close() ran while we were reading
      close(fd_);
      fd_ = -1;
    }
    if (closed_ && wake_fd_ >= 0) {
      close(wake_fd_);
      wake_fd_ = -1;
    }
    if (!s.ok() && s.code != Code::Timeout) {
      closed_ = true;
      if (close_reason_.empty()) close_reason_ = s.message.substr(std::strlen("connection: "));
      WakeAll();
      return s;
    }
  }
}

Status Client::Call(FrameWriter& w, uint64_t seq, Reply* reply) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return ConnError(close_reason_);
  }
  Status s = Send(w);
  if (!s.ok()) return s;
  s = WaitUntil([&] { return replies_.count(seq) > 0; }, -1, reply_waiters_);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = replies_.find(seq);
  *reply = std::move(it->second);
  replies_.erase(it);
  return Status::OK();
}

Status Client::StatusOf(const Reply& r, fb::Body expected) {
  if (r.message->body_type() == expected) return Status::OK();
  if (const fb::ErrorReply* e = r.message->body_as_ErrorReply()) {
    Status s = Status::Error(static_cast<Code>(e->code()), e->message() ? e->message()->str() : "");
    s.requested_bytes = e->requested_bytes();
    s.capacity_bytes = e->capacity_bytes();
    s.used_bytes = e->used_bytes();
    return s;
  }
  return Status::Error(Code::Internal, std::string("unexpected reply ") +
                                           fb::EnumNameBody(r.message->body_type()));
}

// ---- pushed messages: the task queue and notifications ------------------------------

Status Client::NextNotification(int64_t timeout_ms, std::optional<Notification>* out) {
  return PopWhenReady(notifications_, timeout_ms, out, reply_waiters_);
}

void Client::SendTaskWaiter(bool notify) {
  if (tasks_.empty() || task_tokens_ + task_coming_ > 0) return;
  ++task_tokens_;
  if (!notify) return;
  if (task_waiters_.count > 0) {
    task_waiters_.cv.notify_one();
  } else if (reading_ && reader_group_ == &task_waiters_) {
    InterruptReader();  // the only idle thread is reading the socket
  }
}

void Client::DrainWakeFd() {
  uint64_t count;
  ssize_t n = read(wake_fd_, &count, sizeof(count));
  (void)n;  // EAGAIN: nothing to drain
}

void Client::InterruptReader() {
  reader_interrupted_.store(true);
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;  // a full counter already wakes the reader
}

bool Client::TryNextTask(std::optional<TaskAssignment>* out, bool after_wait) {
  out->reset();
  std::lock_guard<std::mutex> lock(mu_);
  if (after_wait && task_coming_ > 0) --task_coming_;
  if (tasks_.empty()) return false;
  *out = std::move(tasks_.front());
  tasks_.pop_front();
  queued_tasks_.store(tasks_.size(), std::memory_order_relaxed);
  running_tasks_.fetch_add(1, std::memory_order_relaxed);
  // Calls are left: another thread comes for them, in case this one's call blocks.
  SendTaskWaiter(true);
  return true;
}

Status Client::WaitForTask(int64_t timeout_ms) {
  return WaitUntil(
      [&] {
        if (task_tokens_ == 0) return false;
        --task_tokens_;
        ++task_coming_;
        return true;
      },
      timeout_ms, task_waiters_);
}

// Takes the oldest pushed item of `queue`, waiting up to timeout_ms (-1: forever); on
// timeout *out stays empty and the status is OK. Several threads may wait at once; the
// item is taken under the lock that saw it, so no waiter finds it gone.
template <typename T>
Status Client::PopWhenReady(std::deque<T>& queue, int64_t timeout_ms, std::optional<T>* out,
                            Waiters& group) {
  out->reset();
  Status s = WaitUntil(
      [&] {
        if (queue.empty()) return false;
        *out = std::move(queue.front());
        queue.pop_front();
        return true;
      },
      timeout_ms, group);
  return s.code == Code::Timeout ? Status::OK() : s;
}

}  // namespace rayfield
