// A kt_soak client process (soak_client.h).
#include "tests/soak/soak_client.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cuda_ipc.h"
#include "client/daemon_client.h"
#include "client/run_cli.h"
#include "client/shared_memory.h"
#include "kernels/op_args.h"
#include "kernels/verify.h"
#include "proto/convert.h"
#include "tests/server/malformed_requests.h"
#include "tests/soak/soak_counts.h"

namespace kt::soak {
namespace {

namespace pb = ::kerntune::v1;
using client::DaemonClient;
using client::RunArgs;
using kernels::Operand;

// Each registration's size. Problems are small (at most kMaxElements per
// tensor), so every operand of one fits, 256-byte aligned: the soak is
// about many requests of every kind, not bandwidth.
constexpr int64_t kBufferBytes = 1 << 20;
constexpr int64_t kMaxElements = 16 << 10;
constexpr int kMaxBuffers = 3;
// Shared-memory registrations this process leaves behind on purpose (the
// daemon ends them when it exits or is killed).
constexpr int kMaxReleased = 4;
constexpr absl::Duration kReportEvery = absl::Milliseconds(200);
constexpr int kMaxProblemLines = 5;
// All-ones bits are NaN in every dtype: an output never written fails.
constexpr uint8_t kPoison = 0xff;

std::atomic<bool> g_stop{false};
void OnSigterm(int) { g_stop.store(true); }

// One registration and its memory. The registration is declared last, so
// it ends before the memory goes.
struct Buffer {
  std::unique_ptr<client::BufferBytes> memory;
  bool device = false;
  client::RegisteredBuffer registration;
};

// How a Run names a slice of client memory: by registration, or by a
// one-off CUDA IPC handle.
struct Slices {
  std::string buffer_id;
  std::string ipc_handle;
  int32_t ipc_ordinal = 0;

  static Slices Registered(std::string id) { return {std::move(id), "", 0}; }
  static Slices OneOff(std::string handle, int32_t ordinal) {
    return {"", std::move(handle), ordinal};
  }
  pb::TensorRef Tensor(int64_t offset) const {
    return ipc_handle.empty() ? client::BufferTensor(buffer_id, offset)
                              : client::IpcTensor(ipc_handle, ipc_ordinal, offset);
  }
  pb::OutputRef Output(int64_t offset) const {
    return ipc_handle.empty() ? client::BufferOutput(buffer_id, offset)
                              : client::IpcOutput(ipc_handle, ipc_ordinal, offset);
  }
};

class Client {
 public:
  Client(const ClientOptions& options, DaemonClient queued, DaemonClient grpc)
      : options_(options),
        rng_(options.seed),
        queued_(std::move(queued)),
        grpc_(std::move(grpc)),
        malformed_table_(server::testing::MalformedRunRequests()) {}

  // --cuda: the one-off IPC allocation and the daemon's ordinal of our GPU.
  absl::Status StartCuda() {
    if (options_.cuda_device >= client::VisibleCudaDevices()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--cuda: no CUDA device ", options_.cuda_device, " in this process"));
    }
    absl::StatusOr<std::string> uuid = client::CudaDeviceUuid(options_.cuda_device);
    absl::StatusOr<int32_t> ordinal =
        grpc_.DeviceOrdinalFor(uuid.ok() ? *uuid : "", options_.cuda_device);
    if (!ordinal.ok()) return ordinal.status();
    daemon_ordinal_ = *ordinal;
    absl::StatusOr<client::IpcAllocation> one_off =
        client::IpcAllocation::Allocate(options_.cuda_device, kBufferBytes);
    if (!one_off.ok()) return one_off.status();
    one_off_ = std::make_unique<client::IpcBytes>(*std::move(one_off));
    return absl::OkStatus();
  }

  // One random action.
  void Step() {
    const int roll = Uniform(0, 99);
    if (roll < 10) {
      if (static_cast<int>(buffers_.size()) < kMaxBuffers) {
        Register();
      } else {
        Unregister();
      }
    } else if (roll < 15) {
      Unregister();
    } else if (roll < 50) {
      if (buffers_.empty()) {
        Register();
        return;
      }
      Buffer& buffer = buffers_[Uniform(0, static_cast<int>(buffers_.size()) - 1)];
      const bool queue = Coin();
      const Counter path =
          buffer.device ? (queue ? kIpcQueue : kIpcGrpc) : (queue ? kShmQueue : kShmGrpc);
      ValidInMemory(*buffer.memory, Slices::Registered(buffer.registration.id()),
                    queue ? queued_ : grpc_, path);
    } else if (roll < 70) {
      ValidInline();
    } else if (roll < 80 && one_off_ != nullptr) {
      const bool queue = Coin();
      ValidInMemory(*one_off_, Slices::OneOff(one_off_->memory().handle(), daemon_ordinal_),
                    queue ? queued_ : grpc_, queue ? kOneOffQueue : kOneOffGrpc);
    } else if (roll < 83) {
      MalformedRegistration();
    } else {
      MalformedRun();
    }
  }

  void Report(bool force) {
    const absl::Time now = absl::Now();
    if (!force && now < next_report_) return;
    next_report_ = now + kReportEvery;
    Write(counts_.Line());
  }

  // Ends the registrations (the daemon would on exit anyway; a clean client
  // unregisters) and says so.
  void Finish() {
    while (!buffers_.empty()) Unregister();
    Report(/*force=*/true);
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  bool Coin() { return Uniform(0, 1) == 1; }

  void Write(const std::string& text) {
    const std::string line = text + "\n";
    // A driver gone away (EPIPE) is not this process's problem to report.
    [[maybe_unused]] ssize_t written = write(options_.report_fd, line.data(), line.size());
  }

  void Problem(Counter counter, const std::string& what) {
    ++counts_[counter];
    if (problem_lines_++ < kMaxProblemLines) Write(absl::StrCat("problem ", what));
    Report(/*force=*/true);
  }

  // A small random problem of any op, dtype and shape (some of them
  // middle-axis, masked, causal, affine) with its fp64 reference.
  kernels::HostProblem RandomProblem() {
    const kernels::Op op = kernels::kBasicOps[Uniform(0, std::size(kernels::kBasicOps) - 1)];
    const kernels::DType dtype =
        kernels::kAllDTypes[Uniform(0, std::size(kernels::kAllDTypes) - 1)];
    const int64_t cols = Uniform(0, 3) == 0 ? Uniform(1, 8) : Uniform(1, 1024);
    const int64_t inner = kernels::SupportsInnerAxis(op) && Uniform(0, 3) == 0 ? Uniform(2, 4) : 1;
    const int64_t rows =
        Uniform(1, static_cast<int>(std::clamp<int64_t>(kMaxElements / (cols * inner), 1, 64)));
    kernels::AttentionOptions attention;
    attention.with_mask = Coin();
    attention.causal = Coin();
    absl::StatusOr<kernels::HostProblem> problem =
        kernels::MakeProblem(op, dtype, {rows, cols, inner}, rng_(), kernels::InputPattern::kNormal,
                             /*with_affine=*/Coin(), /*threads=*/1, /*distinct_rows=*/0, attention);
    if (!problem.ok()) {
      // A bug of this program, not of the daemon: stop loudly.
      Write(absl::StrCat("problem making a problem: ", problem.status().ToString()));
      _exit(3);
    }
    return *std::move(problem);
  }

  void Check(const kernels::HostProblem& p, const kernels::HostOutputs& got, Counter path,
             absl::string_view via) {
    const kernels::CheckReport check = kernels::CheckHostOutputs(p, got);
    if (check.passed) {
      ++counts_[path];
      return;
    }
    Problem(kWrong,
            absl::StrCat("wrong result ", via, " ", kernels::OpName(p.op), " ",
                         kernels::DTypeName(p.dtype), " ", p.shape.rows, "x", p.shape.cols, "x",
                         p.shape.inner, ": ", check.bad_elements, " bad; ", check.detail));
  }

  void ValidInline() {
    const kernels::HostProblem p = RandomProblem();
    RunArgs args = client::ProblemRunArgs(p);
    for (Operand operand : kernels::kAllOperands) {
      if (const std::vector<uint8_t>* data = client::ProblemInput(p, operand)) {
        client::SetOperandRef(operand,
                              client::InlineTensor(std::string(data->begin(), data->end())),
                              client::InlineOutput(), args);
      }
    }
    args.want_mean_inv_std = p.op == kernels::Op::kLayerNorm;
    args.want_inv_rms = p.op == kernels::Op::kRmsNorm;
    absl::StatusOr<pb::RunResponse> response = grpc_.Run(args);
    if (!response.ok()) {
      return Problem(kValidFailed,
                     absl::StrCat("valid inline Run failed: ", response.status().ToString()));
    }
    kernels::HostOutputs got;
    got.y = response->output_data();
    got.mean.assign(response->mean().begin(), response->mean().end());
    got.inv_std.assign(response->inv_std().begin(), response->inv_std().end());
    got.row_scale.assign(response->row_scale().begin(), response->row_scale().end());
    Check(p, got, kInline, "inline");
  }

  // A problem in `memory`: inputs written, outputs poisoned, the Run sent
  // through `via`, the outputs read back and checked.
  void ValidInMemory(client::BufferBytes& memory, const Slices& slices, const DaemonClient& via,
                     Counter path) {
    const kernels::HostProblem p = RandomProblem();
    const client::OperandLayout layout = client::LayOutOperands(p);
    RunArgs args = client::ProblemRunArgs(p);
    absl::Status written = absl::OkStatus();
    for (Operand operand : kernels::kAllOperands) {
      const int64_t offset = layout.at(operand);
      if (offset < 0) continue;
      const std::vector<uint8_t>* data = client::ProblemInput(p, operand);
      const int64_t size = client::ProblemOperandBytes(p, operand);
      if (written.ok()) {
        written = data != nullptr ? memory.CopyIn(offset, data->data(), size)
                                  : memory.Fill(offset, kPoison, size);
      }
      client::SetOperandRef(operand, slices.Tensor(offset), slices.Output(offset), args);
    }
    if (!written.ok()) {
      return Problem(kValidFailed, absl::StrCat("writing the inputs: ", written.ToString()));
    }
    absl::StatusOr<pb::RunResponse> response = via.Run(args);
    if (!response.ok()) {
      return Problem(kValidFailed, absl::StrCat("valid Run (", kCounterNames[path],
                                                ") failed: ", response.status().ToString()));
    }
    kernels::HostOutputs got;
    absl::Status read = absl::OkStatus();
    for (Operand operand : kernels::kAllOperands) {
      const int64_t offset = layout.at(operand);
      if (offset < 0 || !kernels::IsOutput(operand)) continue;
      const int64_t bytes = client::ProblemOperandBytes(p, operand);
      void* host = nullptr;
      if (operand == Operand::kOutput) {
        got.y.resize(static_cast<size_t>(bytes));
        host = got.y.data();
      } else {
        std::vector<float>& values = operand == Operand::kMean     ? got.mean
                                     : operand == Operand::kInvStd ? got.inv_std
                                                                   : got.row_scale;
        values.resize(static_cast<size_t>(bytes) / sizeof(float));
        host = values.data();
      }
      if (read.ok()) read = memory.CopyOut(offset, host, bytes);
    }
    if (!read.ok())
      return Problem(kValidFailed, absl::StrCat("reading the outputs: ", read.ToString()));
    Check(p, got, path, kCounterNames[path]);
  }

  void Register() {
    Buffer buffer;
    absl::StatusOr<client::RegisteredBuffer> registration;
    if (one_off_ != nullptr && Coin()) {
      absl::StatusOr<client::IpcAllocation> allocation =
          client::IpcAllocation::Allocate(options_.cuda_device, kBufferBytes);
      if (!allocation.ok()) {
        return Problem(kValidFailed, absl::StrCat("cudaMalloc: ", allocation.status().ToString()));
      }
      auto memory = std::make_unique<client::IpcBytes>(*std::move(allocation));
      registration =
          queued_.RegisterCudaIpc(memory->memory().handle(), daemon_ordinal_, 0, 0, "kt_soak");
      buffer.memory = std::move(memory);
      buffer.device = true;
    } else {
      absl::StatusOr<client::SharedMemory> shm = client::SharedMemory::Create(kBufferBytes);
      if (!shm.ok()) {
        return Problem(kValidFailed, absl::StrCat("shm_open: ", shm.status().ToString()));
      }
      auto memory = std::make_unique<client::ShmBytes>(*std::move(shm));
      registration = queued_.RegisterHostShm(memory->memory().name(), 0, 0, "kt_soak");
      buffer.memory = std::move(memory);
    }
    if (!registration.ok()) {
      return Problem(kValidFailed,
                     absl::StrCat("RegisterBuffer: ", registration.status().ToString()));
    }
    buffer.registration = *std::move(registration);
    ++counts_[kRegistered];
    buffers_.push_back(std::move(buffer));
  }

  void Unregister() {
    if (buffers_.empty()) return;
    const size_t index = static_cast<size_t>(Uniform(0, static_cast<int>(buffers_.size()) - 1));
    Buffer buffer = std::move(buffers_[index]);
    buffers_.erase(buffers_.begin() + static_cast<std::ptrdiff_t>(index));
    // Now and then a shared-memory registration is left to the daemon to
    // end (the daemon's mapping outlives this process's).
    if (!buffer.device && released_ < kMaxReleased && Uniform(0, 3) == 0) {
      ++released_;
      buffer.registration.Release();
      return;
    }
    unregistered_id_ = buffer.registration.id();
    if (absl::Status s = buffer.registration.Unregister(); !s.ok()) {
      return Problem(kValidFailed, absl::StrCat("UnregisterBuffer: ", s.ToString()));
    }
    ++counts_[kUnregistered];
  }

  void Expect(absl::StatusCode want, const absl::Status& got, absl::string_view what) {
    if (got.code() == want) {
      ++counts_[kMalformed];
      return;
    }
    Problem(kMalformedWrongCode, absl::StrCat(what, ": got ", got.ToString(), ", want ",
                                              absl::StatusCodeToString(want)));
  }

  void MalformedRegistration() {
    if (Coin()) {
      const std::string name = absl::StrFormat("/kerntune-soak-none-%016x", rng_());
      Expect(absl::StatusCode::kNotFound, queued_.RegisterHostShm(name, 0, 0, "kt_soak").status(),
             "registering a shared-memory object that does not exist");
      return;
    }
    absl::StatusOr<client::SharedMemory> shm = client::SharedMemory::Create(4096);
    if (!shm.ok())
      return Problem(kValidFailed, absl::StrCat("shm_open: ", shm.status().ToString()));
    Expect(absl::StatusCode::kOutOfRange,
           queued_.RegisterHostShm(shm->name(), 8192, 0, "kt_soak").status(),
           "registering more bytes than the object has");
  }

  void MalformedRun() {
    if (buffers_.empty() || Uniform(0, 2) == 0) {
      const server::testing::MalformedCase& c =
          malformed_table_[Uniform(0, static_cast<int>(malformed_table_.size()) - 1)];
      Expect(c.code, grpc_.Run(c.request).status(), absl::StrCat("malformed Run \"", c.name, "\""));
      return;
    }
    // A valid Run on one of our buffers, then broken in one way; through
    // the queue or gRPC alike.
    const Buffer& buffer = buffers_[Uniform(0, static_cast<int>(buffers_.size()) - 1)];
    const kernels::HostProblem p = RandomProblem();
    const int64_t element = kernels::DTypeSize(p.dtype);
    const client::OperandLayout layout = client::LayOutOperands(p);
    RunArgs args = client::ProblemRunArgs(p);
    const Slices slices = Slices::Registered(buffer.registration.id());
    for (Operand operand : kernels::kAllOperands) {
      const int64_t offset = layout.at(operand);
      if (offset >= 0) {
        client::SetOperandRef(operand, slices.Tensor(offset), slices.Output(offset), args);
      }
    }
    absl::StatusCode want = absl::StatusCode::kInvalidArgument;
    std::string what;
    switch (Uniform(0, 4)) {
      case 0:
        args.input = client::BufferTensor(absl::StrFormat("%016x%016x", rng_(), rng_()), 0);
        want = absl::StatusCode::kNotFound;
        what = "an unknown buffer id";
        break;
      case 1:
        if (unregistered_id_.empty()) return;
        args.input = client::BufferTensor(unregistered_id_, 0);
        want = absl::StatusCode::kNotFound;
        what = "a buffer unregistered before";
        break;
      case 2:
        args.input = slices.Tensor(kBufferBytes - element);
        want = p.x.size() > static_cast<size_t>(element) ? absl::StatusCode::kOutOfRange
                                                         : absl::StatusCode::kOk;
        what = "an input past the end of the buffer";
        break;
      case 3:
        args.output = slices.Output(layout.at(Operand::kOutput) + 1);
        what = "a misaligned output";
        break;
      case 4:
        if (p.x.size() == static_cast<size_t>(element)) return;  // nothing to overlap
        args.output = slices.Output(element);
        what = "an output overlapping its input";
        break;
    }
    if (want == absl::StatusCode::kOk) return;  // a one-element input fits at the end
    const bool queue = Coin();
    Expect(want, (queue ? queued_ : grpc_).Run(args).status(),
           absl::StrCat("Run with ", what, queue ? " (queue)" : " (gRPC)"));
  }

  const ClientOptions& options_;
  std::mt19937_64 rng_;
  DaemonClient queued_;
  DaemonClient grpc_;
  const std::vector<server::testing::MalformedCase> malformed_table_;
  std::vector<Buffer> buffers_;
  std::unique_ptr<client::IpcBytes> one_off_;
  int32_t daemon_ordinal_ = 0;
  int released_ = 0;
  std::string unregistered_id_;
  Counts counts_;
  int problem_lines_ = 0;
  absl::Time next_report_ = absl::InfinitePast();
};

absl::StatusOr<DaemonClient> Connect(const std::string& target, bool use_queue) {
  client::DaemonClientOptions options;
  options.target = target;
  options.deadline = absl::Seconds(60);
  options.use_queue = use_queue;
  return DaemonClient::Connect(options);
}

}  // namespace

int RunClient(const ClientOptions& options) {
  struct sigaction action {};
  action.sa_handler = OnSigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  // The driver starts clients with SIGTERM blocked, so that one sent before
  // this point waits for the handler.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_UNBLOCK, &term, nullptr);
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<DaemonClient> queued = Connect(options.target, /*use_queue=*/true);
  absl::StatusOr<DaemonClient> grpc = Connect(options.target, /*use_queue=*/false);
  if (!queued.ok() || !grpc.ok()) {
    std::fprintf(stderr, "kt_soak client: %s\n",
                 (queued.ok() ? grpc.status() : queued.status()).ToString().c_str());
    return 1;
  }
  Client client(options, *std::move(queued), *std::move(grpc));
  if (options.cuda) {
    if (absl::Status s = client.StartCuda(); !s.ok()) {
      std::fprintf(stderr, "kt_soak client: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  client.Report(/*force=*/true);
  while (!g_stop.load()) {
    client.Step();
    client.Report(/*force=*/false);
  }
  client.Finish();
  return 0;
}

}  // namespace kt::soak
