// Submission queues on the daemon's side, without gRPC: the region and its
// checks (RunQueue), the registry, the poller (fairness, sleeping when
// idle), and the service serving queues on the CPU backend, with a table
// of hostile queue states each answered while a bystander queue keeps
// getting correct results (on fresh queues and on queues whose last
// descriptor was valid), and repeated descriptors: validated once, then
// resolved, looked up and run anew each time.
#include "server/run_queue.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "db/tuning_store.h"
#include "kernels/launch_config.h"
#include "kernels/reference.h"
#include "kernels/version.h"
#include "server/cpu_backend.h"
#include "server/queue_poller.h"
#include "server/service.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tuner/backend.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
namespace layout = ::kt::proto::queue;
using ::testing::HasSubstr;

PeerProcess Self() {
  PeerProcess self;
  self.pid = getpid();
  self.uid = getuid();
  self.gid = getgid();
  self.start_ticks = *ProcessStartTicks(self.pid);
  self.memory_access = absl::OkStatus();  // as the socket's policy lets its own user
  return self;
}

// The client's view of a queue: the region mapped by name, and raw access
// to everything a client may write (a hostile one included).
class MappedQueue {
 public:
  MappedQueue(const std::string& name, uint32_t entries) : entries_(entries) {
    fd_ = shm_open(name.c_str(), O_RDWR, 0);
    EXPECT_GE(fd_, 0) << name;
    bytes_ = layout::RegionBytes(entries);
    base_ = static_cast<char*>(
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(base_, MAP_FAILED);
  }
  ~MappedQueue() {
    munmap(base_, bytes_);
    close(fd_);
  }
  layout::RegionHeader& header() { return *reinterpret_cast<layout::RegionHeader*>(base_); }
  int fd() const { return fd_; }
  char* slot(uint32_t index) {
    return base_ + layout::SubmissionOffset() +
           size_t{index & (entries_ - 1)} * layout::kSubmissionSlotBytes;
  }
  // Writes a descriptor at sq_tail + i without publishing it.
  void WriteRaw(uint32_t i, uint64_t tag, uint32_t length, uint32_t flags,
                const std::string& payload) {
    layout::SubmissionHeader h{tag, length, flags};
    char* to = slot(header().sq_tail + i);
    std::memcpy(to, &h, sizeof(h));
    std::memcpy(to + sizeof(h), payload.data(),
                std::min(payload.size(), layout::kMaxRequestBytes));
  }
  void Write(uint32_t i, uint64_t tag, const pb::RunRequest& request) {
    const std::string bytes = request.SerializeAsString();
    WriteRaw(i, tag, static_cast<uint32_t>(bytes.size()), 0, bytes);
  }
  void Publish(uint32_t count) {
    __atomic_store_n(&header().sq_tail, header().sq_tail + count, __ATOMIC_SEQ_CST);
    Ring();
  }
  void Ring() {
    if (__atomic_load_n(&header().need_wakeup, __ATOMIC_SEQ_CST) == 0) return;
    __atomic_fetch_add(&header().doorbell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &header().doorbell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
  void Submit(uint64_t tag, const pb::RunRequest& request) {
    Write(0, tag, request);
    Publish(1);
  }

  struct Completion {
    uint64_t tag = 0;
    absl::StatusCode code = absl::StatusCode::kUnknown;
    std::string payload;
    pb::RunResponse response() const {
      pb::RunResponse r;
      r.ParseFromString(payload);
      return r;
    }
  };
  uint32_t ready() { return __atomic_load_n(&header().cq_tail, __ATOMIC_ACQUIRE) - cq_head_; }
  // The next completion, waited for up to `timeout`; nullopt then.
  std::optional<Completion> Next(absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (ready() == 0) {
      if (absl::Now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    const char* from = base_ + layout::CompletionOffset(entries_) +
                       size_t{cq_head_ & (entries_ - 1)} * layout::kCompletionSlotBytes;
    layout::CompletionHeader h;
    std::memcpy(&h, from, sizeof(h));
    Completion c;
    c.tag = h.tag;
    c.code = static_cast<absl::StatusCode>(h.code);
    c.payload.assign(from + sizeof(h), std::min<size_t>(h.length, layout::kMaxCompletionPayload));
    ++cq_head_;
    __atomic_store_n(&header().cq_head, cq_head_, __ATOMIC_RELEASE);
    Ring();
    return c;
  }
  uint32_t closed() { return __atomic_load_n(&header().closed, __ATOMIC_ACQUIRE); }

 private:
  const uint32_t entries_;
  int fd_ = -1;
  size_t bytes_ = 0;
  char* base_ = nullptr;
  uint32_t cq_head_ = 0;
};

pb::RunRequest SoftmaxOnBuffer(const std::string& id, int64_t rows, int64_t cols,
                               int64_t in_offset, int64_t out_offset) {
  pb::RunRequest request;
  request.set_op(pb::OP_SOFTMAX);
  request.set_dtype(pb::DTYPE_FLOAT32);
  request.mutable_shape()->set_rows(rows);
  request.mutable_shape()->set_cols(cols);
  request.mutable_input()->mutable_buffer()->set_buffer_id(id);
  request.mutable_input()->mutable_buffer()->set_offset_bytes(in_offset);
  request.mutable_output()->mutable_buffer()->set_buffer_id(id);
  request.mutable_output()->mutable_buffer()->set_offset_bytes(out_offset);
  return request;
}

// Another live process: the test's parent.
PeerProcess Parent() {
  PeerProcess parent = Self();
  parent.pid = getppid();
  parent.start_ticks = *ProcessStartTicks(parent.pid);
  return parent;
}

// ---------------------------------------------------------------- RunQueue

TEST(RunQueueTest, CreateWritesTheGeometryIntoAPrivateObject) {
  absl::StatusOr<std::shared_ptr<RunQueue>> queue = RunQueue::Create(Self(), 16);
  ASSERT_TRUE(queue.ok()) << queue.status();
  struct stat info {};
  const int fd = shm_open((*queue)->shm_name().c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fstat(fd, &info), 0);
  close(fd);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(info.st_uid, getuid());
  EXPECT_EQ(static_cast<uint64_t>(info.st_size), layout::RegionBytes(16));
  MappedQueue mapped((*queue)->shm_name(), 16);
  EXPECT_EQ(mapped.header().magic, layout::kQueueMagic);
  EXPECT_EQ(mapped.header().version, layout::kQueueLayoutVersion);
  EXPECT_EQ(mapped.header().entries, 16u);
  EXPECT_EQ(mapped.header().completion_offset, layout::CompletionOffset(16));
  EXPECT_EQ(mapped.header().need_wakeup, 1u);  // until the poller has seen it
  // Its name goes with it when the client never removed it.
  const std::string name = (*queue)->shm_name();
  queue->reset();
  EXPECT_LT(shm_open(name.c_str(), O_RDONLY, 0), 0);
}

TEST(RunQueueTest, RefusesBadEntryCounts) {
  for (uint32_t entries : {0u, 4u, 12u, 2048u, 1u << 31}) {
    absl::StatusOr<std::shared_ptr<RunQueue>> queue = RunQueue::Create(Self(), entries);
    EXPECT_EQ(queue.status().code(), absl::StatusCode::kInvalidArgument) << entries;
  }
}

TEST(RunQueueTest, ARepeatedDescriptorSharesItsParsedRequest) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  // The same Run twice, another, the first again.
  mapped.Write(0, 1, SoftmaxOnBuffer("b", 2, 4, 0, 64));
  mapped.Write(1, 2, SoftmaxOnBuffer("b", 2, 4, 0, 64));
  mapped.Write(2, 3, SoftmaxOnBuffer("b", 3, 4, 0, 64));
  mapped.Write(3, 4, SoftmaxOnBuffer("b", 2, 4, 0, 64));
  mapped.Publish(4);
  std::vector<RunQueue::Taken> taken = queue->Take(8);
  ASSERT_EQ(taken.size(), 4u);
  for (const RunQueue::Taken& one : taken) ASSERT_TRUE(one.request.ok()) << one.tag;
  EXPECT_EQ(*taken[0].request, *taken[1].request);
  EXPECT_NE(*taken[1].request, *taken[2].request);
  EXPECT_EQ((*taken[2].request)->shape().rows(), 3);
  EXPECT_NE(*taken[2].request, *taken[3].request);  // only the last one is kept
  EXPECT_EQ((*taken[3].request)->shape().rows(), 2);
  // Other bytes are parsed anew; garbage between two equal descriptors is
  // refused and leaves the last parsed one as it was.
  mapped.Write(0, 5, SoftmaxOnBuffer("c", 2, 4, 0, 64));
  mapped.WriteRaw(1, 6, 32, 0, std::string(32, '\xff'));
  mapped.Write(2, 7, SoftmaxOnBuffer("c", 2, 4, 0, 64));
  mapped.Publish(3);
  taken = queue->Take(8);
  ASSERT_EQ(taken.size(), 3u);
  ASSERT_TRUE(taken[0].request.ok());
  EXPECT_EQ((*taken[0].request)->input().buffer().buffer_id(), "c");
  EXPECT_EQ(taken[1].request.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(taken[2].request.ok());
  EXPECT_EQ(*taken[0].request, *taken[2].request);
}

// issue 43: a descriptor whose string field is not UTF-8 was refused as
// "does not hold a kerntune.v1.RunRequest", after protobuf wrote a raw
// line of its own per descriptor. It names the field now.
TEST(RunQueueTest, ADescriptorWithAStringThatIsNotUtf8NamesTheField) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  pb::RunRequest bad_device = SoftmaxOnBuffer("b", 1, 4, 0, 64);
  bad_device.set_device("\xff\xfe");
  pb::RunRequest bad_buffer = SoftmaxOnBuffer("b\xc3", 1, 4, 0, 64);
  mapped.Write(0, 1, bad_device);
  mapped.Write(1, 2, bad_buffer);
  mapped.Publish(2);
  const std::vector<RunQueue::Taken> taken = queue->Take(8);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(taken[0].request.status().message(), HasSubstr("device is not UTF-8"));
  EXPECT_EQ(taken[1].request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(taken[1].request.status().message(),
              HasSubstr("input.buffer.buffer_id is not UTF-8"));
}

TEST(RunQueueTest, TakesABatchCopiedOutAndCompletesIt) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  EXPECT_TRUE(queue->Take(8).empty());
  for (uint32_t i = 0; i < 5; ++i) mapped.Write(i, 100 + i, SoftmaxOnBuffer("b", i + 1, 4, 0, 64));
  mapped.Publish(5);
  EXPECT_TRUE(queue->HasWork());
  std::vector<RunQueue::Taken> taken = queue->Take(3);  // bounded per call
  ASSERT_EQ(taken.size(), 3u);
  // The client rewrites the slots after publishing: what was taken stays.
  for (uint32_t i = 0; i < 3; ++i) std::memset(mapped.slot(i), 0xff, 64);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(taken[i].tag, 100 + i);
    ASSERT_TRUE(taken[i].request.ok());
    EXPECT_EQ((*taken[i].request)->shape().rows(), i + 1);
  }
  EXPECT_EQ(mapped.header().sq_head, 3u);
  EXPECT_EQ(queue->Take(8).size(), 2u);

  pb::RunResponse response;
  response.set_backend("cpu");
  response.mutable_config()->set_source(pb::CONFIG_SOURCE_CPU_REFERENCE);
  queue->Complete(100, absl::OkStatus(), &response);
  queue->Complete(101, absl::NotFoundError("input.buffer: no such buffer"), nullptr);
  std::optional<MappedQueue::Completion> first = mapped.Next();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->tag, 100u);
  EXPECT_EQ(first->code, absl::StatusCode::kOk);
  EXPECT_EQ(first->response().backend(), "cpu");
  EXPECT_EQ(first->response().config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
  std::optional<MappedQueue::Completion> second = mapped.Next();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->code, absl::StatusCode::kNotFound);
  EXPECT_EQ(second->payload, "input.buffer: no such buffer");
}

TEST(RunQueueTest, AFullCompletionRingStopsTakingUntilTheClientReads) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  for (uint32_t i = 0; i < 8; ++i) mapped.Write(i, i, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  mapped.Publish(8);
  std::vector<RunQueue::Taken> taken = queue->Take(8);
  ASSERT_EQ(taken.size(), 8u);
  for (const RunQueue::Taken& t : taken) queue->Complete(t.tag, absl::OkStatus(), nullptr);
  // Eight more published, none taken: every completion slot is unread.
  for (uint32_t i = 0; i < 8; ++i) mapped.Write(i, 8 + i, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  mapped.Publish(8);
  EXPECT_FALSE(queue->HasWork());
  EXPECT_TRUE(queue->Take(8).empty());
  EXPECT_FALSE(queue->closed());
  // The client reads three: three more can be taken.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(mapped.Next());
  EXPECT_EQ(queue->Take(8).size(), 3u);
  // A slot is reserved when taken: the three in flight count against the
  // ring, so three more reads let three (not all five left) be taken.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(mapped.Next());
  EXPECT_EQ(queue->Take(8).size(), 3u);
}

// A queued Run's answer comes in two parts, the fields its point repeats
// (serialized once) and its own: the client parses one RunResponse. When
// the two do not fit, the timing goes first, then the answer becomes an
// error; a prefix on an error is not written.
TEST(RunQueueTest, AnAnswerPrefixAndTheResponseParseAsOneResponse) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  for (uint32_t i = 0; i < 4; ++i) mapped.Write(i, 10 + i, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  mapped.Publish(4);
  ASSERT_EQ(queue->Take(4).size(), 4u);

  pb::RunResponse point;
  point.set_backend("cuda");
  point.set_device_ordinal(1);
  point.mutable_config()->set_source(pb::CONFIG_SOURCE_TUNED);
  point.mutable_config()->mutable_config()->set_key("warp_b128_p8");
  const std::string prefix = point.SerializeAsString();
  pb::RunResponse own;
  own.set_kernel_time_us(2.5);
  own.mutable_server_timing()->set_handler_us(11);
  queue->Complete(10, absl::OkStatus(), &own, prefix);

  pb::RunResponse large = own;
  // Its own fields take 12 bytes besides the data without the timing (the
  // data's tag and length, the kernel time) and 23 with it.
  large.set_output_data(std::string(layout::kMaxCompletionPayload - prefix.size() - 17, 'x'));
  queue->Complete(11, absl::OkStatus(), &large, prefix);  // fits without its timing
  large.set_output_data(std::string(layout::kMaxCompletionPayload, 'x'));
  queue->Complete(12, absl::OkStatus(), &large, prefix);  // does not fit at all
  queue->Complete(13, absl::NotFoundError("input.buffer: no such buffer"), &own, prefix);

  std::optional<MappedQueue::Completion> whole = mapped.Next();
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->code, absl::StatusCode::kOk);
  pb::RunResponse expected = point;
  expected.MergeFrom(own);
  EXPECT_EQ(whole->response().SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(whole->response().config().config().key(), "warp_b128_p8");
  EXPECT_EQ(whole->response().server_timing().handler_us(), 11);

  std::optional<MappedQueue::Completion> trimmed = mapped.Next();
  ASSERT_TRUE(trimmed);
  EXPECT_EQ(trimmed->code, absl::StatusCode::kOk);
  EXPECT_EQ(trimmed->response().backend(), "cuda");
  EXPECT_FALSE(trimmed->response().has_server_timing());
  EXPECT_EQ(trimmed->response().kernel_time_us(), 2.5);

  std::optional<MappedQueue::Completion> too_large = mapped.Next();
  ASSERT_TRUE(too_large);
  EXPECT_EQ(too_large->code, absl::StatusCode::kInternal);
  EXPECT_THAT(too_large->payload, HasSubstr("does not fit"));

  std::optional<MappedQueue::Completion> error = mapped.Next();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code, absl::StatusCode::kNotFound);
  EXPECT_EQ(error->payload, "input.buffer: no such buffer");
}

// Found by kt_run_queue_fuzzer: an error without a message was copied from
// its null data pointer (undefined even for zero bytes; UBSan stops there).
TEST(RunQueueTest, AnErrorWithoutAMessageCompletesWithItsCodeAlone) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  mapped.Submit(5, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  ASSERT_EQ(queue->Take(1).size(), 1u);
  queue->Complete(5, absl::Status(absl::StatusCode::kInternal, ""), nullptr);
  std::optional<MappedQueue::Completion> completion = mapped.Next();
  ASSERT_TRUE(completion.has_value());
  EXPECT_EQ(completion->tag, 5u);
  EXPECT_EQ(completion->code, absl::StatusCode::kInternal);
  EXPECT_EQ(completion->payload, "");
}

TEST(RunQueueTest, GarbageIndicesCloseTheQueue) {
  struct Case {
    const char* name;
    std::function<void(MappedQueue&)> corrupt;
  };
  const Case cases[] = {
      {"sq_tail past the ring", [](MappedQueue& m) { m.header().sq_tail = 9; }},
      {"sq_tail backwards", [](MappedQueue& m) { m.header().sq_tail = 0xffffffffu; }},
      {"cq_head past cq_tail",
       [](MappedQueue& m) {
         m.header().cq_head = 100;
         m.header().sq_tail = 1;
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
    MappedQueue mapped(queue->shm_name(), 8);
    c.corrupt(mapped);
    EXPECT_TRUE(queue->Take(8).empty());
    EXPECT_TRUE(queue->closed());
    EXPECT_EQ(queue->close_reason(), layout::CloseReason::kBadIndex);
    EXPECT_EQ(mapped.closed(), static_cast<uint32_t>(layout::CloseReason::kBadIndex));
  }
}

TEST(RunQueueTest, ARegionTruncatedUnderTheDaemonClosesTheQueue) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  {
    MappedQueue mapped(queue->shm_name(), 8);
    mapped.Submit(1, SoftmaxOnBuffer("b", 1, 4, 0, 64));
    ASSERT_EQ(ftruncate(mapped.fd(), 0), 0);
  }
  EXPECT_FALSE(queue->HasWork());
  EXPECT_TRUE(queue->Take(8).empty());
  EXPECT_EQ(queue->close_reason(), layout::CloseReason::kRegionShrank);
  queue->Complete(1, absl::OkStatus(), nullptr);  // nowhere to go: dropped
  uint32_t value = 0;
  EXPECT_EQ(queue->Arm(value), nullptr);
}

TEST(RunQueueTest, RewrittenGeometryAndDaemonIndicesAreIgnored) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  mapped.header().entries = 1u << 30;
  mapped.header().completion_offset = 1ull << 40;
  mapped.header().sq_head = 12345;
  mapped.header().cq_tail = 777;
  mapped.header().closed = 3;
  mapped.Submit(7, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  std::vector<RunQueue::Taken> taken = queue->Take(8);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].tag, 7u);
  EXPECT_FALSE(queue->closed());
  queue->Complete(7, absl::OkStatus(), nullptr);
  EXPECT_EQ(mapped.header().cq_tail, 1u);  // its own index, rewritten
}

TEST(RunQueueTest, CompletionsOnlyForWhatWasTaken) {
  std::shared_ptr<RunQueue> queue = *RunQueue::Create(Self(), 8);
  MappedQueue mapped(queue->shm_name(), 8);
  queue->Complete(1, absl::OkStatus(), nullptr);
  EXPECT_EQ(mapped.header().cq_tail, 0u);
}

// ---------------------------------------------------------------- RunQueues

TEST(RunQueuesTest, OwnersCloseTheirOwnAndExitedOwnersAreReaped) {
  RunQueues queues(QueueLimits{2, 3});
  PeerProcess a = Self();
  PeerProcess b = Self();
  b.pid = a.pid + 100000;  // another (pretend) process
  std::shared_ptr<RunQueue> qa = *queues.Open(a, 0);
  EXPECT_EQ(qa->entries(), layout::kDefaultEntries);
  ASSERT_TRUE(queues.Open(a, 8).ok());
  EXPECT_EQ(queues.Open(a, 8).status().code(), absl::StatusCode::kResourceExhausted);
  std::shared_ptr<RunQueue> qb = *queues.Open(b, 8);
  EXPECT_EQ(queues.Open(b, 8).status().code(), absl::StatusCode::kResourceExhausted);  // total
  EXPECT_EQ(queues.Close(b, qa->id()).code(), absl::StatusCode::kNotFound);
  const uint64_t generation = queues.generation();
  EXPECT_TRUE(queues.Close(a, qa->id()).ok());
  EXPECT_NE(queues.generation(), generation);
  EXPECT_EQ(qa->close_reason(), layout::CloseReason::kClosedByOwner);
  EXPECT_EQ(queues.Reap([&](const PeerProcess& p) { return !(p == b); }), 1);
  EXPECT_EQ(qb->close_reason(), layout::CloseReason::kOwnerExited);
  EXPECT_EQ(queues.size(), 1);
}

// ---------------------------------------------------------------- QueuePoller

// A backend for the poller's tests: its devices' streams answer a Run after
// `polls` Polls of the stream (or it has none when `polls` < 0), and count
// what they hold.
class StreamingBackend final : public Backend {
 public:
  explicit StreamingBackend(int polls) : polls_(polls) {}
  std::string name() const override { return "fake"; }
  absl::StatusOr<RunResult> Execute(int, const RunRequest&) override { return RunResult(); }
  std::unique_ptr<RunStream> OpenRunStream(int, RunPriority) override {
    if (polls_ < 0) return nullptr;
    return std::make_unique<Stream>(*this);
  }
  int max_in_flight() const { return max_in_flight_.load(); }
  int unflushed_polls() const { return unflushed_polls_.load(); }

 private:
  class Stream final : public RunStream {
   public:
    explicit Stream(StreamingBackend& backend) : backend_(backend) {}
    ~Stream() override {
      for (InFlight& run : runs_) run.done(absl::UnavailableError("stream closed"));
    }
    void Submit(const RunRequest&, Done done) override {
      runs_.push_back({std::move(done), backend_.polls_, false});
      int seen = backend_.max_in_flight_.load();
      const int now = static_cast<int>(runs_.size());
      while (now > seen && !backend_.max_in_flight_.compare_exchange_weak(seen, now)) {
      }
    }
    void Flush() override {
      for (InFlight& run : runs_) run.flushed = true;
    }
    int Poll() override {
      for (InFlight& run : runs_) {
        if (run.flushed) {
          --run.polls_left;
        } else {
          ++backend_.unflushed_polls_;
        }
      }
      while (!runs_.empty() && runs_.front().flushed && runs_.front().polls_left <= 0) {
        Done done = std::move(runs_.front().done);
        runs_.pop_front();
        done(RunResult());
      }
      return static_cast<int>(runs_.size());
    }

   private:
    struct InFlight {
      Done done;
      int polls_left;
      bool flushed;
    };
    StreamingBackend& backend_;
    std::deque<InFlight> runs_;
  };

  const int polls_;
  std::atomic<int> max_in_flight_{0};
  std::atomic<int> unflushed_polls_{0};
};

// Records what the poller hands over, in order, and answers it: on the
// queue's stream when the backend has streams, else at once. The first one
// can be held until a release.
class RecordingSink final : public QueuedRunSink {
 public:
  explicit RecordingSink(int polls = -1) : backend_(polls) {}
  std::unique_ptr<QueueStreams> OpenStreams() override {
    return std::make_unique<QueueStreams>(backend_);
  }
  void RunQueued(const std::shared_ptr<RunQueue>& queue, RunQueue::Taken taken,
                 QueueStreams& streams) override {
    if (!first_.HasBeenNotified()) {
      first_.Notify();
      release_.WaitForNotification();
    }
    {
      absl::MutexLock lock(&mu_);
      order_.push_back(taken.tag);
    }
    RunStream::Done done = [this, queue, tag = taken.tag](absl::StatusOr<RunResult> result) {
      {
        absl::MutexLock lock(&mu_);
        answers_.push_back(result.status().code());
      }
      queue->Complete(tag, result.status(), nullptr);
    };
    if (!streams.Submit(0, RunPriority::kNormal, request_, done)) done(RunResult());
  }
  std::vector<uint64_t> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }
  std::vector<absl::StatusCode> answers() {
    absl::MutexLock lock(&mu_);
    return answers_;
  }
  const StreamingBackend& backend() const { return backend_; }
  absl::Notification first_;
  absl::Notification release_;

 private:
  StreamingBackend backend_;
  const RunRequest request_;  // the streams only hold on to it
  absl::Mutex mu_;
  std::vector<uint64_t> order_;
  std::vector<absl::StatusCode> answers_;
};

TEST(QueuePollerTest, ABusyQueueDoesNotStarveAnother) {
  RunQueues queues(QueueLimits{});
  RecordingSink sink;
  PollerOptions options;
  options.threads = 1;  // both queues on one poller
  options.max_per_queue_per_pass = 4;
  QueuePoller poller(queues, sink, options);
  std::shared_ptr<RunQueue> busy = *queues.Open(Self(), 64);
  std::shared_ptr<RunQueue> quiet = *queues.Open(Self(), 8);
  poller.Wake();
  MappedQueue busy_map(busy->shm_name(), 64);
  MappedQueue quiet_map(quiet->shm_name(), 8);
  for (uint32_t i = 0; i < 64; ++i) busy_map.Write(i, i, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  busy_map.Publish(64);
  sink.first_.WaitForNotification();
  quiet_map.Submit(1000, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  sink.release_.Notify();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (sink.order().size() < 65 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  const std::vector<uint64_t> order = sink.order();
  ASSERT_EQ(order.size(), 65u);
  const auto quiet_at = std::find(order.begin(), order.end(), 1000) - order.begin();
  // At most two passes of the busy queue before it: 2 x 4.
  EXPECT_LE(quiet_at, 8) << "the quiet queue's Run came " << quiet_at << "th";
}

TEST(QueuePollerTest, QueuesOnAnotherPollerAreNotHeldByABlockedOne) {
  RunQueues queues(QueueLimits{});
  RecordingSink sink;
  PollerOptions options;
  options.threads = 2;  // queues opened in turn go to pollers in turn
  QueuePoller poller(queues, sink, options);
  std::shared_ptr<RunQueue> blocked = *queues.Open(Self(), 8);
  std::shared_ptr<RunQueue> other = *queues.Open(Self(), 8);
  poller.Wake();
  MappedQueue blocked_map(blocked->shm_name(), 8);
  MappedQueue other_map(other->shm_name(), 8);
  blocked_map.Submit(1, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  sink.first_.WaitForNotification();  // its poller is now stuck in the sink
  for (uint64_t tag = 100; tag < 110; ++tag) {
    other_map.Submit(tag, SoftmaxOnBuffer("b", 1, 4, 0, 64));
    std::optional<MappedQueue::Completion> done = other_map.Next(absl::Seconds(5));
    ASSERT_TRUE(done) << "the other poller did not answer tag " << tag;
    EXPECT_EQ(done->tag, tag);
  }
  sink.release_.Notify();
  std::optional<MappedQueue::Completion> done = blocked_map.Next(absl::Seconds(5));
  ASSERT_TRUE(done);
  EXPECT_EQ(done->tag, 1u);
}

TEST(QueuePollerTest, StreamsAnswerAfterTheirBatchIsMarkedAndBoundWhatIsInFlight) {
  RunQueues queues(QueueLimits{});
  RecordingSink sink(/*polls=*/3);
  sink.first_.Notify();
  PollerOptions options;
  options.threads = 1;
  options.max_per_queue_per_pass = 32;
  QueuePoller poller(queues, sink, options);
  std::shared_ptr<RunQueue> queue = *queues.Open(Self(), 256);
  poller.Wake();
  MappedQueue mapped(queue->shm_name(), 256);
  for (uint32_t i = 0; i < 256; ++i) mapped.Write(i, i, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  mapped.Publish(256);
  std::vector<uint64_t> tags;
  while (tags.size() < 256) {
    std::optional<MappedQueue::Completion> done = mapped.Next(absl::Seconds(5));
    ASSERT_TRUE(done) << "only " << tags.size() << " of 256 answered";
    EXPECT_EQ(done->code, absl::StatusCode::kOk);
    tags.push_back(done->tag);
  }
  for (uint64_t i = 0; i < 256; ++i) EXPECT_EQ(tags[i], i);  // one stream: in order
  EXPECT_LE(sink.backend().max_in_flight(), kMaxQueueRunsInFlight);
  EXPECT_GT(sink.backend().max_in_flight(), 1);  // batches were in flight together
  // Every Poll came after the Flush of what it looked at.
  EXPECT_EQ(sink.backend().unflushed_polls(), 0);
}

TEST(QueuePollerTest, RunsInFlightKeepThePollerAwakeAndAreAnsweredWhenItStops) {
  RunQueues queues(QueueLimits{});
  // Never done by themselves: only the streams' ends answer these Runs.
  RecordingSink sink(/*polls=*/std::numeric_limits<int>::max());
  sink.first_.Notify();
  PollerOptions options;
  options.threads = 1;
  options.idle_spin = absl::Milliseconds(1);
  auto poller = std::make_unique<QueuePoller>(queues, sink, options);
  std::shared_ptr<RunQueue> queue = *queues.Open(Self(), 8);
  poller->Wake();
  MappedQueue mapped(queue->shm_name(), 8);
  mapped.Submit(1, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  mapped.Submit(2, SoftmaxOnBuffer("b", 1, 4, 0, 64));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (sink.order().size() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(sink.order().size(), 2u);
  // In flight, well past idle_spin: the poller keeps looking, never sleeps
  // (it may have slept before the queue opened).
  const int64_t sleeps = poller->sleeps();
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(poller->sleeps(), sleeps);
  EXPECT_TRUE(sink.answers().empty());
  // Stopping closes the queue and ends its streams, which answer their Runs.
  poller.reset();
  EXPECT_EQ(queue->close_reason(), layout::CloseReason::kShutdown);
  EXPECT_EQ(mapped.header().closed, static_cast<uint32_t>(layout::CloseReason::kShutdown));
  EXPECT_THAT(sink.answers(), ::testing::ElementsAre(absl::StatusCode::kUnavailable,
                                                     absl::StatusCode::kUnavailable));
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

TEST(QueuePollerTest, SleepsWhenIdleAndWakesOnTheDoorbell) {
  RunQueues queues(QueueLimits{});
  RecordingSink sink;
  sink.first_.Notify();  // no hold-up
  PollerOptions options;
  options.idle_spin = absl::Milliseconds(1);
  QueuePoller poller(queues, sink, options);
  std::shared_ptr<RunQueue> queue = *queues.Open(Self(), 8);
  poller.Wake();
  MappedQueue mapped(queue->shm_name(), 8);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_GE(poller.sleeps(), 1);
  EXPECT_EQ(mapped.header().need_wakeup, 1u);
  // Asleep: a quarter second costs (next to) no CPU.
  const double before = ProcessCpuSeconds();
  absl::SleepFor(absl::Milliseconds(250));
  EXPECT_LT(ProcessCpuSeconds() - before, 0.025);
  // A doorbell wakes it, over and over.
  for (uint64_t tag = 1; tag <= 20; ++tag) {
    mapped.Submit(tag, SoftmaxOnBuffer("b", 1, 4, 0, 64));
    std::optional<MappedQueue::Completion> done = mapped.Next(absl::Seconds(5));
    ASSERT_TRUE(done) << "no completion for tag " << tag;
    EXPECT_EQ(done->tag, tag);
    absl::SleepFor(absl::Milliseconds(3));  // past idle_spin: asleep again
  }
  EXPECT_GE(poller.sleeps(), 10);
}

// ---------------------------------------------------------------- the service

// A KernTuneService on the CPU backend whose every caller is this process
// (or, through `Other()`, a pretend second one), a host shm buffer
// registered by each, and queues opened through the handlers.
class ServiceQueueTest : public ::testing::Test {
 protected:
  static constexpr int64_t kBufferBytes = 1 << 16;

  void SetUp() override {
    ServiceOptions options;
    options.max_request_bytes = int64_t{1} << 20;
    options.backend_reason = "test";
    options.identify_caller = [this](absl::string_view peer) -> std::optional<PeerProcess> {
      if (peer == "tcp") return std::nullopt;
      if (peer == "other") return Parent();
      return Self();
    };
    options.metrics = &metrics_;
    service_ = std::make_unique<KernTuneService>(backend(), std::move(options));
    for (const char* peer : {"self", "other"}) {
      ASSERT_NO_FATAL_FAILURE(buffers_[peer] = Register(peer, peer));
    }
  }
  void TearDown() override {
    service_.reset();
    for (auto& [peer, buffer] : buffers_) munmap(buffer.data, kBufferBytes);
  }
  // The backend the service runs on.
  virtual Backend& backend() { return backend_; }

  struct Buffer {
    std::string id;
    char* data = nullptr;
  };
  // A new shm object of kBufferBytes registered by `peer` (`what` makes its
  // name unique); the caller unmaps it unless it goes into buffers_.
  Buffer Register(const std::string& peer, const std::string& what) {
    const std::string name = absl::StrCat("/kt-queue-test-", getpid(), "-", what);
    shm_unlink(name.c_str());
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, kBufferBytes), 0);
    char* data = static_cast<char*>(
        mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    pb::RegisterBufferRequest request;
    request.mutable_host_shm()->set_name(name);
    pb::RegisterBufferResponse response;
    const grpc::Status status = service_->HandleRegisterBuffer(peer, &request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    shm_unlink(name.c_str());
    return {response.buffer().buffer_id(), data};
  }

  struct Opened {
    std::string id;
    std::unique_ptr<MappedQueue> mapped;
  };
  Opened Open(const std::string& peer = "self", uint32_t entries = 8) {
    pb::OpenQueueRequest request;
    request.set_entries(entries);
    pb::OpenQueueResponse response;
    const grpc::Status status = service_->HandleOpenQueue(peer, &request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.queue_id(), std::make_unique<MappedQueue>(response.shm_name(), entries)};
  }

  // rows x 64 float32 of i * 0.01 at offset 0 of `peer`'s buffer; returns
  // the softmax request writing at offset 32 KiB.
  pb::RunRequest FillSoftmax(const std::string& peer, int64_t rows) {
    float* in = reinterpret_cast<float*>(buffers_[peer].data);
    for (int64_t i = 0; i < rows * 64; ++i) in[i] = 0.01f * static_cast<float>(i % 97);
    return SoftmaxOnBuffer(buffers_[peer].id, rows, 64, 0, kBufferBytes / 2);
  }
  // Checks row 0 of the output against the fp64 softmax.
  void ExpectSoftmaxRow0(const std::string& peer) {
    const float* in = reinterpret_cast<const float*>(buffers_[peer].data);
    const float* out = reinterpret_cast<const float*>(buffers_[peer].data + kBufferBytes / 2);
    double max = in[0], sum = 0;
    for (int c = 0; c < 64; ++c) max = std::max<double>(max, in[c]);
    for (int c = 0; c < 64; ++c) sum += std::exp(in[c] - max);
    for (int c = 0; c < 64; ++c) EXPECT_NEAR(out[c], std::exp(in[c] - max) / sum, 1e-6) << c;
  }
  // Submits `request` with `tag` and returns its completion (a failure when
  // none comes, or another tag's).
  MappedQueue::Completion RunQueued(MappedQueue& queue, uint64_t tag,
                                    const pb::RunRequest& request) {
    queue.Submit(tag, request);
    std::optional<MappedQueue::Completion> done = queue.Next();
    EXPECT_TRUE(done) << "no completion for tag " << tag;
    if (!done) return {};
    EXPECT_EQ(done->tag, tag);
    return *done;
  }

  Metrics metrics_{"test", "test"};
  CpuBackend backend_{1};
  std::unique_ptr<KernTuneService> service_;
  std::map<std::string, Buffer> buffers_;
};

TEST_F(ServiceQueueTest, RunsASoftmaxAndAnswersWithTheConfigSource) {
  Opened queue = Open();
  std::memset(buffers_["self"].data + kBufferBytes / 2, 0, 256);
  queue.mapped->Submit(42, FillSoftmax("self", 2));
  std::optional<MappedQueue::Completion> done = queue.mapped->Next();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->tag, 42u);
  ASSERT_EQ(done->code, absl::StatusCode::kOk) << done->payload;
  EXPECT_EQ(done->response().backend(), "cpu");
  EXPECT_EQ(done->response().config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
  EXPECT_GT(done->response().kernel_time_us(), 0);
  ExpectSoftmaxRow0("self");
  pb::GetStatusRequest status_request;
  pb::GetStatusResponse status;
  ASSERT_TRUE(service_->HandleGetStatus("self", &status_request, &status).ok());
  EXPECT_EQ(status.open_queues(), 1);
  EXPECT_EQ(status.stats().runs(), 1);
}

TEST_F(ServiceQueueTest, ABatchOfManyDescriptorsWithOneWakeUp) {
  Opened queue = Open("self", 64);
  const pb::RunRequest request = FillSoftmax("self", 4);
  for (uint32_t i = 0; i < 40; ++i) queue.mapped->Write(i, 1000 + i, request);
  queue.mapped->Publish(40);
  std::set<uint64_t> tags;
  for (int i = 0; i < 40; ++i) {
    std::optional<MappedQueue::Completion> done = queue.mapped->Next();
    ASSERT_TRUE(done);
    EXPECT_EQ(done->code, absl::StatusCode::kOk) << done->payload;
    tags.insert(done->tag);
  }
  EXPECT_EQ(tags.size(), 40u);
  EXPECT_EQ(*tags.begin(), 1000u);
  ExpectSoftmaxRow0("self");
}

TEST_F(ServiceQueueTest, QueuesNeedTheUnixSocketAndBelongToTheirOwner) {
  pb::OpenQueueRequest open;
  pb::OpenQueueResponse opened;
  EXPECT_EQ(service_->HandleOpenQueue("tcp", &open, &opened).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  open.set_entries(6);
  EXPECT_EQ(service_->HandleOpenQueue("self", &open, &opened).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  Opened queue = Open();
  pb::CloseQueueRequest close;
  close.set_queue_id(queue.id);
  pb::CloseQueueResponse closed;
  EXPECT_EQ(service_->HandleCloseQueue("other", &close, &closed).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(service_->HandleCloseQueue("self", &close, &closed).ok());
  EXPECT_EQ(queue.mapped->closed(), static_cast<uint32_t>(layout::CloseReason::kClosedByOwner));
  EXPECT_EQ(service_->HandleCloseQueue("self", &close, &closed).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// A hostile or broken queue state: what the client does to its queue, and
// what must come of it (an error completion with `code`, or the queue
// closed with `closed`).
struct HostileCase {
  std::string name;
  std::function<void(MappedQueue&, const std::string& own_id, const std::string& other_id)> act;
  absl::StatusCode code = absl::StatusCode::kOk;  // kOk: no completion expected
  std::string message;
  layout::CloseReason closed = layout::CloseReason::kOpen;
};

pb::RunRequest Softmax(const std::string& id) { return SoftmaxOnBuffer(id, 2, 64, 0, 32768); }

std::vector<HostileCase> HostileCases() {
  using absl::StatusCode;
  using layout::CloseReason;
  std::vector<HostileCase> cases;
  auto raw = [](uint32_t length, uint32_t flags, std::string payload) {
    return [=](MappedQueue& m, const std::string&, const std::string&) {
      m.WriteRaw(0, 9, length, flags, payload);
      m.Publish(1);
    };
  };
  auto request = [](std::function<void(pb::RunRequest&, const std::string&, const std::string&)>
                        edit) {
    return [=](MappedQueue& m, const std::string& own, const std::string& other) {
      pb::RunRequest r = Softmax(own);
      edit(r, own, other);
      m.Submit(9, r);
    };
  };
  const std::string valid = Softmax("x").SerializeAsString();
  cases.push_back({"length 0", raw(0, 0, ""), StatusCode::kInvalidArgument, "length=0"});
  cases.push_back({"length past the slot", raw(layout::kMaxRequestBytes + 1, 0, valid),
                   StatusCode::kInvalidArgument, "length=1009"});
  cases.push_back({"length 0xffffffff", raw(0xffffffffu, 0, valid),
                   StatusCode::kInvalidArgument, "length=4294967295"});
  cases.push_back({"flags set", raw(static_cast<uint32_t>(valid.size()), 4, valid),
                   StatusCode::kInvalidArgument, "flags=4"});
  cases.push_back({"bytes that are no proto", raw(64, 0, std::string(64, '\xff')),
                   StatusCode::kInvalidArgument,
                   "is not a kerntune.v1.RunRequest in protobuf's wire format"});
  cases.push_back({"a torn request (its first half)",
                   raw(static_cast<uint32_t>(valid.size() / 2), 0, valid),
                   StatusCode::kInvalidArgument, ""});
  cases.push_back({"a valid proto of zeros", raw(8, 0, std::string(8, '\0')),
                   StatusCode::kInvalidArgument, ""});
  // The bytes of a valid Run of this queue's own (after a valid Run, those
  // of the last descriptor), broken in the slot's header.
  auto own = [](uint32_t length_cut, uint32_t flags) {
    return [=](MappedQueue& m, const std::string& own_id, const std::string&) {
      const std::string bytes = Softmax(own_id).SerializeAsString();
      m.WriteRaw(0, 9, static_cast<uint32_t>(bytes.size()) - length_cut, flags, bytes);
      m.Publish(1);
    };
  };
  cases.push_back({"a valid Run's bytes with flags set", own(0, 1), StatusCode::kInvalidArgument,
                   "flags=1"});
  cases.push_back({"a valid Run's bytes, torn (the last 4 missing)", own(4, 0),
                   StatusCode::kInvalidArgument, ""});
  cases.push_back({"inline input", request([](auto& r, auto&, auto&) {
                     r.mutable_input()->set_inline_data(std::string(512, '\0'));
                   }),
                   StatusCode::kInvalidArgument, "a queue carries tensors in client memory"});
  cases.push_back({"output returned inline",
                   request([](auto& r, auto&, auto&) { r.mutable_output()->set_return_inline(true); }),
                   StatusCode::kInvalidArgument, "returned inline"});
  cases.push_back({"another process's buffer", request([](auto& r, auto&, const std::string& other) {
                     r.mutable_input()->mutable_buffer()->set_buffer_id(other);
                   }),
                   StatusCode::kNotFound, "not registered by this process"});
  cases.push_back({"an unknown buffer", request([](auto& r, auto&, auto&) {
                     r.mutable_output()->mutable_buffer()->set_buffer_id("0123456789abcdef");
                   }),
                   StatusCode::kNotFound, "output"});
  cases.push_back({"a tensor past the buffer's end", request([](auto& r, auto&, auto&) {
                     r.mutable_output()->mutable_buffer()->set_offset_bytes(65536 - 256);
                   }),
                   StatusCode::kOutOfRange, "past the end"});
  cases.push_back({"a shape that overflows", request([](auto& r, auto&, auto&) {
                     r.mutable_shape()->set_rows(int64_t{1} << 40);
                     r.mutable_shape()->set_cols(int64_t{1} << 40);
                   }),
                   StatusCode::kInvalidArgument, ""});
  cases.push_back({"output overlapping the input", request([](auto& r, auto&, auto&) {
                     r.mutable_output()->mutable_buffer()->set_offset_bytes(4);
                   }),
                   StatusCode::kInvalidArgument, "overlaps"});
  cases.push_back({"an op's parameters on another op", request([](auto& r, auto&, auto&) {
                     r.mutable_layer_norm()->set_epsilon(1e-5);
                   }),
                   StatusCode::kInvalidArgument, "layer_norm is set"});
  cases.push_back({"events without device tensors", request([](auto& r, auto&, auto&) {
                     r.set_done_event(std::string(64, '\1'));
                   }),
                   StatusCode::kInvalidArgument, "done_event"});
  cases.push_back({"a device that does not exist", request([](auto& r, auto&, auto&) {
                     r.set_device(std::string(100, 'x'));
                   }),
                   StatusCode::kInvalidArgument, "device"});
  cases.push_back({"sq_tail past the ring",
                   [](MappedQueue& m, auto&, auto&) { m.Publish(9); }, StatusCode::kOk, "",
                   CloseReason::kBadIndex});
  cases.push_back({"sq_tail moved backwards",
                   [](MappedQueue& m, auto&, auto&) {
                     m.header().sq_tail = 0xfffffff0u;
                     m.Ring();
                   },
                   StatusCode::kOk, "", CloseReason::kBadIndex});
  cases.push_back({"cq_head past cq_tail",
                   [](MappedQueue& m, const std::string& own, auto&) {
                     m.header().cq_head = 1000;
                     m.Submit(9, Softmax(own));
                   },
                   StatusCode::kOk, "", CloseReason::kBadIndex});
  cases.push_back({"the region truncated",
                   [](MappedQueue& m, const std::string& own, auto&) {
                     m.Write(0, 9, Softmax(own));  // found by the next pass
                     ASSERT_EQ(ftruncate(m.fd(), 0), 0);
                   },
                   StatusCode::kOk, "", CloseReason::kRegionShrank});
  cases.push_back({"the geometry rewritten (then a valid Run)",
                   [](MappedQueue& m, const std::string& own, auto&) {
                     m.header().entries = 0xffffffffu;
                     m.header().completion_offset = ~0ull;
                     m.header().sq_head = 77;  // the daemon's, ignored
                     m.Submit(9, Softmax(own));
                   },
                   StatusCode::kOk, "", CloseReason::kOpen});
  cases.push_back({"the doorbell rung without work",
                   [](MappedQueue& m, const std::string& own, auto&) {
                     for (int i = 0; i < 1000; ++i) {
                       __atomic_store_n(&m.header().need_wakeup, 1u, __ATOMIC_SEQ_CST);
                       m.Ring();
                     }
                     m.header().client_waiting = 0xdeadbeef;
                     m.Submit(9, Softmax(own));
                   },
                   StatusCode::kOk, "", CloseReason::kOpen});
  return cases;
}

TEST_F(ServiceQueueTest, HostileQueueStatesHurtNobodyElse) {
  Opened bystander = Open("other", 8);
  uint64_t bystander_tag = 0;
  // Each case on a fresh queue, then on one whose last descriptor was a
  // valid Run (the one the `request` cases edit): what the queue keeps of
  // it must not answer for what follows.
  for (const bool primed : {false, true}) {
    for (const HostileCase& c : HostileCases()) {
      SCOPED_TRACE(c.name + (primed ? " (after a valid Run)" : ""));
      Opened queue = Open();
      if (primed) {
        const MappedQueue::Completion valid =
            RunQueued(*queue.mapped, 8, Softmax(buffers_["self"].id));
        ASSERT_EQ(valid.code, absl::StatusCode::kOk) << valid.payload;
      }
      c.act(*queue.mapped, buffers_["self"].id, buffers_["other"].id);
      if (c.closed == layout::CloseReason::kRegionShrank) {
        // Nothing can be read back from the region: the bystander's Run below
        // makes the poller look at every queue, and the daemon's status says
        // the broken one was closed.
      } else if (c.closed != layout::CloseReason::kOpen) {
        const absl::Time deadline = absl::Now() + absl::Seconds(10);
        while (queue.mapped->closed() == 0 && absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        EXPECT_EQ(queue.mapped->closed(), static_cast<uint32_t>(c.closed));
        EXPECT_EQ(queue.mapped->ready(), 0u);
      } else {
        std::optional<MappedQueue::Completion> done = queue.mapped->Next();
        ASSERT_TRUE(done);
        EXPECT_EQ(done->tag, 9u);
        EXPECT_EQ(done->code, c.code) << done->payload;
        EXPECT_THAT(done->payload, HasSubstr(c.message));
        EXPECT_EQ(queue.mapped->closed(), 0u);
      }
      // The other client's queue is served, and right.
      std::memset(buffers_["other"].data + kBufferBytes / 2, 0, 512);
      bystander.mapped->Submit(++bystander_tag, FillSoftmax("other", 2));
      std::optional<MappedQueue::Completion> done = bystander.mapped->Next();
      ASSERT_TRUE(done);
      EXPECT_EQ(done->tag, bystander_tag);
      EXPECT_EQ(done->code, absl::StatusCode::kOk) << done->payload;
      ExpectSoftmaxRow0("other");
      if (c.closed == layout::CloseReason::kRegionShrank) {
        const absl::Time deadline = absl::Now() + absl::Seconds(10);
        pb::GetStatusRequest request;
        pb::GetStatusResponse status;
        do {
          absl::SleepFor(absl::Milliseconds(1));
          service_->Housekeep(absl::Now());
          ASSERT_TRUE(service_->HandleGetStatus("self", &request, &status).ok());
        } while (status.open_queues() > 1 && absl::Now() < deadline);
      }
      // A queue the daemon closed is reaped; an open one is closed by its
      // owner. Only the bystander's is left.
      service_->Housekeep(absl::Now());
      pb::CloseQueueRequest close;
      close.set_queue_id(queue.id);
      pb::CloseQueueResponse closed;
      const grpc::Status closing = service_->HandleCloseQueue("self", &close, &closed);
      EXPECT_EQ(closing.ok(), c.closed == layout::CloseReason::kOpen) << closing.error_message();
      pb::GetStatusRequest status_request;
      pb::GetStatusResponse status;
      ASSERT_TRUE(service_->HandleGetStatus("self", &status_request, &status).ok());
      EXPECT_EQ(status.open_queues(), 1);
    }
  }
  EXPECT_GE(HostileCases().size(), 20u);
}

// ---------------------------------------------------------------- repeated descriptors

TEST_F(ServiceQueueTest, ARepeatedDescriptorIsValidatedOnceAndRunAnewEachTime) {
  Opened queue = Open("self", 16);
  const pb::RunRequest request = FillSoftmax("self", 2);
  // The same Run over gRPC, writing to a second output: what a request
  // validated afresh gives.
  pb::RunRequest fresh = request;
  fresh.mutable_output()->mutable_buffer()->set_offset_bytes(kBufferBytes / 4);
  char* data = buffers_["self"].data;
  float* in = reinterpret_cast<float*>(data);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    // New inputs each time: an output not computed again is wrong.
    for (int i = 0; i < 2 * 64; ++i) {
      in[i] = 0.05f * static_cast<float>(i * (round + 3) % 89) - static_cast<float>(round);
    }
    std::memset(data + kBufferBytes / 2, 0, 512);
    const MappedQueue::Completion done = RunQueued(*queue.mapped, 100 + round, request);
    ASSERT_EQ(done.code, absl::StatusCode::kOk) << done.payload;
    EXPECT_EQ(done.response().server_timing().repeated_descriptor(), round > 0);
    EXPECT_EQ(done.response().config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
    ExpectSoftmaxRow0("self");
    pb::RunResponse direct;
    ASSERT_TRUE(service_->HandleRun("self", &fresh, &direct).ok());
    EXPECT_FALSE(direct.server_timing().repeated_descriptor());
    EXPECT_EQ(std::string(data + kBufferBytes / 2, 2 * 64 * sizeof(float)),
              std::string(data + kBufferBytes / 4, 2 * 64 * sizeof(float)));
  }
  // A batch of the same descriptor shares the validation kept.
  for (uint32_t i = 0; i < 6; ++i) queue.mapped->Write(i, 200 + i, request);
  queue.mapped->Publish(6);
  for (int i = 0; i < 6; ++i) {
    std::optional<MappedQueue::Completion> done = queue.mapped->Next();
    ASSERT_TRUE(done);
    EXPECT_EQ(done->code, absl::StatusCode::kOk) << done->payload;
    EXPECT_TRUE(done->response().server_timing().repeated_descriptor());
  }
  ExpectSoftmaxRow0("self");
  // Every Run used the registration (renewed its lease, counted itself):
  // 4 queued, 4 over gRPC, 6 in the batch.
  pb::ListBuffersRequest list;
  pb::ListBuffersResponse listed;
  ASSERT_TRUE(service_->HandleListBuffers("self", &list, &listed).ok());
  ASSERT_EQ(listed.buffers_size(), 1);
  EXPECT_EQ(listed.buffers(0).runs(), 14);
}

TEST_F(ServiceQueueTest, ARepeatedDescriptorIsResolvedAgainstTheOwnersBuffersEachTime) {
  Buffer extra = Register("self", "extra");
  const pb::RunRequest request = SoftmaxOnBuffer(extra.id, 2, 64, 0, kBufferBytes / 2);
  // The same but for its output, past the registration's end.
  const pb::RunRequest past_end = SoftmaxOnBuffer(extra.id, 2, 64, 0, kBufferBytes - 256);
  const auto expect_as_grpc = [&](const MappedQueue::Completion& done,
                                  const pb::RunRequest& sent, absl::StatusCode code) {
    pb::RunResponse direct;
    const grpc::Status status = service_->HandleRun("self", &sent, &direct);
    EXPECT_EQ(done.code, code) << done.payload;
    EXPECT_EQ(static_cast<int>(status.error_code()), static_cast<int>(code));
    EXPECT_EQ(done.payload, status.error_message());
  };
  Opened queue = Open();
  for (uint64_t tag : {1, 2}) {
    const MappedQueue::Completion done = RunQueued(*queue.mapped, tag, request);
    ASSERT_EQ(done.code, absl::StatusCode::kOk) << done.payload;
    EXPECT_EQ(done.response().server_timing().repeated_descriptor(), tag == 2);
  }
  // Bounds are checked per Run: refused each time, kept validation or not.
  for (uint64_t tag : {3, 4}) {
    expect_as_grpc(RunQueued(*queue.mapped, tag, past_end), past_end,
                   absl::StatusCode::kOutOfRange);
  }
  ASSERT_EQ(RunQueued(*queue.mapped, 5, request).code, absl::StatusCode::kOk);
  // The same bytes through another process's queue name none of its buffers.
  Opened others = Open("other");
  const MappedQueue::Completion foreign = RunQueued(*others.mapped, 6, request);
  EXPECT_EQ(foreign.code, absl::StatusCode::kNotFound);
  EXPECT_THAT(foreign.payload, HasSubstr("not registered by this process"));
  // Unregistered between two identical descriptors: the second fails as a
  // gRPC Run does.
  pb::UnregisterBufferRequest unregister;
  unregister.set_buffer_id(extra.id);
  pb::UnregisterBufferResponse unregistered;
  ASSERT_TRUE(service_->HandleUnregisterBuffer("self", &unregister, &unregistered).ok());
  for (uint64_t tag : {7, 8}) {
    const MappedQueue::Completion done = RunQueued(*queue.mapped, tag, request);
    expect_as_grpc(done, request, absl::StatusCode::kNotFound);
    EXPECT_THAT(done.payload, HasSubstr("input"));
  }
  munmap(extra.data, kBufferBytes);
}

TEST_F(ServiceQueueTest, ARewrittenDescriptorIsValidatedAgain) {
  Opened queue = Open();
  const pb::RunRequest valid = FillSoftmax("self", 2);
  ASSERT_EQ(RunQueued(*queue.mapped, 1, valid).code, absl::StatusCode::kOk);
  // Rewritten: the input where no float32 can start. Refused as over gRPC,
  // though the queue kept the validation of the Run before; refused again
  // when it repeats (a refusal is not kept).
  pb::RunRequest misaligned = valid;
  misaligned.mutable_input()->mutable_buffer()->set_offset_bytes(2);
  pb::RunResponse direct;
  const grpc::Status refused = service_->HandleRun("self", &misaligned, &direct);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (uint64_t tag : {2, 3}) {
    const MappedQueue::Completion done = RunQueued(*queue.mapped, tag, misaligned);
    EXPECT_EQ(done.code, absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(done.payload, refused.error_message());
    EXPECT_THAT(done.payload, HasSubstr("input.buffer.offset_bytes=2"));
  }
  // Another valid Run (three rows) is validated afresh and runs its own
  // shape; then the first again, validated again since other bytes came
  // between, and then repeated.
  const pb::RunRequest other = FillSoftmax("self", 3);
  std::memset(buffers_["self"].data + kBufferBytes / 2, 0, 3 * 64 * sizeof(float));
  MappedQueue::Completion done = RunQueued(*queue.mapped, 4, other);
  ASSERT_EQ(done.code, absl::StatusCode::kOk) << done.payload;
  EXPECT_FALSE(done.response().server_timing().repeated_descriptor());
  const float* out = reinterpret_cast<const float*>(buffers_["self"].data + kBufferBytes / 2);
  EXPECT_NE(out[2 * 64], 0.0f);  // its third row was written
  for (uint64_t tag : {5, 6}) {
    done = RunQueued(*queue.mapped, tag, valid);
    ASSERT_EQ(done.code, absl::StatusCode::kOk) << done.payload;
    EXPECT_EQ(done.response().server_timing().repeated_descriptor(), tag == 6);
  }
  // Within one batch: the kept one, a rewritten one, the kept one's bytes
  // again (parsed again after other bytes, so validated again).
  queue.mapped->Write(0, 7, valid);
  queue.mapped->Write(1, 8, misaligned);
  queue.mapped->Write(2, 9, valid);
  queue.mapped->Publish(3);
  const absl::StatusCode want[] = {absl::StatusCode::kOk, absl::StatusCode::kInvalidArgument,
                                   absl::StatusCode::kOk};
  for (int i = 0; i < 3; ++i) {
    std::optional<MappedQueue::Completion> next = queue.mapped->Next();
    ASSERT_TRUE(next);
    EXPECT_EQ(next->tag, 7u + i);
    EXPECT_EQ(next->code, want[i]) << next->payload;
    if (next->code == absl::StatusCode::kOk) {
      EXPECT_EQ(next->response().server_timing().repeated_descriptor(), i == 0);
    }
  }
  ExpectSoftmaxRow0("self");
}

// A backend that looks up each Run's config as the GPU executor does (in a
// config cache of a described H100 over a tuning store in a temp dir),
// then runs the CPU reference.
class LookingUpBackend final : public Backend {
 public:
  explicit LookingUpBackend(const std::string& store)
      : cache_(*ConfigCache::Create(store, kernels::DescribedH100())) {}
  std::string name() const override { return "looking-up"; }
  absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) override {
    absl::StatusOr<tuner::ConfigChoice> choice =
        cache_->LookupForRun(request.op, request.dtype, request.shape);
    if (!choice.ok()) return choice.status();
    absl::StatusOr<RunResult> result = cpu_.Execute(0, request);
    if (result.ok()) result->config = *choice;
    return result;
  }
  absl::StatusOr<const ConfigCache*> ConfigCacheFor(absl::string_view device) const override {
    return cache_.get();
  }
  ConfigCache& cache() { return *cache_; }

 private:
  std::unique_ptr<ConfigCache> cache_;
  CpuBackend cpu_{1};
};

class LookedUpQueueTest : public ServiceQueueTest {
 protected:
  Backend& backend() override { return looking_up_; }

  kt::testing::ScopedTempDir dir_;
  const std::string store_ = dir_.File("tuning.db");
  LookingUpBackend looking_up_{store_};
};

TEST_F(LookedUpQueueTest, AReloadBetweenRepeatedDescriptorsServesTheNewConfig) {
  Opened queue = Open();
  const pb::RunRequest request = FillSoftmax("self", 2);
  for (uint64_t tag : {1, 2}) {
    const MappedQueue::Completion done = RunQueued(*queue.mapped, tag, request);
    ASSERT_EQ(done.code, absl::StatusCode::kOk) << done.payload;
    EXPECT_EQ(done.response().server_timing().repeated_descriptor(), tag == 2);
    EXPECT_EQ(done.response().config().source(), pb::CONFIG_SOURCE_HEURISTIC);
  }
  // A tuning job lands a config of exactly this problem, not the
  // heuristic's; the daemon reloads its store.
  const kernels::DeviceInfo device = kernels::DescribedH100();
  const kernels::Shape shape{2, 64, 1};
  absl::StatusOr<kernels::LaunchConfig> heuristic =
      kernels::HeuristicConfig(kernels::Op::kSoftmax, kernels::DType::kFloat32, shape, device);
  absl::StatusOr<std::vector<kernels::LaunchConfig>> configs =
      kernels::EnumerateConfigs(kernels::Op::kSoftmax, kernels::DType::kFloat32, shape, device);
  ASSERT_TRUE(heuristic.ok() && configs.ok());
  ASSERT_GT(configs->size(), 1u);
  const kernels::LaunchConfig tuned =
      configs->front() != *heuristic ? configs->front() : configs->back();
  db::BestConfig row;
  row.point.op = "softmax";
  row.point.dtype = "float32";
  row.point.rows = shape.rows;
  row.point.cols = shape.cols;
  row.config = tuner::ConfigRecordOf(tuned);
  row.median_us = 7.5;
  row.heuristic_key = kernels::ConfigKey(*heuristic);
  row.env.kernel_version = kernels::kKernelLibraryVersion;
  row.updated_at = 1700000000;
  {
    db::OpenOptions options;
    options.create_if_missing = true;
    absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
        db::TuningStore::Open(store_, options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->ImportBestConfigs(tuner::SkuOf(device), {row}).ok());
  }
  absl::StatusOr<bool> reloaded = looking_up_.cache().ReloadIfChanged();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ASSERT_TRUE(*reloaded);
  pb::GetConfigRequest get;
  get.set_op(request.op());
  get.set_dtype(request.dtype());
  *get.mutable_shape() = request.shape();
  pb::GetConfigResponse served;
  ASSERT_TRUE(service_->HandleGetConfig("self", &get, &served).ok());
  ASSERT_EQ(served.config().source(), pb::CONFIG_SOURCE_TUNED);
  // The descriptor repeats, validation and all; its config is the new one.
  std::memset(buffers_["self"].data + kBufferBytes / 2, 0, 512);
  const MappedQueue::Completion done = RunQueued(*queue.mapped, 3, request);
  ASSERT_EQ(done.code, absl::StatusCode::kOk) << done.payload;
  EXPECT_TRUE(done.response().server_timing().repeated_descriptor());
  EXPECT_EQ(done.response().config().source(), pb::CONFIG_SOURCE_TUNED);
  EXPECT_EQ(done.response().config().tuned_median_us(), 7.5);
  EXPECT_EQ(done.response().config().config().SerializeAsString(),
            served.config().config().SerializeAsString());
  ExpectSoftmaxRow0("self");
}

TEST_F(ServiceQueueTest, QueueRunsAreCountedWithPathQueue) {
  Opened queue = Open();
  queue.mapped->Submit(1, FillSoftmax("self", 1));
  ASSERT_TRUE(queue.mapped->Next());
  pb::RunRequest bad = FillSoftmax("self", 1);
  bad.mutable_input()->mutable_buffer()->set_buffer_id("nope");
  queue.mapped->Submit(2, bad);
  ASSERT_TRUE(queue.mapped->Next());
  std::string text;
  for (const auto& family : metrics_.registry().Collect()) {
    if (family.name != "kerntune_runs_total" && family.name != "kerntune_runs") continue;
    for (const auto& metric : family.metric) {
      std::string labels;
      for (const auto& label : metric.label) absl::StrAppend(&labels, label.name, "=", label.value, ",");
      absl::StrAppend(&text, labels, " ", metric.counter.value, "\n");
    }
  }
  EXPECT_THAT(text, HasSubstr("path=queue,"));
  EXPECT_THAT(text, HasSubstr("code=OK"));
  EXPECT_THAT(text, HasSubstr("code=NOT_FOUND"));
  EXPECT_THAT(text, Not(HasSubstr("path=grpc,")));
}

}  // namespace
}  // namespace kt::server
