// The client's side of a submission queue (see run_queue.h).
#include "client/run_queue.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/daemon_client.h"

namespace kt::client {
namespace {

namespace layout = ::kt::proto::queue;

// How a thread waits for its completion, as the CUDA runtime waits for a
// stream: it spins (a small Run's answer comes within kSpin), then keeps
// looking but yields the core between looks (a large Run's answer is then
// seen at once, not a futex wake-up later: issue 23's 95% of the kernel's
// bandwidth), and past kYieldSpin sleeps on the futex.
constexpr absl::Duration kSpin = absl::Microseconds(30);
constexpr absl::Duration kYieldSpin = absl::Milliseconds(2);
// How long a Run waits before it checks that the daemon still runs, and
// between two checks: answers take microseconds to milliseconds, so a Run
// this late may well have lost its daemon, which is then noticed within
// this plus one futex wait (100 ms).
constexpr absl::Duration kDaemonCheckInterval = absl::Milliseconds(200);


template <typename T>
T Load(const T* word) {
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

template <typename Ref>
bool InMemory(const Ref& ref) {
  return ref.has_buffer() || ref.has_cuda_ipc();
}

// A fused norm's residual (client memory, or the daemon refuses it), static
// scale (may be inline) and dynamic scales (inline unless they have a place).
template <typename NormParams>
bool FusedNormInMemory(const NormParams& params) {
  if (params.has_residual() && !InMemory(params.residual())) return false;
  if (!params.has_quant()) return true;
  const pb::Quantization& quant = params.quant();
  if (quant.has_scale() && !InMemory(quant.scale())) return false;
  return quant.scale_mode() == pb::SCALE_MODE_STATIC || InMemory(quant.scales());
}

void CloseOnDaemon(pb::KernTune::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  pb::CloseQueueRequest request;
  request.set_queue_id(id);
  pb::CloseQueueResponse response;
  stub.CloseQueue(&context, request, &response);  // else it ends with this process
}

// A pidfd of the process listening on the Unix socket `path`, or -1 when
// it cannot be known. The pid comes from the peer credentials of a
// connection of our own (gRPC does not expose its socket): SO_PEERCRED
// gives it as this process's pid namespace sees it, 0 when it cannot.
int OpenDaemonPidfd(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) return -1;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ucred peer{};
  socklen_t length = sizeof(peer);
  const bool known =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && peer.pid > 0;
  close(fd);
  if (!known) return -1;
  const long pidfd = syscall(SYS_pidfd_open, peer.pid, 0);
  return pidfd >= 0 ? static_cast<int>(pidfd) : -1;
}

}  // namespace

struct RunQueueClient::Waiter {
  bool done = false;
  absl::Status status;
  pb::RunResponse response;
};

bool QueueCarries(const pb::RunRequest& request) {
  if (!InMemory(request.input()) || !InMemory(request.output())) return false;
  const pb::LayerNormParams& ln = request.layer_norm();
  if ((ln.has_gamma() && !InMemory(ln.gamma())) || (ln.has_beta() && !InMemory(ln.beta())) ||
      ln.want_mean_inv_std()) {
    return false;
  }
  const pb::RmsNormParams& rms = request.rms_norm();
  if ((rms.has_weight() && !InMemory(rms.weight())) || rms.want_inv_rms()) return false;
  if (!FusedNormInMemory(ln) || !FusedNormInMemory(rms)) return false;
  // reduce_scale's scales come back inline unless they have a place.
  if (request.op() == pb::OP_REDUCE_SCALE && !InMemory(request.reduce_scale().row_scale())) {
    return false;
  }
  const pb::ScaledMaskedSoftmaxParams& masked = request.scaled_masked_softmax();
  if (masked.has_mask() && !InMemory(masked.mask())) return false;
  return request.ByteSizeLong() <= layout::kMaxRequestBytes;
}

absl::StatusOr<std::unique_ptr<RunQueueClient>> RunQueueClient::Open(
    pb::KernTune::Stub& stub, const std::string& socket_path, absl::Duration deadline) {
  grpc::ClientContext context;
  if (deadline != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  }
  pb::OpenQueueRequest request;
  pb::OpenQueueResponse opened;
  if (grpc::Status status = stub.OpenQueue(&context, request, &opened); !status.ok()) {
    return FromGrpcStatus(status);
  }
  auto fail = [&](absl::Status status) {
    CloseOnDaemon(stub, opened.queue_id());
    return status;
  };
  const uint32_t entries = opened.entries();
  if (opened.layout_version() != layout::kQueueLayoutVersion || !layout::ValidEntries(entries) ||
      static_cast<uint64_t>(opened.region_bytes()) != layout::RegionBytes(entries)) {
    return fail(absl::UnimplementedError(absl::StrCat(
        "the daemon's queue layout (version ", opened.layout_version(), ", ", entries,
        " entries) is not this client's (version ", layout::kQueueLayoutVersion, ")")));
  }
  const int fd = shm_open(opened.shm_name().c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("opening the queue ", opened.shm_name(), ": ", std::strerror(errno))));
  }
  struct stat info {};
  void* base = MAP_FAILED;
  if (fstat(fd, &info) == 0 && info.st_size == opened.region_bytes()) {
    base = mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, 0);
  }
  close(fd);
  // Mapped (or not): the name has done its job.
  shm_unlink(opened.shm_name().c_str());
  if (base == MAP_FAILED) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("mapping the queue ", opened.shm_name(), " failed")));
  }
  std::unique_ptr<RunQueueClient> queue(new RunQueueClient(
      stub, opened.queue_id(), static_cast<char*>(base), entries, OpenDaemonPidfd(socket_path)));
  const layout::RegionHeader& header = *queue->header();
  if (header.magic != layout::kQueueMagic || header.version != layout::kQueueLayoutVersion ||
      header.entries != entries) {
    return absl::UnimplementedError("the queue's header is not this client's layout");
  }
  return queue;
}

RunQueueClient::RunQueueClient(pb::KernTune::Stub& stub, std::string id, char* base,
                               uint32_t entries, int daemon_pidfd)
    : stub_(stub), id_(std::move(id)), base_(base), entries_(entries),
      daemon_pidfd_(daemon_pidfd), heard_at_ns_(absl::GetCurrentTimeNanos()) {}

RunQueueClient::~RunQueueClient() {
  if (!daemon_exited_.load()) CloseOnDaemon(stub_, id_);
  munmap(base_, layout::RegionBytes(entries_));
  if (daemon_pidfd_ >= 0) close(daemon_pidfd_);
}

bool RunQueueClient::closed() const {
  return daemon_exited_.load(std::memory_order_relaxed) || Load(&header()->closed) != 0;
}

bool RunQueueClient::DaemonExited() {
  if (daemon_exited_.load()) return true;
  if (daemon_pidfd_ < 0) return false;
  // A pidfd is readable once its process has exited.
  pollfd exited{daemon_pidfd_, POLLIN, 0};
  if (poll(&exited, 1, 0) != 1) return false;
  daemon_exited_.store(true);
  return true;
}

bool RunQueueClient::GoneQuiet() {
  const int64_t now = absl::GetCurrentTimeNanos();
  if (daemon_pidfd_ < 0 || now - heard_at_ns_.load(std::memory_order_relaxed) <
                               absl::ToInt64Nanoseconds(kDaemonCheckInterval)) {
    return daemon_exited_.load();
  }
  heard_at_ns_.store(now, std::memory_order_relaxed);  // the next look is as far away
  return DaemonExited();
}

void RunQueueClient::DrainCompletions() {
  const uint32_t tail = Load(&header()->cq_tail);
  if (tail == cq_head_) return;
  heard_at_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
  const char* ring = base_ + layout::CompletionOffset(entries_);
  for (; cq_head_ != tail; ++cq_head_) {
    const char* slot = ring + size_t{cq_head_ & (entries_ - 1)} * layout::kCompletionSlotBytes;
    layout::CompletionHeader completion;
    std::memcpy(&completion, slot, sizeof(completion));
    auto it = waiting_.find(completion.tag);
    if (it == waiting_.end()) continue;  // its caller gave up waiting
    Waiter& waiter = *it->second;
    waiting_.erase(it);
    const size_t length = std::min<size_t>(completion.length, layout::kMaxCompletionPayload);
    const char* payload = slot + sizeof(completion);
    if (completion.code == 0) {
      if (!waiter.response.ParseFromArray(payload, static_cast<int>(length))) {
        waiter.status = absl::DataLossError("the daemon's completion does not parse");
      }
    } else {
      waiter.status = absl::Status(static_cast<absl::StatusCode>(completion.code),
                                   std::string(payload, length));
    }
    waiter.done = true;
  }
  __atomic_store_n(&header()->cq_head, cq_head_, __ATOMIC_SEQ_CST);
  // A daemon that stopped taking descriptors for want of completion slots
  // may sleep: the slots just freed are news for it.
  if (Load(&header()->need_wakeup) != 0) {
    __atomic_fetch_add(&header()->doorbell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &header()->doorbell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

void RunQueueClient::WaitForCompletions(uint32_t seen, absl::Duration timeout) {
  uint32_t* tail = &header()->cq_tail;
  const absl::Time start = absl::Now();
  const absl::Time spin_until = start + std::min(kSpin, timeout);
  const absl::Time yield_until = start + std::min(kYieldSpin, timeout);
  while (Load(tail) == seen && !closed()) {
    const absl::Time now = absl::Now();
    if (now >= yield_until) break;
    if (now >= spin_until) {
      sched_yield();
    } else {
      // The daemon's poller may run on this core's other hardware thread.
      layout::CpuRelax();
    }
  }
  if (Load(tail) != seen || closed() || timeout <= kYieldSpin) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sleepers_++ == 0) __atomic_store_n(&header()->client_waiting, 1u, __ATOMIC_SEQ_CST);
  }
  const timespec wait = absl::ToTimespec(timeout - kYieldSpin);
  // Returns at once when cq_tail moved after `seen` was read.
  syscall(SYS_futex, tail, FUTEX_WAIT, seen, &wait, nullptr, 0);
  std::lock_guard<std::mutex> lock(mu_);
  if (--sleepers_ == 0) __atomic_store_n(&header()->client_waiting, 0u, __ATOMIC_SEQ_CST);
}

RunQueueClient::Outcome RunQueueClient::Run(const pb::RunRequest& request,
                                            absl::Duration deadline) {
  Outcome outcome;
  const size_t length = request.ByteSizeLong();
  if (length > layout::kMaxRequestBytes) {
    outcome.response = absl::InvalidArgumentError(
        absl::StrCat("the request has ", length, " bytes; a queue descriptor holds ",
                     layout::kMaxRequestBytes));
    return outcome;
  }
  // Serialized before the lock, without an allocation per Run.
  std::array<uint8_t, layout::kMaxRequestBytes> bytes;
  request.SerializeWithCachedSizesToArray(bytes.data());
  const absl::Time until =
      deadline == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + deadline;
  Waiter me;
  uint64_t tag = 0;
  bool ring = false;
  // When this Run checks on the daemon next; unset (InfinitePast) until
  // it has waited once, so a Run answered at once makes no such call.
  absl::Time next_check = absl::InfinitePast();
  const auto check_daemon = [&](absl::Time now) {
    if (next_check == absl::InfinitePast()) {
      next_check = now + kDaemonCheckInterval;
    } else if (now >= next_check) {
      next_check = now + kDaemonCheckInterval;
      DaemonExited();
    }
  };
  mu_.lock();
  // A free descriptor slot: at most `entries` Runs unanswered.
  while (true) {
    if (closed()) {
      mu_.unlock();
      outcome.response = absl::UnavailableError(
          daemon_exited_ ? "the daemon exited" : "the daemon closed the queue");
      return outcome;
    }
    DrainCompletions();
    if (sq_tail_ - cq_head_ < entries_) break;
    const absl::Time now = absl::Now();
    if (now >= until) {
      mu_.unlock();
      outcome.response = absl::DeadlineExceededError("the queue stayed full");
      return outcome;
    }
    check_daemon(now);
    const uint32_t seen = cq_head_;
    mu_.unlock();
    WaitForCompletions(seen, std::min(until - now, absl::Milliseconds(100)));
    mu_.lock();
  }
  tag = next_tag_++;
  char* slot = base_ + layout::SubmissionOffset() +
               size_t{sq_tail_ & (entries_ - 1)} * layout::kSubmissionSlotBytes;
  const layout::SubmissionHeader submission{tag, static_cast<uint32_t>(length), 0};
  std::memcpy(slot, &submission, sizeof(submission));
  std::memcpy(slot + sizeof(submission), bytes.data(), length);
  ++sq_tail_;
  __atomic_store_n(&header()->sq_tail, sq_tail_, __ATOMIC_SEQ_CST);
  ring = __atomic_load_n(&header()->need_wakeup, __ATOMIC_SEQ_CST) != 0;
  waiting_[tag] = &me;
  mu_.unlock();
  outcome.submitted = true;
  if (ring) {
    __atomic_fetch_add(&header()->doorbell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &header()->doorbell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }

  mu_.lock();
  while (true) {
    DrainCompletions();
    if (me.done) break;
    const absl::Time now = absl::Now();
    check_daemon(now);
    if (closed() || now >= until) {
      waiting_.erase(tag);
      me.status = daemon_exited_ ? absl::UnavailableError(
                                       "the daemon exited with this Run in flight")
                  : closed()     ? absl::UnavailableError(
                                       "the daemon closed the queue with this Run in flight")
                                 : absl::DeadlineExceededError("no answer from the daemon in time");
      break;
    }
    const uint32_t seen = cq_head_;
    mu_.unlock();
    WaitForCompletions(seen, std::min(until - now, absl::Milliseconds(100)));
    mu_.lock();
  }
  mu_.unlock();
  if (me.status.ok()) {
    outcome.response = std::move(me.response);
  } else {
    outcome.response = me.status;
  }
  return outcome;
}

}  // namespace kt::client
