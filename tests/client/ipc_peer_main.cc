// kt_ipc_peer: one GPU client process of the multi-process CUDA IPC test
// (ipc_gpu_test.cc). Exec'd by the test, never forked from it: CUDA and gRPC
// are not fork-safe once used. Talks to the test over stdin/stdout:
//   -> "id <buffer id>"        its registered cudaMalloc allocation
//   <- "foreign <buffer id>"   another peer's; using or unregistering it
//                              must be NOT_FOUND
//   -> "done <failures>"       after every op x dtype x shape x mode ran and
//                              was checked against the fp64 reference, on
//                              each of its devices
//   <- end of input            then it unregisters, frees and exits
// Exit 0 only when nothing failed. Failures are described on stderr.
//
//   kt_ipc_peer TARGET SEED [DEVICES]
//
// DEVICES: this process's CUDA ordinals to work on, comma-separated (default
// 0); each gets its own allocations, events, stream and registration (the
// first one's id is the one reported), with the daemon's ordinal found by
// UUID, and every Run must say it ran on that GPU.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/cuda_ipc.h"
#include "client/daemon_client.h"
#include "kernels/host_dtype.h"
#include "kernels/verify.h"
#include "proto/convert.h"

namespace {

namespace pb = ::kerntune::v1;
using kt::client::CudaStatus;
using kt::client::DaemonClient;
using kt::client::IpcAllocation;
using kt::client::IpcEvent;
using kt::client::RegisteredBuffer;
using kt::client::RunArgs;

// Where the tensors sit in the peer's one allocation.
constexpr int64_t kX = 0, kY = 1 << 20, kGamma = 2 << 20, kBeta = (2 << 20) + (64 << 10),
                  kMean = 3 << 20, kInvStd = (3 << 20) + (64 << 10),
                  kMask = (3 << 20) + (128 << 10), kRowScale = (3 << 20) + (512 << 10),
                  kBytes = 4 << 20;
// Device memory the client's stream clears before it writes the inputs in
// event mode: a daemon that does not wait on wait_event would read the
// poisoned inputs while this runs.
constexpr size_t kDelayBytes = size_t{512} << 20;
constexpr int kDelayFills = 8;
constexpr uint8_t kPoison = 0xff;  // NaN in every dtype

enum class Mode { kRegistered, kRegisteredEvents, kOneOff, kOneOffEvents };

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kRegistered:
      return "registered";
    case Mode::kRegisteredEvents:
      return "registered+events";
    case Mode::kOneOff:
      return "one-off ipc";
    case Mode::kOneOffEvents:
      return "one-off ipc+events";
  }
  return "?";
}

bool Within(double got, double want, const kt::kernels::Tolerance& t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= t.atol + t.rtol * std::fabs(want);
}

// What the peer holds on one of its GPUs. Member order matters on the way
// out: the registration ends before its memory is freed.
struct OnDevice {
  OnDevice() = default;
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;
  ~OnDevice() {
    if (stream != nullptr || delay != nullptr) cudaSetDevice(device);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (delay != nullptr) cudaFree(delay);
  }

  int device = 0;         // this process's CUDA ordinal
  int daemon_device = 0;  // the daemon's ordinal of the same GPU (by UUID)
  std::string uuid;       // empty when the runtime does not say
  cudaStream_t stream = nullptr;
  void* delay = nullptr;
  IpcEvent wait, done;
  IpcAllocation one_off;
  IpcAllocation memory;     // declared before buffer: unregistered first, then freed
  RegisteredBuffer buffer;
};

class Peer {
 public:
  Peer(DaemonClient client, uint64_t seed) : client_(std::move(client)), seed_(seed) {}
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  int failures() const { return failures_; }

  void Fail(const std::string& what) {
    ++failures_;
    std::fprintf(stderr, "kt_ipc_peer %llu: FAIL %s\n", static_cast<unsigned long long>(seed_),
                 what.c_str());
  }

  // Allocates and registers on every one of `devices`; false when that
  // failed (nothing else can run).
  bool Setup(const std::vector<int>& devices) {
    for (int device : devices) {
      on_.push_back(std::make_unique<OnDevice>());
      if (!SetupDevice(device, *on_.back())) return false;
    }
    return !on_.empty();
  }

  const std::string& id() const { return on_.front()->buffer.id(); }

 private:
  bool SetupDevice(int device, OnDevice& d) {
    d.device = device;
    absl::StatusOr<std::string> uuid = kt::client::CudaDeviceUuid(device);
    if (uuid.ok()) d.uuid = *uuid;
    // The daemon numbers GPUs by its own CUDA_VISIBLE_DEVICES: match UUIDs.
    absl::StatusOr<int32_t> daemon_device = client_.DeviceOrdinalFor(d.uuid, device);
    if (!daemon_device.ok()) {
      Fail(daemon_device.status().ToString());
      return false;
    }
    d.daemon_device = *daemon_device;
    absl::Status s = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
    if (s.ok()) s = CudaStatus(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking),
                               "cudaStreamCreate");
    if (s.ok()) s = CudaStatus(cudaMalloc(&d.delay, kDelayBytes), "cudaMalloc(delay)");
    absl::StatusOr<IpcAllocation> memory = IpcAllocation::Allocate(device, kBytes);
    absl::StatusOr<IpcAllocation> one_off = IpcAllocation::Allocate(device, kBytes);
    absl::StatusOr<IpcEvent> wait = IpcEvent::Create(device);
    absl::StatusOr<IpcEvent> done = IpcEvent::Create(device);
    for (const absl::Status& status :
         {s, memory.status(), one_off.status(), wait.status(), done.status()}) {
      if (!status.ok()) {
        Fail(absl::StrCat("device ", device, ": ", status.ToString()));
        return false;
      }
    }
    d.memory = *std::move(memory);
    d.one_off = *std::move(one_off);
    d.wait = *std::move(wait);
    d.done = *std::move(done);
    absl::StatusOr<RegisteredBuffer> buffer =
        client_.RegisterCudaIpc(d.memory.handle(), d.daemon_device, 0, 0, "kt_ipc_peer");
    if (!buffer.ok()) {
      Fail(absl::StrCat("device ", device, ": ", buffer.status().ToString()));
      return false;
    }
    d.buffer = *std::move(buffer);
    if (d.buffer.info().kind() != pb::BUFFER_KIND_CUDA_IPC ||
        d.buffer.size_bytes() != kBytes || d.buffer.info().device_ordinal() != d.daemon_device) {
      Fail(absl::StrCat("device ", device, ": registered as ",
                        d.buffer.info().ShortDebugString()));
    }
    return true;
  }

 public:

  void TryForeign(const std::string& foreign) {
    RunArgs args;
    args.op = pb::OP_SOFTMAX;
    args.dtype = pb::DTYPE_FLOAT32;
    args.rows = 1;
    args.cols = 4;
    args.input = kt::client::BufferTensor(foreign, 0);
    args.output = on_.front()->buffer.Output(kY);
    const absl::Status run = client_.Run(args).status();
    if (!absl::IsNotFound(run)) Fail(absl::StrCat("Run on another's buffer: ", run.ToString()));
    const absl::Status unregister = client_.Unregister(foreign);
    if (!absl::IsNotFound(unregister)) {
      Fail(absl::StrCat("Unregister of another's buffer: ", unregister.ToString()));
    }
  }

  // Every op x dtype x shape x mode on each device in turn, so that a
  // peer with several GPUs switches between them Run by Run.
  void RunAll() {
    const kt::kernels::Shape shapes[] = {{64, 1000}, {5, 4097}};
    uint64_t seed = seed_ * 1000;
    for (kt::kernels::Op op : kt::kernels::kBasicOps) {
      for (kt::kernels::DType dtype : kt::kernels::kAllDTypes) {
        for (const kt::kernels::Shape& shape : shapes) {
          for (Mode mode : {Mode::kRegistered, Mode::kRegisteredEvents, Mode::kOneOff,
                            Mode::kOneOffEvents}) {
            for (const std::unique_ptr<OnDevice>& d : on_) {
              RunOne(*d, op, dtype, shape, mode, ++seed);
            }
          }
        }
      }
    }
  }

 private:
  void RunOne(OnDevice& d, kt::kernels::Op op, kt::kernels::DType dtype,
              kt::kernels::Shape shape, Mode mode, uint64_t seed) {
    const std::string what =
        absl::StrFormat("device %d: %s %s %dx%d %s", d.device, kt::kernels::OpName(op),
                        kt::kernels::DTypeName(dtype), shape.rows, shape.cols, ModeName(mode));
    // The masked softmax: an additive mask, and causal on the odd shape.
    kt::kernels::AttentionOptions attention;
    attention.causal = shape.rows % 2 == 1;
    absl::StatusOr<kt::kernels::HostProblem> p = kt::kernels::MakeProblem(
        op, dtype, shape, seed, kt::kernels::InputPattern::kNormal,
        /*with_affine=*/kt::kernels::TakesOperand(op, kt::kernels::Operand::kGamma),
        /*threads=*/0, /*distinct_rows=*/0,
        attention);
    if (!p.ok()) return Fail(absl::StrCat(what, ": ", p.status().ToString()));
    const bool events = mode == Mode::kRegisteredEvents || mode == Mode::kOneOffEvents;
    const bool one_off = mode == Mode::kOneOff || mode == Mode::kOneOffEvents;

    // The registered allocation, or another one sent by handle with each Run.
    const IpcAllocation& memory = one_off ? d.one_off : d.memory;
    // Every input and output poisoned and complete on the device first.
    absl::Status s = memory.Fill(0, kPoison, kBytes);
    if (s.ok() && !events) s = WriteInputsNow(memory, *p);
    if (s.ok() && events) s = WriteInputsOnStream(d, memory, *p);  // then records d.wait
    if (!s.ok()) return Fail(absl::StrCat(what, ": ", s.ToString()));

    RunArgs args;
    args.op = kt::proto::OpToProto(op);
    args.dtype = kt::proto::DTypeToProto(dtype);
    args.rows = shape.rows;
    args.cols = shape.cols;
    args.epsilon = p->params.epsilon;
    auto in = [&](int64_t offset) {
      return one_off ? kt::client::IpcTensor(memory.handle(), d.daemon_device, offset)
                     : d.buffer.Tensor(offset);
    };
    auto out = [&](int64_t offset) {
      return one_off ? kt::client::IpcOutput(memory.handle(), d.daemon_device, offset)
                     : d.buffer.Output(offset);
    };
    args.input = in(kX);
    args.output = out(kY);
    if (!p->gamma.empty()) args.gamma = in(kGamma);
    if (!p->beta.empty()) args.beta = in(kBeta);
    if (!p->mean_ref.empty()) args.mean = out(kMean);
    if (!p->inv_std_ref.empty()) args.inv_std = out(kInvStd);  // LayerNorm; RMSNorm's 1/rms
    if (!p->row_scale_ref.empty()) args.row_scale = out(kRowScale);
    if (op == kt::kernels::Op::kScaledMaskedSoftmax) {
      args.scale = p->params.scale;
      args.mask_rows = p->params.mask_rows;
      args.causal = p->params.causal;
      if (!p->mask.empty()) args.mask = in(kMask);
    }
    if (events) {
      args.wait_event = d.wait.handle();
      args.done_event = d.done.handle();
    }
    // Half the ops and dtypes ask for the kernel's time: both lane paths
    // (timing pair, or the untimed early answer's marker) get exercised.
    args.time_kernel = (static_cast<int>(op) + static_cast<int>(dtype)) % 2 == 0;
    absl::StatusOr<pb::RunResponse> response = client_.Run(args);
    // The stream's copies read `p`, which this function owns: let them finish.
    if (events) s = CudaStatus(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    if (!response.ok()) return Fail(absl::StrCat(what, ": ", response.status().ToString()));
    if (!s.ok()) return Fail(absl::StrCat(what, ": ", s.ToString()));
    if (events) {
      // The reply came once the work was queued; d.done is recorded after it.
      s = CudaStatus(cudaEventSynchronize(d.done.event()), "cudaEventSynchronize(done)");
      if (!s.ok()) return Fail(absl::StrCat(what, ": ", s.ToString()));
    }
    CheckResponse(what, d, *response, events, args.time_kernel);
    CheckOutputs(what, memory, *p);
  }

  static absl::Status WriteInputsNow(const IpcAllocation& memory,
                                     const kt::kernels::HostProblem& p) {
    absl::Status s = memory.CopyIn(kX, p.x.data(), p.x.size());
    if (s.ok() && !p.gamma.empty()) s = memory.CopyIn(kGamma, p.gamma.data(), p.gamma.size());
    if (s.ok() && !p.beta.empty()) s = memory.CopyIn(kBeta, p.beta.data(), p.beta.size());
    if (s.ok() && !p.mask.empty()) s = memory.CopyIn(kMask, p.mask.data(), p.mask.size());
    return s;
  }

  // Slow work, then the inputs, then d.wait on d's stream; the host does not
  // wait for any of it.
  static absl::Status WriteInputsOnStream(const OnDevice& d, const IpcAllocation& memory,
                                          const kt::kernels::HostProblem& p) {
    auto* base = static_cast<uint8_t*>(memory.data());
    absl::Status s;
    for (int i = 0; s.ok() && i < kDelayFills; ++i) {
      s = CudaStatus(cudaMemsetAsync(d.delay, i, kDelayBytes, d.stream), "cudaMemsetAsync(delay)");
    }
    const std::pair<int64_t, const std::vector<uint8_t>*> copies[] = {
        {kX, &p.x}, {kGamma, &p.gamma}, {kBeta, &p.beta}, {kMask, &p.mask}};
    for (const auto& [offset, bytes] : copies) {
      if (!s.ok() || bytes->empty()) continue;
      s = CudaStatus(cudaMemcpyAsync(base + offset, bytes->data(), bytes->size(),
                                     cudaMemcpyHostToDevice, d.stream),
                     "cudaMemcpyAsync");
    }
    if (s.ok()) s = CudaStatus(cudaEventRecord(d.wait.event(), d.stream), "cudaEventRecord(wait)");
    return s;
  }

  void CheckResponse(const std::string& what, const OnDevice& d, const pb::RunResponse& r,
                     bool events, bool timed) {
    if (r.backend() != "gpu") Fail(absl::StrCat(what, ": backend ", r.backend()));
    // It ran where the memory is.
    if (r.device_ordinal() != d.daemon_device || (!d.uuid.empty() && r.device_uuid() != d.uuid)) {
      Fail(absl::StrCat(what, ": ran on the daemon's device ", r.device_ordinal(), " (",
                        r.device_uuid(), "), want ", d.daemon_device, " (", d.uuid, ")"));
    }
    if (!r.output_data().empty() || r.mean_size() != 0 || r.inv_std_size() != 0 ||
        r.row_scale_size() != 0) {
      Fail(absl::StrCat(what, ": outputs came back inline as well"));
    }
    const pb::ConfigSource source = r.config().source();
    if (source == pb::CONFIG_SOURCE_UNSPECIFIED || source == pb::CONFIG_SOURCE_CPU_REFERENCE ||
        r.config().config().key().empty()) {
      Fail(absl::StrCat(what, ": config ", r.config().ShortDebugString()));
    }
    // With done_event the daemon does not wait for the kernel, so it has no
    // time; without time_kernel it does not measure one.
    if (timed && !events ? !(r.kernel_time_us() > 0) : r.kernel_time_us() != 0) {
      Fail(absl::StrCat(what, ": kernel_time_us ", r.kernel_time_us()));
    }
  }

  void CheckOutputs(const std::string& what, const IpcAllocation& memory,
                    const kt::kernels::HostProblem& p) {
    std::vector<uint8_t> y(p.x.size());
    std::vector<float> mean(p.shape.rows), inv_std(p.shape.rows), row_scale(p.shape.rows);
    absl::Status s = memory.CopyOut(kY, y.data(), y.size());
    if (s.ok() && !p.mean_ref.empty()) s = memory.CopyOut(kMean, mean.data(), mean.size() * 4);
    if (s.ok() && !p.inv_std_ref.empty()) {
      s = memory.CopyOut(kInvStd, inv_std.data(), inv_std.size() * 4);
    }
    if (s.ok() && !p.row_scale_ref.empty()) {
      s = memory.CopyOut(kRowScale, row_scale.data(), row_scale.size() * 4);
    }
    if (!s.ok()) return Fail(absl::StrCat(what, ": ", s.ToString()));
    const kt::kernels::Tolerance tolerance = kt::kernels::OutputTolerance(p.op, p.dtype);
    int64_t bad = 0;
    std::string first;
    for (int64_t i = 0; i < p.shape.elements(); ++i) {
      const double got = kt::kernels::LoadAsDouble(p.dtype, y.data(), i);
      if (Within(got, p.y_ref[i], tolerance)) continue;
      if (bad++ == 0) {
        first = absl::StrFormat("y[%d, %d] = %g, want %g", i / p.shape.cols, i % p.shape.cols,
                                got, p.y_ref[i]);
      }
    }
    // Each per-row output the op has, against its reference.
    for (const auto& [name, got, want] :
         {std::tuple<const char*, const std::vector<float>*, const std::vector<float>*>{
              "mean", &mean, &p.mean_ref},
          {"inv_std", &inv_std, &p.inv_std_ref},
          {"row_scale", &row_scale, &p.row_scale_ref}}) {
      for (size_t r = 0; r < want->size(); ++r) {
        if (Within((*got)[r], (*want)[r], kt::kernels::StatsTolerance())) continue;
        if (bad++ == 0) {
          first = absl::StrFormat("%s[%d] = %g, want %g", name, r, (*got)[r], (*want)[r]);
        }
      }
    }
    if (bad > 0) Fail(absl::StrCat(what, ": ", bad, " values outside the tolerance; first ", first));
  }

  DaemonClient client_;
  const uint64_t seed_;
  int failures_ = 0;
  std::vector<std::unique_ptr<OnDevice>> on_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: kt_ipc_peer TARGET SEED [DEVICES]\n");
    return 2;
  }
  std::vector<int> devices;
  for (absl::string_view item : absl::StrSplit(argc == 4 ? argv[3] : "0", ',')) {
    int device = 0;
    if (!absl::SimpleAtoi(item, &device) || device < 0) {
      std::fprintf(stderr, "kt_ipc_peer: DEVICES=%s must be CUDA ordinals such as 0,1\n",
                   argv[3]);
      return 2;
    }
    devices.push_back(device);
  }
  kt::client::DaemonClientOptions options;
  options.target = argv[1];
  options.deadline = absl::Seconds(60);
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "kt_ipc_peer: %s\n", client.status().ToString().c_str());
    return 1;
  }
  Peer peer(*client, std::strtoull(argv[2], nullptr, 10));
  if (!peer.Setup(devices)) {
    std::printf("id none\n");
    std::fflush(stdout);
    return 1;
  }
  std::printf("id %s\n", peer.id().c_str());
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line) || line.rfind("foreign ", 0) != 0) {
    peer.Fail(absl::StrCat("expected \"foreign <id>\", got \"", line, "\""));
  } else {
    peer.TryForeign(line.substr(8));
  }
  peer.RunAll();
  std::printf("done %d\n", peer.failures());
  std::fflush(stdout);
  while (std::getline(std::cin, line)) {
  }
  return peer.failures() == 0 ? 0 : 1;
}
