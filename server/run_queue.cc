// Submission queues, the daemon's side (see run_queue.h).
#include "server/run_queue.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/parse_failure.h"
#include "server/buffer_registry.h"
#include "server/client_memory.h"
#include "server/log.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
namespace layout = ::kt::proto::queue;

template <typename T>
T Load(const T* word) {
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}
template <typename T>
void Store(T* word, T value) {
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
}

// A shared (cross-process) futex wake; EFAULT on a truncated region is
// harmless and ignored.
void WakeAll(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

absl::Status ErrnoStatus(absl::string_view what, int error) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<RunQueue>> RunQueue::Create(const PeerProcess& owner,
                                                           uint32_t entries, uint64_t serial) {
  if (!layout::ValidEntries(entries)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "entries=", entries, " must be a power of two in [", layout::kMinEntries, ", ",
        layout::kMaxEntries, "] (0 = ", layout::kDefaultEntries, ")"));
  }
  std::string id = NewBufferId();
  std::string name = absl::StrCat("/kerntune-queue-", id);
  // O_EXCL: a fresh object, never one someone prepared under that name.
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(absl::StrCat("shm_open ", name), errno);
  auto fail = [&](absl::Status status) {
    close(fd);
    shm_unlink(name.c_str());
    return status;
  };
  if (geteuid() != owner.uid && fchown(fd, owner.uid, owner.gid) != 0) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "kerntuned runs as uid ", geteuid(), " and cannot give a queue to ", owner.Describe(),
        ": ", std::strerror(errno))));
  }
  const uint64_t bytes = layout::RegionBytes(entries);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("sizing the queue to ", bytes, " bytes: ", std::strerror(errno))));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail(ErrnoStatus("mmap of the queue", errno));
  std::shared_ptr<RunQueue> queue(
      new RunQueue(std::move(id), std::move(name), owner, entries, serial,
                   static_cast<char*>(base), fd));
  // The object is visible in /dev/shm from here on: another process of the
  // owner's uid could already truncate it.
  const absl::Status written = GuardClientHostAccess([&] {
    layout::RegionHeader* header = queue->header();
    header->magic = layout::kQueueMagic;
    header->version = layout::kQueueLayoutVersion;
    header->entries = entries;
    header->submission_slot_bytes = layout::kSubmissionSlotBytes;
    header->completion_slot_bytes = layout::kCompletionSlotBytes;
    header->submission_offset = layout::SubmissionOffset();
    header->completion_offset = layout::CompletionOffset(entries);
    header->region_bytes = bytes;
    // Until the poller has seen the queue, the client rings.
    header->need_wakeup = 1;
  });
  if (!written.ok()) return written;
  return queue;
}

RunQueue::RunQueue(std::string id, std::string shm_name, const PeerProcess& owner,
                   uint32_t entries, uint64_t serial, char* base, int fd)
    : id_(std::move(id)),
      shm_name_(std::move(shm_name)),
      owner_(owner),
      description_(absl::StrCat("queue ", id_, " of ", owner_.Describe())),
      entries_(entries),
      serial_(serial),
      region_bytes_(layout::RegionBytes(entries)),
      base_(base),
      fd_(fd) {}

RunQueue::~RunQueue() {
  munmap(base_, region_bytes_);
  // The client unlinks the name once it mapped the region; if it never did,
  // the name goes now, but only while it is still this object.
  struct stat ours {}, named {};
  const int named_fd = shm_open(shm_name_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (named_fd >= 0) {
    if (fstat(fd_, &ours) == 0 && fstat(named_fd, &named) == 0 && ours.st_ino == named.st_ino &&
        ours.st_dev == named.st_dev) {
      shm_unlink(shm_name_.c_str());
    }
    close(named_fd);
  }
  close(fd_);
}

bool RunQueue::Guarded(absl::FunctionRef<void()> access) {
  if (GuardClientHostAccess(access).ok()) return true;
  Close(layout::CloseReason::kRegionShrank);
  return false;
}

int64_t RunQueue::FreeCompletionSlots(uint32_t cq_head) {
  const uint32_t unread = cq_tail_ - cq_head;
  if (unread > entries_) {
    Close(layout::CloseReason::kBadIndex);
    return -1;
  }
  return std::max<int64_t>(0, int64_t{entries_} - unread - owed_);
}

bool RunQueue::HasWork() {
  if (closed()) return false;
  uint32_t sq_tail = 0, cq_head = 0;
  if (!Guarded([&] {
        sq_tail = Load(&header()->sq_tail);
        cq_head = Load(&header()->cq_head);
      })) {
    return false;
  }
  const uint32_t published = sq_tail - sq_head_;
  if (published > entries_) {
    Close(layout::CloseReason::kBadIndex);
    return false;
  }
  if (published == 0) return false;
  absl::MutexLock lock(&mu_);
  return FreeCompletionSlots(cq_head) > 0;
}

std::vector<RunQueue::Taken> RunQueue::Take(int max) {
  std::vector<Taken> taken;
  if (closed() || max <= 0) return taken;
  uint32_t sq_tail = 0, cq_head = 0;
  if (!Guarded([&] {
        sq_tail = Load(&header()->sq_tail);
        cq_head = Load(&header()->cq_head);
      })) {
    return taken;
  }
  const uint32_t published = sq_tail - sq_head_;
  if (published > entries_) {
    Close(layout::CloseReason::kBadIndex);
    return taken;
  }
  if (published == 0) return taken;
  uint32_t count = 0;
  {
    absl::MutexLock lock(&mu_);
    const int64_t free = FreeCompletionSlots(cq_head);
    if (free <= 0) return taken;  // back-pressure (or closed)
    count = static_cast<uint32_t>(std::min<int64_t>({published, free, max}));
    owed_ += count;
  }

  // Each descriptor is copied out once, its header first and then the bytes
  // that header's own copy names: what is parsed is what was read, whatever
  // the client writes into the slot afterwards.
  const char* ring = base_ + layout::SubmissionOffset();
  std::array<char, layout::kMaxRequestBytes> bytes;
  taken.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t index = (sq_head_ + i) & (entries_ - 1);
    const char* slot = ring + size_t{index} * layout::kSubmissionSlotBytes;
    layout::SubmissionHeader slot_header{};
    if (!Guarded([&] {
          std::memcpy(&slot_header, slot, sizeof(slot_header));
          if (slot_header.length <= bytes.size()) {
            std::memcpy(bytes.data(), slot + sizeof(slot_header), slot_header.length);
          }
        })) {
      taken.clear();
      return taken;
    }
    Taken& out = taken[i];
    out.tag = slot_header.tag;
    if (slot_header.flags != 0) {
      out.request = absl::InvalidArgumentError(
          absl::StrCat("descriptor flags=", slot_header.flags, " must be 0"));
    } else if (slot_header.length == 0 || slot_header.length > layout::kMaxRequestBytes) {
      out.request = absl::InvalidArgumentError(
          absl::StrCat("descriptor length=", slot_header.length, " must be in [1, ",
                       layout::kMaxRequestBytes, "]; send larger requests over gRPC"));
    } else if (const absl::string_view descriptor(bytes.data(), slot_header.length);
               last_request_ != nullptr && descriptor == last_descriptor_) {
      out.request = last_request_;
    } else {
      auto request = std::make_shared<pb::RunRequest>();
      QuietProtobufLog quiet;  // the completion and the request log say it
      if (request->ParseFromArray(descriptor.data(), static_cast<int>(descriptor.size()))) {
        last_descriptor_.assign(descriptor.data(), descriptor.size());
        last_request_ = request;
        out.request = std::move(request);
      } else {
        // Which field, when a string is not UTF-8.
        const absl::Status why = proto::DescribeParseFailure(*pb::RunRequest::descriptor(),
                                                             descriptor);
        out.request = absl::InvalidArgumentError(
            absl::StrCat("descriptor of ", slot_header.length, " bytes: ", why.message()));
      }
    }
  }
  sq_head_ += count;
  if (!Guarded([&] { Store(&header()->sq_head, sq_head_); })) taken.clear();
  return taken;
}

void RunQueue::KeepValidatedRun(std::shared_ptr<const pb::RunRequest> request, RunRequest run) {
  validated_request_ = std::move(request);
  validated_run_ = std::move(run);
}

void RunQueue::Complete(uint64_t tag, const absl::Status& status,
                        const pb::RunResponse* response, absl::string_view prefix) {
  std::array<char, layout::kCompletionSlotBytes> slot;
  layout::CompletionHeader completion{};
  completion.tag = tag;
  completion.code = static_cast<int32_t>(status.code());
  char* payload = slot.data() + sizeof(completion);
  const auto fail = [&](absl::string_view message) {
    // copy_n, not memcpy: an error without a message has no data pointer.
    const size_t length = std::min(message.size(), layout::kMaxCompletionPayload);
    std::copy_n(message.data(), length, payload);
    completion.length = static_cast<uint32_t>(length);
  };
  if (!status.ok()) {
    fail(status.message());
  } else if (response != nullptr || !prefix.empty()) {
    const size_t room = layout::kMaxCompletionPayload - std::min(prefix.size(),
                                                                 layout::kMaxCompletionPayload);
    pb::RunResponse trimmed;
    const pb::RunResponse* written = response != nullptr ? response : &trimmed;
    size_t length = written->ByteSizeLong();
    if (length > room) {
      // The instrumentation goes first when the answer does not fit.
      trimmed = *written;
      trimmed.clear_server_timing();
      written = &trimmed;
      length = trimmed.ByteSizeLong();
    }
    if (prefix.size() + length <= layout::kMaxCompletionPayload) {
      std::copy_n(prefix.data(), prefix.size(), payload);  // no memcpy of a null view
      written->SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(payload) + prefix.size());
      completion.length = static_cast<uint32_t>(prefix.size() + length);
    } else {
      completion.code = static_cast<int32_t>(absl::StatusCode::kInternal);
      fail("the Run's response does not fit a completion slot");
    }
  }
  std::memcpy(slot.data(), &completion, sizeof(completion));
  const size_t used = sizeof(completion) + completion.length;

  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (owed_ == 0) return;  // nothing was reserved for it
    --owed_;
    if (closed()) return;
    const uint32_t index = cq_tail_ & (entries_ - 1);
    char* to = base_ + layout::CompletionOffset(entries_) +
               size_t{index} * layout::kCompletionSlotBytes;
    const uint32_t tail = cq_tail_ + 1;
    if (!Guarded([&] {
          std::memcpy(to, slot.data(), used);
          Store(&header()->cq_tail, tail);
          __atomic_thread_fence(__ATOMIC_SEQ_CST);
          wake = Load(&header()->client_waiting) != 0;
        })) {
      return;
    }
    cq_tail_ = tail;
  }
  if (wake) WakeAll(&header()->cq_tail);
}

uint32_t* RunQueue::Arm(uint32_t& doorbell_value) {
  if (closed()) return nullptr;
  if (!Guarded([&] {
        __atomic_store_n(&header()->need_wakeup, 1u, __ATOMIC_SEQ_CST);
        doorbell_value = __atomic_load_n(&header()->doorbell, __ATOMIC_SEQ_CST);
      })) {
    return nullptr;
  }
  return &header()->doorbell;
}

void RunQueue::Disarm() {
  if (closed()) return;
  Guarded([&] { __atomic_store_n(&header()->need_wakeup, 0u, __ATOMIC_SEQ_CST); });
}

void RunQueue::Close(layout::CloseReason reason) {
  uint32_t open = 0;
  if (!close_reason_.compare_exchange_strong(open, static_cast<uint32_t>(reason))) return;
  // Tell a client that waits for completions; if the region shrank there
  // is nothing left to tell.
  if (reason == layout::CloseReason::kRegionShrank) return;
  if (GuardClientHostAccess([&] { Store(&header()->closed, static_cast<uint32_t>(reason)); })
          .ok()) {
    WakeAll(&header()->cq_tail);
  }
}

absl::StatusOr<std::shared_ptr<RunQueue>> RunQueues::Open(const PeerProcess& owner,
                                                          uint32_t entries) {
  if (entries == 0) entries = layout::kDefaultEntries;
  {
    absl::MutexLock lock(&mu_);
    int owned = 0;
    for (const auto& [id, queue] : by_id_) owned += queue->owner() == owner ? 1 : 0;
    if (owned >= limits_.max_queues_per_owner) {
      return absl::ResourceExhaustedError(absl::StrCat(
          owner.Describe(), " already has ", owned, " queues open, the limit; close one"));
    }
    if (static_cast<int>(by_id_.size()) >= limits_.max_queues) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the daemon has ", by_id_.size(), " queues open, its limit; use gRPC Runs"));
    }
  }
  absl::StatusOr<std::shared_ptr<RunQueue>> queue =
      RunQueue::Create(owner, entries, next_serial_.fetch_add(1, std::memory_order_relaxed));
  if (!queue.ok()) return queue.status();
  absl::MutexLock lock(&mu_);
  by_id_[(*queue)->id()] = *queue;
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return queue;
}

absl::Status RunQueues::Close(const PeerProcess& caller, const std::string& id) {
  std::shared_ptr<RunQueue> queue;
  {
    absl::MutexLock lock(&mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end() || !(it->second->owner() == caller)) {
      return absl::NotFoundError(
          absl::StrCat("queue_id \"", id, "\" is not a queue of this process"));
    }
    queue = std::move(it->second);
    by_id_.erase(it);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  queue->Close(layout::CloseReason::kClosedByOwner);
  return absl::OkStatus();
}

int RunQueues::Reap(absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
  std::vector<std::shared_ptr<RunQueue>> ended;
  int exited = 0;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = by_id_.begin(); it != by_id_.end();) {
      RunQueue& queue = *it->second;
      const bool alive = is_alive(queue.owner());
      if (alive && !queue.closed()) {
        ++it;
        continue;
      }
      if (!alive) {
        ++exited;
        queue.Close(layout::CloseReason::kOwnerExited);
      }
      ended.push_back(std::move(it->second));
      by_id_.erase(it++);
    }
    if (!ended.empty()) generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  return exited;  // `ended` unmaps outside the lock (or when the last Run holding one ends)
}

void RunQueues::Clear() {
  absl::flat_hash_map<std::string, std::shared_ptr<RunQueue>> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(by_id_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  for (auto& [id, queue] : all) queue->Close(layout::CloseReason::kShutdown);
}

std::vector<std::shared_ptr<RunQueue>> RunQueues::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<RunQueue>> out;
  out.reserve(by_id_.size());
  for (const auto& [id, queue] : by_id_) out.push_back(queue);
  // A stable order, so that passes take queues in turn.
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a->serial() < b->serial(); });
  return out;
}

int64_t RunQueues::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(by_id_.size());
}

}  // namespace kt::server
