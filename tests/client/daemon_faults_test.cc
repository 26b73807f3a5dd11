// Faults around a real kerntuned (CPU backend), as its clients see them:
// the daemon killed with Runs in flight over gRPC and through the
// submission queue (every caller gets UNAVAILABLE at once, not at its
// deadline, and a new daemon takes the socket over), and clients that stop
// reading their answers (the daemon serves everyone else, idles beside a
// stuck queue, and hangs up on a gRPC client that answers no ping).
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "client/daemon_client.h"
#include "client/shared_memory.h"
#include "gtest/gtest.h"
#include "proto/run_queue_layout.h"
#include "tests/client/cpu_daemon.h"

namespace kt::client {
namespace {

using Clock = std::chrono::steady_clock;
using testing::CpuDaemonTest;

// Long enough to be the time a client is allowed to notice a dead daemon,
// far below the calls' deadline.
constexpr auto kPrompt = std::chrono::seconds(2);
constexpr absl::Duration kDeadline = absl::Seconds(60);

// LayerNorm of rows x cols float32 in a registered buffer: x at 0, y after
// it. Tens of milliseconds in the CPU reference, so Runs are in flight.
constexpr int64_t kRows = 1024, kCols = 2048;
constexpr int64_t kTensorBytes = kRows * kCols * 4;

RunArgs LargeLayerNorm(const RegisteredBuffer& buffer) {
  RunArgs args;
  args.op = pb::OP_LAYER_NORM;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = kRows;
  args.cols = kCols;
  args.epsilon = 1e-5;
  args.input = buffer.Tensor(0);
  args.output = buffer.Output(kTensorBytes);
  return args;
}

class DaemonFaultsTest : public CpuDaemonTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start());
    absl::StatusOr<SharedMemory> shm = SharedMemory::Create(2 * kTensorBytes);
    ASSERT_TRUE(shm.ok()) << shm.status();
    shm_ = *std::move(shm);
    std::mt19937_64 rng(25);
    const std::string x = testing::RandomTensor(kernels::DType::kFloat32, kRows * kCols, rng, 1);
    std::memcpy(shm_.data(), x.data(), x.size());
  }

  DaemonClient Connect(bool use_queue) const {
    DaemonClientOptions options;
    options.target = target();
    options.deadline = kDeadline;
    options.use_queue = use_queue;
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  SharedMemory shm_;
};

// One caller running the same Run again and again until one fails.
struct Caller {
  std::string name;
  std::thread thread;
  std::atomic<int> ok_runs{0};
  // The Run that failed: when it began and ended, and how.
  Clock::time_point started, ended;
  absl::Status status;
  std::atomic<bool> done{false};
};

void RunUntilFailure(const DaemonClient& client, const pb::RunRequest& request, Caller& caller) {
  while (true) {
    const Clock::time_point started = Clock::now();
    absl::StatusOr<pb::RunResponse> response = client.Run(request);
    if (!response.ok()) {
      caller.started = started;
      caller.ended = Clock::now();
      caller.status = response.status();
      break;
    }
    ++caller.ok_runs;
  }
  caller.done = true;
}

TEST_F(DaemonFaultsTest, AKilledDaemonFailsRunsInFlightAtOnceAndANewOneTakesTheSocketOver) {
  const DaemonClient queued = Connect(/*use_queue=*/true);
  const DaemonClient grpc = Connect(/*use_queue=*/false);
  absl::StatusOr<RegisteredBuffer> buffer = queued.RegisterHostShm(shm_.name(), 0, 0, "faults");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const pb::RunRequest on_buffer = MakeRunRequest(LargeLayerNorm(*buffer));
  // Inline: the same problem with its bytes in the request.
  RunArgs inline_args = LargeLayerNorm(*buffer);
  inline_args.input =
      InlineTensor(std::string(reinterpret_cast<const char*>(shm_.data()), kTensorBytes));
  inline_args.output = InlineOutput();
  const pb::RunRequest inline_request = MakeRunRequest(inline_args);

  // Three callers on each path, all busy when the daemon dies.
  std::vector<std::unique_ptr<Caller>> callers;
  for (int i = 0; i < 9; ++i) {
    auto caller = std::make_unique<Caller>();
    const int path = i % 3;
    caller->name = path == 0 ? "queue" : path == 1 ? "grpc on the buffer" : "grpc inline";
    const DaemonClient& client = path == 0 ? queued : grpc;
    const pb::RunRequest& request = path == 2 ? inline_request : on_buffer;
    Caller& c = *caller;
    c.thread = std::thread([&client, &request, &c] { RunUntilFailure(client, request, c); });
    callers.push_back(std::move(caller));
  }
  // However the test ends, the daemon dies and with it every caller's loop.
  absl::Cleanup join = [&] {
    daemon_->Signal(SIGKILL, std::chrono::seconds(5));
    for (const auto& caller : callers) caller->thread.join();
  };
  const Clock::time_point warm_until = Clock::now() + std::chrono::seconds(20);
  for (const auto& caller : callers) {
    while (caller->ok_runs == 0 && !caller->done && Clock::now() < warm_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GT(caller->ok_runs, 0) << caller->name << ": " << caller->status;
  }
  // The queue callers share their connection's queues (up to one each).
  ASSERT_GE(Client().GetStatus()->open_queues(), 1) << "the queue path is not in use";

  const Clock::time_point killed = Clock::now();
  ASSERT_TRUE(daemon_->Signal(SIGKILL, std::chrono::seconds(5)).has_value());
  // Nobody waits for its deadline: every caller is back within kPrompt.
  for (const auto& caller : callers) {
    while (!caller->done && Clock::now() - killed < kPrompt + std::chrono::seconds(1)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  int in_flight_per_path[3] = {0, 0, 0};
  for (size_t i = 0; i < callers.size(); ++i) {
    Caller& caller = *callers[i];
    if (!caller.done) {
      ADD_FAILURE() << caller.name << ": still waiting "
                    << std::chrono::duration<double>(Clock::now() - killed).count()
                    << " s after the daemon was killed";
      continue;
    }
    EXPECT_LT(caller.ended - killed, kPrompt) << caller.name;
    EXPECT_TRUE(absl::IsUnavailable(caller.status)) << caller.name << ": " << caller.status;
    if (caller.started < killed) ++in_flight_per_path[i % 3];
  }
  for (int path = 0; path < 3; ++path) {
    EXPECT_GT(in_flight_per_path[path], 0)
        << callers[path]->name << ": no Run was in flight when the daemon died";
  }
  std::move(join).Invoke();

  // The dead daemon left its socket file; a new one replaces it, and the
  // same clients are served by it: the gRPC channel reconnects, the queue
  // client opens a new queue. Registrations died with the old daemon.
  ASSERT_NO_FATAL_FAILURE(Start());
  // Each client's channel reconnects on its own schedule (gRPC's backoff,
  // longer on a loaded machine): UNAVAILABLE until then.
  const auto once_reconnected = [](const DaemonClient& client, const pb::RunRequest& request) {
    absl::StatusOr<pb::RunResponse> response = client.Run(request);
    for (const Clock::time_point until = Clock::now() + std::chrono::seconds(20);
         absl::IsUnavailable(response.status()) && Clock::now() < until;
         response = client.Run(request)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return response;
  };
  const absl::StatusOr<pb::RunResponse> again = once_reconnected(grpc, inline_request);
  EXPECT_TRUE(again.ok()) << again.status();
  const absl::StatusOr<pb::RunResponse> stale = once_reconnected(queued, on_buffer);
  EXPECT_TRUE(absl::IsNotFound(stale.status())) << stale.status();
  absl::StatusOr<RegisteredBuffer> renewed = queued.RegisterHostShm(shm_.name(), 0, 0, "again");
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  const absl::StatusOr<pb::RunResponse> through_queue =
      queued.Run(MakeRunRequest(LargeLayerNorm(*renewed)));
  EXPECT_TRUE(through_queue.ok()) << through_queue.status();
  EXPECT_EQ(Client().GetStatus()->open_queues(), 1) << "the new daemon serves no queue";
  buffer->Release();  // its daemon is gone
}

// issue 43: a client kept failing for 20 s after its daemon came back from
// a 30 s outage (gRPC's reconnect backoff, 1 s growing to 120 s), saying
// "nothing answers" while the daemon was up. Now each client is served
// within a second of the new daemon, the queue client through a new queue
// on its first Run, and the errors in between say what the socket shows.
TEST_F(DaemonFaultsTest, ARestartedDaemonIsFoundWithinASecond) {
  const DaemonClient grpc = Connect(/*use_queue=*/false);
  const DaemonClient queued = Connect(/*use_queue=*/true);
  {
    absl::StatusOr<RegisteredBuffer> buffer = queued.RegisterHostShm(shm_.name(), 0, 0, "before");
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    const absl::StatusOr<pb::RunResponse> ran = queued.Run(MakeRunRequest(LargeLayerNorm(*buffer)));
    ASSERT_TRUE(ran.ok()) << ran.status();
    ASSERT_EQ(Client().GetStatus()->open_queues(), 1);
    buffer->Release();  // dies with the daemon
  }
  ASSERT_TRUE(daemon_->Signal(SIGKILL, std::chrono::seconds(5)).has_value());
  // An outage of 5 s, both clients calling all along: the backoff grows
  // (gRPC's default would be 1, 1.6, 2.6 s ... apart by now).
  absl::Status down;
  for (const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
       Clock::now() < until;) {
    for (const DaemonClient* client : {&grpc, &queued}) {
      down = client->GetStatus().status();
      ASSERT_TRUE(absl::IsUnavailable(down)) << down;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The dead daemon's socket file is still there; nothing accepts on it.
  EXPECT_NE(down.message().find("exists but refuses connections: kerntuned exited without "
                                "removing it"),
            absl::string_view::npos)
      << down;

  ASSERT_NO_FATAL_FAILURE(Start());
  const Clock::time_point serving = Clock::now();
  for (const DaemonClient* client : {&grpc, &queued}) {
    absl::StatusOr<pb::GetStatusResponse> status = client->GetStatus();
    int failures = 0;
    for (; !status.ok() && Clock::now() - serving < std::chrono::seconds(10);
         status = client->GetStatus()) {
      ++failures;
      EXPECT_TRUE(absl::IsUnavailable(status.status())) << status.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const double after_s = std::chrono::duration<double>(Clock::now() - serving).count();
    ASSERT_TRUE(status.ok()) << status.status();
    // Within kReconnectMaxMs (plus gRPC's 20% jitter), with slack for CI.
    EXPECT_LT(after_s, 2.0) << failures << " calls failed after the daemon was back";
  }
  // The queue client's first Run goes through a new queue, not into the
  // dead daemon's (where it would wait for a daemon check and fail).
  absl::StatusOr<RegisteredBuffer> renewed = queued.RegisterHostShm(shm_.name(), 0, 0, "after");
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  const absl::StatusOr<pb::RunResponse> ran = queued.Run(MakeRunRequest(LargeLayerNorm(*renewed)));
  EXPECT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(Client().GetStatus()->open_queues(), 1) << "the new daemon serves no queue";
}

// The daemon's resident memory, kB.
int64_t RssKb(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  int64_t kb = -1;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "VmRSS:")) {
      absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(rest), " kB"), &kb);
    }
  }
  return kb;
}

// Seconds of CPU the daemon has used (user + system).
double CpuSeconds(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis; utime and stime are
  // the 14th and 15th of the line, the 12th and 13th after it.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 1; i <= 13 && rest >> field; ++i) {
    if (i >= 12) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A client that sends Runs over gRPC and then never reads a byte: HTTP/2
// by hand on the Unix socket. It reads the server's SETTINGS and
// acknowledges them, as any client does, and from then on reads nothing,
// so the daemon's answers pile up on its side once the flow-control
// windows are full.
class DeafGrpcClient {
 public:
  explicit DeafGrpcClient(const std::string& socket_path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
    EXPECT_EQ(connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    Send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    Send(Frame(kSettings, 0, 0, ""));
    // The server's SETTINGS (not an ACK), acknowledged.
    while (true) {
      char head[9];
      if (!ReadAll(head, sizeof(head))) break;
      const size_t length = (uint8_t(head[0]) << 16) | (uint8_t(head[1]) << 8) | uint8_t(head[2]);
      std::string payload(length, '\0');
      if (!ReadAll(payload.data(), length)) break;
      if (head[3] == kSettings && (head[4] & kAck) == 0) {
        Send(Frame(kSettings, kAck, 0, ""));
        break;
      }
    }
  }
  ~DeafGrpcClient() { close(fd_); }

  // Whether the daemon closed the connection within `timeout` (what it
  // sent is left unread).
  bool WaitHungUp(std::chrono::milliseconds timeout) {
    pollfd hung_up{fd_, POLLRDHUP, 0};
    return poll(&hung_up, 1, static_cast<int>(timeout.count())) == 1 &&
           (hung_up.revents & (POLLRDHUP | POLLHUP)) != 0;
  }

  // One unary Run on the next stream.
  void Run(const pb::RunRequest& request) {
    std::string headers;
    headers += '\x83';                                 // :method POST (static table)
    headers += '\x86';                                 // :scheme http
    Literal(headers, 4, "/kerntune.v1.KernTune/Run");  // :path
    Literal(headers, 1, "localhost");                  // :authority
    headers += '\x0f';                                 // content-type (index 31 = 15 + 16)
    headers += '\x10';
    Value(headers, "application/grpc");
    headers += '\x00';  // te: trailers, a new name
    Value(headers, "te");
    Value(headers, "trailers");
    std::string message = request.SerializeAsString();
    std::string data(5, '\0');
    for (int i = 0; i < 4; ++i) data[1 + i] = static_cast<char>(message.size() >> (24 - 8 * i));
    data += message;
    Send(Frame(kHeaders, kEndHeaders, next_stream_, headers) +
         Frame(kData, kEndStream, next_stream_, data));
    next_stream_ += 2;
  }

 private:
  static constexpr char kData = 0, kHeaders = 1, kSettings = 4;
  static constexpr char kAck = 1, kEndStream = 1, kEndHeaders = 4;

  static std::string Frame(char type, char flags, uint32_t stream, const std::string& payload) {
    std::string frame = {static_cast<char>(payload.size() >> 16),
                         static_cast<char>(payload.size() >> 8),
                         static_cast<char>(payload.size()),
                         type,
                         flags,
                         static_cast<char>(stream >> 24),
                         static_cast<char>(stream >> 16),
                         static_cast<char>(stream >> 8),
                         static_cast<char>(stream)};
    return frame + payload;
  }
  // A literal header without indexing, its name from the static table.
  static void Literal(std::string& out, char name_index, const std::string& value) {
    out += name_index;
    Value(out, value);
  }
  static void Value(std::string& out, const std::string& value) {
    out += static_cast<char>(value.size());  // < 127, no Huffman
    out += value;
  }
  void Send(const std::string& bytes) {
    ASSERT_EQ(write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  bool ReadAll(char* to, size_t length) {
    for (size_t got = 0; got < length;) {
      const ssize_t n = read(fd_, to + got, length - got);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }

  int fd_ = -1;
  uint32_t next_stream_ = 1;
};

TEST_F(DaemonFaultsTest, AGrpcClientThatNeverReadsItsAnswersHurtsNobodyElse) {
  const DaemonClient client = Connect(/*use_queue=*/false);
  absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 0, 0, "deaf");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  // A small request whose answer is the 8 MiB output, inline.
  RunArgs args = LargeLayerNorm(*buffer);
  args.output = InlineOutput();
  const pb::RunRequest large_answer = MakeRunRequest(args);
  const int64_t rss_before = RssKb(daemon_->pid());

  DeafGrpcClient deaf(socket_);
  constexpr int kCalls = 64;
  for (int i = 0; i < kCalls; ++i) deaf.Run(large_answer);
  // Once the daemon has computed them (on the CPU backend every caller
  // shares the cores, which on a loaded 2-core CI machine took over 10 s),
  // their answers wait unread; meanwhile everybody else is served, on time.
  const Clock::time_point computing = Clock::now();
  for (;;) {
    const absl::StatusOr<pb::GetStatusResponse> status = client.GetStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    if (status->stats().kernels_timed() >= kCalls) break;
    ASSERT_LT(Clock::now() - computing, std::chrono::seconds(120))
        << "the deaf client's Runs were not computed: " << status->stats().kernels_timed();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const pb::RunRequest on_buffer = MakeRunRequest(LargeLayerNorm(*buffer));
  const DaemonClient hasty = client.WithDeadline(absl::Seconds(10));
  for (int i = 0; i < 20; ++i) {
    const absl::StatusOr<pb::RunResponse> served = hasty.Run(on_buffer);
    ASSERT_TRUE(served.ok()) << served.status();
  }
  const absl::StatusOr<pb::GetStatusResponse> status = hasty.GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  RecordProperty("rss_kb_before", static_cast<int>(rss_before));
  RecordProperty("rss_kb_with_unread_answers", static_cast<int>(RssKb(daemon_->pid())));

  // The daemon ends the connection that answers no ping (server.cc:
  // keepalive after 5 s of silence, 10 s to answer), which ends its calls
  // and frees what they held.
  const Clock::time_point silent = Clock::now();
  EXPECT_TRUE(deaf.WaitHungUp(std::chrono::seconds(30)));
  const double hung_up_s = std::chrono::duration<double>(Clock::now() - silent).count();
  RecordProperty("hung_up_after_ms", static_cast<int>(hung_up_s * 1000));
  EXPECT_TRUE(daemon_->running());
  EXPECT_TRUE(hasty.Run(on_buffer).ok());
}

namespace layout = ::kt::proto::queue;

// A queue filled by hand (proto/run_queue_layout.h) by a client that then
// never consumes a completion.
class DeafQueue {
 public:
  static constexpr uint32_t kEntries = 8;

  explicit DeafQueue(const std::string& target)
      : stub_(pb::KernTune::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))) {
    grpc::ClientContext context;
    pb::OpenQueueRequest request;
    request.set_entries(kEntries);
    pb::OpenQueueResponse opened;
    const grpc::Status status = stub_->OpenQueue(&context, request, &opened);
    EXPECT_TRUE(status.ok()) << status.error_message();
    id_ = opened.queue_id();
    const int fd = shm_open(opened.shm_name().c_str(), O_RDWR, 0);
    EXPECT_GE(fd, 0);
    base_ = static_cast<char*>(
        mmap(nullptr, layout::RegionBytes(kEntries), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(base_, MAP_FAILED);
    close(fd);
    shm_unlink(opened.shm_name().c_str());
  }
  ~DeafQueue() {
    grpc::ClientContext context;
    pb::CloseQueueRequest request;
    request.set_queue_id(id_);
    pb::CloseQueueResponse closed;
    stub_->CloseQueue(&context, request, &closed);
    munmap(base_, layout::RegionBytes(kEntries));
  }

  layout::RegionHeader& header() { return *reinterpret_cast<layout::RegionHeader*>(base_); }
  uint32_t Load(const uint32_t& word) { return __atomic_load_n(&word, __ATOMIC_ACQUIRE); }

  // Publishes `count` copies of `request`.
  void Submit(const pb::RunRequest& request, uint32_t count) {
    const std::string bytes = request.SerializeAsString();
    for (uint32_t i = 0; i < count; ++i) {
      char* slot = base_ + layout::SubmissionOffset() +
                   size_t{(sq_tail_ + i) & (kEntries - 1)} * layout::kSubmissionSlotBytes;
      const layout::SubmissionHeader head{++tag_, static_cast<uint32_t>(bytes.size()), 0};
      std::memcpy(slot, &head, sizeof(head));
      std::memcpy(slot + sizeof(head), bytes.data(), bytes.size());
    }
    sq_tail_ += count;
    __atomic_store_n(&header().sq_tail, sq_tail_, __ATOMIC_SEQ_CST);
    Ring();
  }
  // Reads every completion at last.
  void ConsumeAll() {
    __atomic_store_n(&header().cq_head, Load(header().cq_tail), __ATOMIC_SEQ_CST);
    Ring();
  }
  // Waits up to 10 s for `count` completions in all.
  bool WaitCompleted(uint32_t count) {
    for (const absl::Time until = absl::Now() + absl::Seconds(10);
         Load(header().cq_tail) < count && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    return Load(header().cq_tail) >= count;
  }

 private:
  void Ring() {
    if (__atomic_load_n(&header().need_wakeup, __ATOMIC_SEQ_CST) == 0) return;
    __atomic_fetch_add(&header().doorbell, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &header().doorbell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }

  std::unique_ptr<pb::KernTune::Stub> stub_;
  std::string id_;
  char* base_ = nullptr;
  uint32_t sq_tail_ = 0;
  uint64_t tag_ = 0;
};

TEST_F(DaemonFaultsTest, AQueueClientThatNeverReadsItsCompletionsHurtsNobodyElse) {
  const DaemonClient queued = Connect(/*use_queue=*/true);
  absl::StatusOr<RegisteredBuffer> buffer = queued.RegisterHostShm(shm_.name(), 0, 0, "deaf");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  RunArgs small;
  small.op = pb::OP_SOFTMAX;
  small.dtype = pb::DTYPE_FLOAT32;
  small.rows = 1;
  small.cols = 64;
  small.input = buffer->Tensor(0);
  small.output = buffer->Output(kTensorBytes);
  const pb::RunRequest request = MakeRunRequest(small);

  DeafQueue deaf(target());
  // Its ring of completions fills and is never read; what it submits after
  // that waits, untaken.
  deaf.Submit(request, DeafQueue::kEntries);
  ASSERT_TRUE(deaf.WaitCompleted(DeafQueue::kEntries));
  deaf.Submit(request, DeafQueue::kEntries);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(deaf.Load(deaf.header().cq_tail), DeafQueue::kEntries);
  EXPECT_EQ(deaf.Load(deaf.header().closed), 0u) << "a slow reader is not a broken client";

  // It costs the daemon nothing while it waits (the poller sleeps)...
  const double cpu_before = CpuSeconds(daemon_->pid());
  absl::SleepFor(absl::Seconds(1));
  const double idle_cpu = CpuSeconds(daemon_->pid()) - cpu_before;
  EXPECT_LT(idle_cpu, 0.2) << "the daemon spins on the queue nobody reads";
  RecordProperty("daemon_cpu_ms_in_1s_beside_it", static_cast<int>(idle_cpu * 1000));
  // ... and the others are served, through their queue and over gRPC.
  const DaemonClient hasty = queued.WithDeadline(absl::Seconds(10));
  const DaemonClient grpc = Connect(/*use_queue=*/false).WithDeadline(absl::Seconds(10));
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(hasty.Run(request).ok());
    ASSERT_TRUE(grpc.Run(request).ok());
  }
  EXPECT_EQ(Client().GetStatus()->open_queues(), 2);

  // Reading at last, it gets the rest.
  deaf.ConsumeAll();
  EXPECT_TRUE(deaf.WaitCompleted(2 * DeafQueue::kEntries));
}

}  // namespace
}  // namespace kt::client
