// Fuzzes a submission queue from the client's side of its shared memory
// (proto/run_queue_layout.h): the input is a program of client steps (write
// any header word, write slot bytes, publish, shrink or regrow the object)
// interleaved with the daemon's calls (Take, Complete, HasWork, Arm,
// Disarm). Properties: nothing crashes; every call of the daemon changes
// only the words and the completion slot it owns; Take copies out the
// slots the client published, in order, and each either parses or carries
// an InvalidArgument error; completions owed never exceed the ring.
#include <fcntl.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kerntune/v1/kerntune.pb.h"
#include "proto/run_queue_layout.h"
#include "server/run_queue.h"
#include "tests/fuzz/fuzz_check.h"

namespace kt::fuzz {
namespace {

namespace pb = ::kerntune::v1;
namespace layout = ::kt::proto::queue;
using Header = layout::RegionHeader;

constexpr int kMaxSteps = 96;

// The words of the header the client is meant to write, and those the
// daemon writes: the fuzzer picks among them more often than elsewhere.
constexpr size_t kWords[] = {
    offsetof(Header, sq_tail),     offsetof(Header, cq_head),        offsetof(Header, doorbell),
    offsetof(Header, client_waiting), offsetof(Header, sq_head),     offsetof(Header, cq_tail),
    offsetof(Header, need_wakeup), offsetof(Header, closed),         offsetof(Header, entries)};

// Bytes the daemon may change: its four words and one completion slot.
bool DaemonMayWrite(size_t offset, uint32_t entries, int64_t completion_slot) {
  for (size_t word : {offsetof(Header, sq_head), offsetof(Header, cq_tail),
                      offsetof(Header, need_wakeup), offsetof(Header, closed)}) {
    if (offset >= word && offset < word + sizeof(uint32_t)) return true;
  }
  if (completion_slot < 0) return false;
  const size_t slot = layout::CompletionOffset(entries) +
                      static_cast<size_t>(completion_slot) * layout::kCompletionSlotBytes;
  return offset >= slot && offset < slot + layout::kCompletionSlotBytes;
}

// One queue and the client's mapping of it.
class Session {
 public:
  Session(std::shared_ptr<server::RunQueue> queue, char* base, int fd)
      : queue_(std::move(queue)), base_(base), fd_(fd), bytes_(queue_->region_bytes()),
        entries_(queue_->entries()) {}
  ~Session() {
    munmap(base_, queue_->region_bytes());
    close(fd_);
  }

  void Step(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange(0, 9)) {
      case 0:
        WriteWord(in);
        break;
      case 1:
        WriteDescriptor(in);
        break;
      case 2:
        Publish(in.ConsumeIntegralInRange<uint32_t>(0, entries_ + 2));
        break;
      case 3:
        Resize(in);
        break;
      case 4:
      case 5:
        Daemon([&] { Take(in.ConsumeIntegralInRange(-1, static_cast<int>(entries_) + 1)); });
        break;
      case 6:
      case 7:
        Complete(in);
        break;
      case 8:
        Daemon([&] { queue_->HasWork(); });
        break;
      case 9:
        Daemon([&] {
          if (in.ConsumeBool()) {
            uint32_t doorbell = 0;
            queue_->Arm(doorbell);
          } else {
            queue_->Disarm();
          }
        });
        break;
    }
  }

 private:
  uint32_t* Word(size_t offset) const { return reinterpret_cast<uint32_t*>(base_ + offset); }
  // The client touches only what is still backed by the object.
  bool Backed(size_t offset, size_t bytes) const { return offset + bytes <= size_; }

  void WriteWord(FuzzedDataProvider& in) {
    const size_t offset =
        in.ConsumeBool() ? kWords[in.ConsumeIntegralInRange<size_t>(0, std::size(kWords) - 1)]
                         : in.ConsumeIntegralInRange<size_t>(0, layout::kRingsOffset / 4 - 1) * 4;
    if (!Backed(offset, 4)) return;
    const uint32_t value = in.ConsumeBool()
                               ? *Word(offset) + in.ConsumeIntegral<int8_t>()
                               : in.ConsumeIntegral<uint32_t>();
    __atomic_store_n(Word(offset), value, __ATOMIC_RELEASE);
  }

  // A descriptor at sq_tail + i (unpublished): its header, then the bytes.
  void WriteDescriptor(FuzzedDataProvider& in) {
    if (!Backed(offsetof(Header, sq_tail), 4)) return;
    const uint32_t index = *Word(offsetof(Header, sq_tail)) + in.ConsumeIntegralInRange(0, 3);
    const size_t slot = layout::SubmissionOffset() +
                        size_t{index & (entries_ - 1)} * layout::kSubmissionSlotBytes;
    if (!Backed(slot, layout::kSubmissionSlotBytes)) return;
    const uint64_t tag = in.ConsumeIntegral<uint64_t>();
    const uint32_t flags = in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegral<uint32_t>() : 0;
    const bool exact = in.ConsumeIntegralInRange(0, 7) != 0;
    const uint32_t claimed = exact ? 0 : in.ConsumeIntegral<uint32_t>();
    const std::string payload =
        in.ConsumeRandomLengthString(layout::kMaxRequestBytes);
    const layout::SubmissionHeader header{tag, exact ? static_cast<uint32_t>(payload.size())
                                                     : claimed, flags};
    std::memcpy(base_ + slot, &header, sizeof(header));
    std::memcpy(base_ + slot + sizeof(header), payload.data(), payload.size());
  }

  void Publish(uint32_t count) {
    if (!Backed(offsetof(Header, sq_tail), 4)) return;
    __atomic_fetch_add(Word(offsetof(Header, sq_tail)), count, __ATOMIC_RELEASE);
  }

  // The client shrinks the object (the daemon's accesses then fault) or
  // grows it back.
  void Resize(FuzzedDataProvider& in) {
    const size_t size = in.ConsumeBool() ? bytes_ : in.ConsumeIntegralInRange<size_t>(0, bytes_);
    if (ftruncate(fd_, static_cast<off_t>(size)) == 0) size_ = size;
  }

  // Runs one call of the daemon and checks what it changed in the region:
  // its words, and completion slot `completion_slot` when it is >= 0.
  template <typename Call>
  void Daemon(Call call, int64_t completion_slot = -1) {
    const size_t visible = size_;
    before_.assign(base_, base_ + visible);
    call();
    // Compared a cache line at a time, byte by byte only where one differs.
    constexpr size_t kLine = 64;
    for (size_t line = 0; line < visible; line += kLine) {
      const size_t end = std::min(visible, line + kLine);
      if (std::memcmp(base_ + line, before_.data() + line, end - line) == 0) continue;
      for (size_t offset = line; offset < end; ++offset) {
        if (base_[offset] == before_[offset]) continue;
        KT_FUZZ_CHECK(DaemonMayWrite(offset, entries_, completion_slot),
                      absl::StrCat("the daemon wrote byte ", offset, " of ", bytes_,
                                   " (completion slot ", completion_slot, ")"));
      }
    }
  }

  void Take(int max) {
    const uint32_t head = sq_head_;
    std::vector<server::RunQueue::Taken> taken = queue_->Take(max);
    KT_FUZZ_CHECK(taken.size() <= static_cast<size_t>(std::max(max, 0)) &&
                      owed_.size() + taken.size() <= entries_,
                  absl::StrCat("took ", taken.size(), " (max ", max, ") with ", owed_.size(),
                               " owed of ", entries_));
    for (size_t i = 0; i < taken.size(); ++i) {
      const server::RunQueue::Taken& one = taken[i];
      if (!one.request.ok()) {
        KT_FUZZ_CHECK(absl::IsInvalidArgument(one.request.status()) &&
                          !one.request.status().message().empty(),
                      one.request.status().ToString());
      }
      owed_.push_back(one.tag);
      // What was taken is what the slot held when Take ran.
      const size_t slot = layout::SubmissionOffset() +
                          size_t{(head + i) & (entries_ - 1)} * layout::kSubmissionSlotBytes;
      if (slot + layout::kSubmissionSlotBytes > before_.size()) continue;
      layout::SubmissionHeader header{};
      std::memcpy(&header, before_.data() + slot, sizeof(header));
      KT_FUZZ_CHECK(header.tag == one.tag, absl::StrCat("descriptor ", i, "'s tag"));
      if (one.request.ok()) {
        pb::RunRequest expected;
        KT_FUZZ_CHECK(expected.ParseFromArray(before_.data() + slot + sizeof(header),
                                              static_cast<int>(header.length)) &&
                          expected.SerializeAsString() == (*one.request)->SerializeAsString(),
                      absl::StrCat("descriptor ", i, " is not its slot's request"));
      }
    }
    if (taken.empty()) return;
    sq_head_ += static_cast<uint32_t>(taken.size());
    KT_FUZZ_CHECK(queue_->close_reason() == layout::CloseReason::kRegionShrank ||
                      *Word(offsetof(Header, sq_head)) == sq_head_,
                  absl::StrCat("sq_head=", *Word(offsetof(Header, sq_head)), ", expected ",
                               sq_head_));
  }

  void Complete(FuzzedDataProvider& in) {
    uint64_t tag = in.ConsumeIntegral<uint64_t>();
    // The daemon writes a completion when one is owed and the queue is open.
    const bool writes = !owed_.empty() && !queue_->closed();
    if (!owed_.empty()) {
      tag = owed_.front();
      owed_.pop_front();
    }
    const auto code = static_cast<absl::StatusCode>(in.ConsumeIntegralInRange(0, 16));
    const absl::Status status(code,
                              in.ConsumeRandomLengthString(2 * layout::kCompletionSlotBytes));
    pb::RunResponse response;
    response.set_backend(in.ConsumeRandomLengthString(2 * layout::kCompletionSlotBytes));
    response.set_kernel_time_us(in.ConsumeFloatingPoint<double>());
    response.mutable_server_timing()->set_handler_us(in.ConsumeFloatingPoint<double>());
    const bool with_response = in.ConsumeBool();
    Daemon([&] { queue_->Complete(tag, status, with_response ? &response : nullptr); },
           writes ? static_cast<int64_t>(cq_tail_ & (entries_ - 1)) : -1);
    if (!writes || queue_->close_reason() == layout::CloseReason::kRegionShrank) return;
    ++cq_tail_;
    KT_FUZZ_CHECK(*Word(offsetof(Header, cq_tail)) == cq_tail_,
                  absl::StrCat("cq_tail=", *Word(offsetof(Header, cq_tail)), ", expected ",
                               cq_tail_));
  }

  std::shared_ptr<server::RunQueue> queue_;
  char* const base_;
  const int fd_;
  const size_t bytes_;
  const uint32_t entries_;
  size_t size_ = bytes_;  // of the object now
  std::vector<char> before_;
  std::deque<uint64_t> owed_;  // tags taken, not completed
  // The daemon's indices as the client can tell them.
  uint32_t sq_head_ = 0;
  uint32_t cq_tail_ = 0;
};

}  // namespace
}  // namespace kt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kt::fuzz::SilenceProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kt::fuzz;  // NOLINT: the harness's own namespace
  FuzzedDataProvider in(data, size);
  const uint32_t entries = layout::kMinEntries << in.ConsumeIntegralInRange(0, 3);
  absl::StatusOr<std::shared_ptr<kt::server::RunQueue>> queue =
      kt::server::RunQueue::Create(Self(), entries);
  KT_FUZZ_CHECK(queue.ok(), queue.status().ToString());
  const int fd = shm_open((*queue)->shm_name().c_str(), O_RDWR, 0);
  KT_FUZZ_CHECK(fd >= 0, (*queue)->shm_name());
  void* base = mmap(nullptr, (*queue)->region_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  KT_FUZZ_CHECK(base != MAP_FAILED, "mmap");
  Session session(*queue, static_cast<char*>(base), fd);
  for (int step = 0; step < kMaxSteps && in.remaining_bytes() > 0; ++step) session.Step(in);
  (*queue)->Close(layout::CloseReason::kShutdown);
  return 0;
}
