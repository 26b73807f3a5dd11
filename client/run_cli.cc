// `kerntune run` (run_cli.h).
#include "client/run_cli.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli_common.h"
#include "client/cuda_ipc.h"
#include "client/daemon_cli_common.h"
#include "client/daemon_client.h"
#include "client/shared_memory.h"
#include "kernels/device_identity.h"
#include "kernels/host_dtype.h"
#include "kernels/reference.h"
#include "kernels/verify.h"
#include "proto/convert.h"

namespace kt::client {
namespace {

constexpr absl::string_view kRunVerb = "run";
constexpr char kLabel[] = "kerntune run";

using kernels::Operand;

// The reference of one of the problem's per-row outputs; null for the
// others and for one it does not check.
const std::vector<float>* RowReference(const kernels::HostProblem& p, Operand operand) {
  const std::vector<float>* reference = operand == Operand::kMean     ? &p.mean_ref
                                        : operand == Operand::kInvStd ? &p.inv_std_ref
                                        : operand == Operand::kRowScale ? &p.row_scale_ref
                                                                        : nullptr;
  return reference != nullptr && !reference->empty() ? reference : nullptr;
}

// What came back from one Run, wherever it was written.
using Outputs = kernels::HostOutputs;

std::vector<float>& RowValues(Outputs& out, Operand operand) {
  return operand == Operand::kMean ? out.mean : operand == Operand::kInvStd ? out.inv_std
                                                                           : out.row_scale;
}


// `device`: RunArgs::device (inline and shm Runs; empty for IPC ones, which
// run where their memory is).
RunArgs BaseArgs(const kernels::HostProblem& p, const std::string& device) {
  RunArgs args = ProblemRunArgs(p);
  args.device = device;
  args.time_kernel = true;  // the CLI prints the kernel's time
  return args;
}

// One way of moving the tensors: the request is built once and sent every
// iteration; Fetch reads the outputs after a Run.
class Transport {
 public:
  virtual ~Transport() = default;
  const pb::RunRequest& request() const { return request_; }
  // Puts back what a Run writes in place of an input (an add op's
  // residual), so every timed Run computes the problem's own result.
  virtual absl::Status Restore() { return absl::OkStatus(); }
  virtual absl::StatusOr<Outputs> Fetch(const pb::RunResponse& response) const = 0;

 protected:
  pb::RunRequest request_;
};

class InlineTransport final : public Transport {
 public:
  InlineTransport(const kernels::HostProblem& p, const std::string& device) {
    RunArgs args = BaseArgs(p, device);
    for (Operand operand : kernels::kAllOperands) {
      const absl::string_view data = ProblemInputBytes(p, operand);
      if (!data.empty()) {
        SetOperandRef(operand, InlineTensor(std::string(data)), InlineOutput(), args);
      }
    }
    args.output = InlineOutput();
    // The statistics come back inline when asked for; ReduceScale's scales
    // and a dynamic quantization's always do. (A residual never travels
    // inline: ChooseVia picks client memory for it.)
    args.want_mean_inv_std = kernels::IsLayerNormFamily(p.op);
    args.want_inv_rms = kernels::IsRmsNormFamily(p.op);
    request_ = MakeRunRequest(args);
  }

  absl::StatusOr<Outputs> Fetch(const pb::RunResponse& response) const override {
    Outputs out;
    out.y = response.output_data();
    out.mean.assign(response.mean().begin(), response.mean().end());
    out.inv_std.assign(response.inv_std().begin(), response.inv_std().end());
    out.row_scale.assign(response.row_scale().begin(), response.row_scale().end());
    return out;
  }
};

// NaN bit patterns in every dtype: an output the daemon never writes fails
// the check.
constexpr uint8_t kPoison = 0xff;

// Every operand as a slice of one registered buffer: the inputs copied in,
// the outputs poisoned, the Run built over the slices.
class RegisteredTransport final : public Transport {
 public:
  // `bytes` reaches the buffer's memory, registered with the daemon as
  // `registration`; `layout` places every operand in it; `device` as for
  // BaseArgs.
  static absl::StatusOr<std::unique_ptr<RegisteredTransport>> Create(
      const kernels::HostProblem& p, const OperandLayout& layout,
      std::unique_ptr<BufferBytes> bytes, RegisteredBuffer registration,
      const std::string& device) {
    for (Operand operand : kernels::kAllOperands) {
      const int64_t offset = layout.at(operand);
      if (offset < 0) continue;
      const absl::string_view data = ProblemInputBytes(p, operand);
      const int64_t size = ProblemOperandBytes(p, operand);
      const absl::Status s = !data.empty() ? bytes->CopyIn(offset, data.data(), size)
                                           : bytes->Fill(offset, kPoison, size);
      if (!s.ok()) return s;
    }
    RunArgs args = BaseArgs(p, device);
    for (Operand operand : kernels::kAllOperands) {
      const int64_t offset = layout.at(operand);
      if (offset >= 0) {
        SetOperandRef(operand, registration.Tensor(offset), registration.Output(offset), args);
      }
    }
    return std::unique_ptr<RegisteredTransport>(new RegisteredTransport(
        MakeRunRequest(args), p, layout, std::move(bytes), std::move(registration)));
  }

  absl::Status Restore() override {
    const int64_t offset = layout_.at(Operand::kResidual);
    if (offset < 0) return absl::OkStatus();
    return bytes_->CopyIn(offset, residual_.data(), static_cast<int64_t>(residual_.size()));
  }

  absl::StatusOr<Outputs> Fetch(const pb::RunResponse&) const override {
    Outputs out;
    for (Operand operand : kernels::kAllOperands) {
      const int64_t offset = layout_.at(operand);
      if (offset < 0 || !kernels::IsOutput(operand)) continue;
      const int64_t size = sizes_[static_cast<size_t>(operand)];
      void* host = nullptr;
      if (operand == Operand::kOutput || operand == Operand::kResidual) {
        std::string& whole = operand == Operand::kOutput ? out.y : out.residual;
        whole.resize(static_cast<size_t>(size));
        host = whole.data();
      } else {
        std::vector<float>& values = RowValues(out, operand);
        values.resize(static_cast<size_t>(size) / sizeof(float));
        host = values.data();
      }
      if (absl::Status s = bytes_->CopyOut(offset, host, size); !s.ok()) return s;
    }
    return out;
  }

 private:
  RegisteredTransport(pb::RunRequest request, const kernels::HostProblem& p, OperandLayout layout,
                      std::unique_ptr<BufferBytes> bytes, RegisteredBuffer registration)
      : layout_(layout),
        residual_(p.residual),
        bytes_(std::move(bytes)),
        registration_(std::move(registration)) {
    request_ = std::move(request);
    for (Operand operand : kernels::kAllOperands) {
      sizes_[static_cast<size_t>(operand)] = ProblemOperandBytes(p, operand);
    }
  }

  OperandLayout layout_;
  std::vector<uint8_t> residual_;  // as given (empty without one)
  std::array<int64_t, kernels::kOperandCount> sizes_;
  // Declared before the registration: unregistered first, then unmapped or
  // freed.
  std::unique_ptr<BufferBytes> bytes_;
  RegisteredBuffer registration_;
};

// One registered POSIX shared-memory object holding every tensor, run on
// the daemon's `device` (empty: the least-loaded one).
absl::StatusOr<std::unique_ptr<Transport>> ShmTransport(const DaemonClient& client,
                                                        const kernels::HostProblem& p,
                                                        const std::string& device) {
  const OperandLayout layout = LayOutOperands(p);
  absl::StatusOr<SharedMemory> shm = SharedMemory::Create(layout.total);
  if (!shm.ok()) return shm.status();
  absl::StatusOr<RegisteredBuffer> registration;
  {
    // A Ctrl-C while the daemon maps it must not leave it in /dev/shm (a
    // 8192 x 8192 float32 softmax's is 512 MiB) ...
    UnlinkOnSignal unlink_on_signal(*shm);
    registration = client.RegisterHostShm(shm->name(), 0, 0, kLabel);
    // ... nor anything after: mapped by the daemon (or refused), the name
    // has done its job.
    shm->Unlink();
  }
  if (!registration.ok()) return registration.status();
  return RegisteredTransport::Create(p, layout, std::make_unique<ShmBytes>(*std::move(shm)),
                                     *std::move(registration), device);
}

// One registered cudaMalloc allocation on this process's `device` holding
// every tensor; `daemon_device` is the daemon's ordinal of that GPU.
absl::StatusOr<std::unique_ptr<Transport>> IpcTransport(const DaemonClient& client,
                                                        const kernels::HostProblem& p,
                                                        int device, int daemon_device) {
  const OperandLayout layout = LayOutOperands(p);
  absl::StatusOr<IpcAllocation> memory = IpcAllocation::Allocate(device, layout.total);
  if (!memory.ok()) return memory.status();
  auto bytes = std::make_unique<IpcBytes>(*std::move(memory));
  absl::StatusOr<RegisteredBuffer> registration =
      client.RegisterCudaIpc(bytes->memory().handle(), daemon_device, 0, 0, kLabel);
  if (!registration.ok()) return registration.status();
  return RegisteredTransport::Create(p, layout, std::move(bytes), *std::move(registration),
                                     /*device=*/"");
}

struct ViaChoice {
  Via via = Via::kInline;
  std::string why;
  int daemon_device = 0;  // kIpc: the daemon's ordinal of this process's device
};

// The daemon's ordinal of the one device `selector` (an ordinal, a UUID or
// a UUID prefix) names among those its GetStatus lists; InvalidArgument
// naming --daemon_device otherwise.
absl::StatusOr<int> NamedDaemonDevice(const pb::GetStatusResponse& status,
                                      absl::string_view selector) {
  std::vector<kernels::VisibleDevice> served;
  for (const pb::Device& device : status.devices()) {
    served.push_back({device.ordinal(), device.uuid()});
  }
  absl::StatusOr<std::vector<int>> named = kernels::SelectDevices(selector, served);
  if (!named.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--daemon_device=", selector, ": ",
                                                   named.status().message(),
                                                   " (the daemon's devices)"));
  }
  if (named->size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--daemon_device=", selector, " names ",
                                                   named->size(), " devices; name one"));
  }
  return named->front();
}

// The daemon's ordinal of this process's CUDA device `device`: the one
// `asked` names when given, else the daemon's device with the same UUID.
// `why` says which.
absl::StatusOr<int> DaemonDevice(const pb::GetStatusResponse& status, int device,
                                 const std::string& asked, std::string& why) {
  if (!asked.empty()) {
    absl::StatusOr<int> ordinal = NamedDaemonDevice(status, asked);
    if (!ordinal.ok()) return ordinal.status();
    why = absl::StrCat("the daemon's device ", *ordinal, " as asked");
    return *ordinal;
  }
  absl::StatusOr<std::string> uuid = CudaDeviceUuid(device);
  // Without our own UUID, assume both number GPUs alike.
  absl::StatusOr<int32_t> ordinal =
      DaemonOrdinalForUuid(status, uuid.ok() ? *uuid : "", device);
  if (!ordinal.ok()) return ordinal.status();
  why = uuid.ok() ? absl::StrCat(*uuid, " is the daemon's device ", *ordinal)
                  : absl::StrCat("the daemon's device ", *ordinal, " (this GPU's UUID unknown)");
  return *ordinal;
}

// InvalidArgument = a usage error (exit 2). `memory_reason` (ClientMemoryReason)
// non-empty: inline bytes cannot serve the Run; auto picks shared memory
// where it would pick inline.
absl::StatusOr<ViaChoice> ChooseVia(Via requested, const DaemonClient& client, int device,
                                    const std::string& daemon_device,
                                    const std::string& memory_reason) {
  const bool unix_socket = IsUnixTarget(client.target());
  if (!memory_reason.empty() && requested == Via::kInline) {
    return absl::InvalidArgumentError(
        absl::StrCat("--via=inline: ", memory_reason, "; use --via=shm or --via=ipc"));
  }
  if (!memory_reason.empty() && requested == Via::kAuto) {
    absl::StatusOr<ViaChoice> choice = ChooseVia(requested, client, device, daemon_device, "");
    if (!choice.ok() || choice->via != Via::kInline) return choice;
    if (!unix_socket) {
      return absl::InvalidArgumentError(absl::StrCat(
          memory_reason, ": that needs the daemon's Unix socket (--server=unix:PATH)"));
    }
    return ViaChoice{Via::kShm, absl::StrCat(choice->why, "; ", memory_reason, ": shm")};
  }
  switch (requested) {
    case Via::kInline:
      return ViaChoice{Via::kInline, "asked"};
    case Via::kShm:
    case Via::kIpc: {
      if (!unix_socket) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--via=", ViaName(requested), " needs the daemon's Unix socket (--server=unix:PATH): "
            "it knows who owns a buffer only from the socket's peer credentials"));
      }
      if (requested == Via::kShm) return ViaChoice{requested, "asked"};
      if (device >= VisibleCudaDevices()) {
        return absl::FailedPreconditionError(
            absl::StrCat("--via=ipc needs CUDA device ", device, " in this process; ",
                         VisibleCudaDevices(), " visible"));
      }
      absl::StatusOr<pb::GetStatusResponse> status = client.GetStatus();
      if (!status.ok()) return status.status();
      std::string why;
      absl::StatusOr<int> ordinal = DaemonDevice(*status, device, daemon_device, why);
      if (!ordinal.ok()) return ordinal.status();
      return ViaChoice{Via::kIpc, absl::StrCat("asked; ", why), *ordinal};
    }
    case Via::kAuto:
      break;
  }
  if (!unix_socket) return ViaChoice{Via::kInline, "auto: not a Unix socket"};
  if (device >= VisibleCudaDevices()) {
    return ViaChoice{Via::kInline, "auto: no CUDA device in this process"};
  }
  absl::StatusOr<pb::GetStatusResponse> status = client.GetStatus();
  if (!status.ok()) return status.status();
  if (!status->cuda_ipc_supported()) {
    return ViaChoice{Via::kInline,
                     absl::StrCat("auto: the daemon (", status->backend(), ") takes no CUDA IPC")};
  }
  std::string why;
  absl::StatusOr<int> mine = DaemonDevice(*status, device, /*asked=*/"", why);
  if (daemon_device.empty()) {
    if (!mine.ok()) return ViaChoice{Via::kInline, absl::StrCat("auto: ", mine.status().message())};
    return ViaChoice{Via::kIpc,
                     absl::StrCat("auto: a GPU here and the daemon takes CUDA IPC; ", why), *mine};
  }
  // A named device: IPC when it is this process's GPU, else inline to it.
  absl::StatusOr<int> named = NamedDaemonDevice(*status, daemon_device);
  if (!named.ok()) return named.status();
  if (mine.ok() && *mine == *named) {
    return ViaChoice{Via::kIpc, absl::StrCat("auto: a GPU here and the daemon takes CUDA IPC; ",
                                             why, ", as --daemon_device names"),
                     *named};
  }
  return ViaChoice{Via::kInline,
                   absl::StrCat("auto: --daemon_device=", daemon_device, " is the daemon's device ",
                                *named, ", not this process's --device=", device)};
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The problem with its fp64 reference: every operand the op takes, with
// `params` (epsilon, the fused norms' flags) and `attention`.
absl::StatusOr<kernels::HostProblem> MakeCheckedProblem(kernels::Op op, kernels::DType dtype,
                                                        kernels::Shape shape, uint64_t seed,
                                                        const kernels::ProblemOptions& options) {
  return kernels::MakeProblem(op, dtype, shape, seed, kernels::InputPattern::kNormal,
                              /*with_affine=*/kernels::TakesOperand(op, kernels::Operand::kGamma),
                              /*threads=*/0, /*distinct_rows=*/0, options);
}

// Why `op` with `params` needs its tensors in client memory, or "" when
// inline bytes do: a residual is written back in place, and an inline
// output comes back contiguous.
std::string ClientMemoryReason(kernels::Op op, const kernels::OpParams& params,
                               kernels::Shape shape) {
  if (kernels::AddsResidual(op)) {
    return absl::StrCat(kernels::OpName(op), " writes its residual back to client memory");
  }
  if (kernels::HasRowStrides(params, shape)) {
    return "strided rows are laid out in client memory (an inline output comes back contiguous)";
  }
  return "";
}

// The fused norms' parameters as `kerntune run` prints them after the
// point: ", weight_offset 1, fp8_e4m3 per_group 128, rows 128 apart in
// groups of 8 every 3072".
std::string DescribeFusedParams(kernels::Op op, const kernels::HostProblem& p) {
  const kernels::OpParams& params = p.params;
  std::string text;
  if (kernels::IsRmsNormFamily(op) && params.weight_offset != 0) {
    absl::StrAppend(&text, absl::StrFormat(", weight_offset %g", params.weight_offset));
  }
  if (kernels::QuantizesOutput(op)) {
    absl::StrAppend(&text, ", ", kernels::QuantDTypeName(params.quant_dtype), " ",
                    kernels::ScaleModeName(params.scale_mode));
    if (params.scale_mode == kernels::ScaleMode::kPerGroup) {
      absl::StrAppend(&text, " ", params.group_size);
    }
    if (params.scale_mode == kernels::ScaleMode::kStatic && !p.quant_scale.empty()) {
      absl::StrAppend(&text, absl::StrFormat(" scale %g", p.quant_scale[0]));
    }
    if (params.scale_ub > 0) {
      absl::StrAppend(&text, absl::StrFormat(" scale_ub %g", params.scale_ub));
    }
  }
  if (kernels::HasRowStrides(params, p.shape)) {
    const kernels::RowLayout x = kernels::RowLayoutOf(kernels::Operand::kInput, params, p.shape);
    absl::StrAppend(&text, ", rows ", x.stride, " apart");
    if (x.group_rows > 0) {
      absl::StrAppend(&text, " in groups of ", x.group_rows, " every ", x.group_stride);
    }
  }
  return text;
}

std::string DescribeConfig(const pb::ConfigChoice& choice) {
  const absl::string_view source = ConfigSourceName(choice.source());
  if (!choice.has_config()) {
    return choice.source() == pb::CONFIG_SOURCE_CPU_REFERENCE
               ? "fp64 reference on the CPU (source: cpu)"
               : absl::StrCat("none reported (source: ", source, ")");
  }
  std::string text = absl::StrCat(choice.config().key(), " (source: ", source);
  if (choice.has_tuned_shape()) {
    const pb::Shape& tuned = choice.tuned_shape();
    absl::StrAppend(&text, "; tuned at ", tuned.rows(), "x", tuned.cols(),
                    tuned.inner() > 1 ? absl::StrCat("x", tuned.inner()) : std::string(),
                    absl::StrFormat(", %.2f us", choice.tuned_median_us()),
                    choice.tuned_origin() == pb::CONFIG_SOURCE_SHIPPED ? ", shipped file" : "");
  }
  return text + ")";
}

// The daemon's device that ran the Run: "1 (GPU-...)", or what ran it.
std::string DescribeDevice(const pb::RunResponse& response) {
  if (response.device_ordinal() < 0) return absl::StrCat("none (", response.backend(), " backend)");
  return absl::StrCat(response.device_ordinal(),
                      response.device_uuid().empty()
                          ? std::string()
                          : absl::StrCat(" (", response.device_uuid(), ")"));
}

// ResourceExhausted, with the way around it, when one tensor of the problem
// is over the daemon's limit for inline tensors (GetStatus; a daemon that
// does not report one, or serves no GetStatus, is not checked here).
absl::Status CheckInlineLimit(const DaemonClient& client, kernels::Op op, kernels::DType dtype,
                              const kernels::Shape& shape) {
  absl::StatusOr<pb::GetStatusResponse> status = client.GetStatus();
  if (absl::IsUnimplemented(status.status())) return absl::OkStatus();  // it will say
  if (!status.ok()) return status.status();
  const int64_t limit = status->max_request_bytes();
  int64_t bytes = kernels::DTypeSize(dtype);
  bool over = false;
  for (const int64_t extent : {shape.rows, shape.cols, shape.inner}) {
    over = over || __builtin_mul_overflow(bytes, extent, &bytes);
  }
  if (limit <= 0 || (!over && bytes <= limit)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      db::DescribePoint(kernels::OpName(op), kernels::DTypeName(dtype), shape.rows, shape.cols,
                        shape.inner),
      " is ", over ? "more than 2^63" : absl::StrCat(bytes),
      " bytes per tensor, over the daemon's limit of ", limit,
      absl::StrFormat(" bytes (%.4g MiB)", static_cast<double>(limit) / (1 << 20)),
      " for inline tensors (kerntuned --max_request_bytes)",
      IsUnixTarget(client.target())
          ? "; --via=shm sends it through shared memory, which has no such limit"
          : "; over TCP only inline tensors travel: use the daemon's Unix socket and --via=shm"));
}

}  // namespace

ShmBytes::ShmBytes(SharedMemory memory) : memory_(std::move(memory)) {}
absl::Status ShmBytes::CopyIn(int64_t offset, const void* data, int64_t bytes) {
  std::memcpy(memory_.data() + offset, data, static_cast<size_t>(bytes));
  return absl::OkStatus();
}
absl::Status ShmBytes::Fill(int64_t offset, uint8_t value, int64_t bytes) {
  std::memset(memory_.data() + offset, value, static_cast<size_t>(bytes));
  return absl::OkStatus();
}
absl::Status ShmBytes::CopyOut(int64_t offset, void* data, int64_t bytes) const {
  std::memcpy(data, memory_.data() + offset, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

IpcBytes::IpcBytes(IpcAllocation memory) : memory_(std::move(memory)) {}
absl::Status IpcBytes::CopyIn(int64_t offset, const void* data, int64_t bytes) {
  return memory_.CopyIn(offset, data, static_cast<size_t>(bytes));
}
absl::Status IpcBytes::Fill(int64_t offset, uint8_t value, int64_t bytes) {
  return memory_.Fill(offset, value, static_cast<size_t>(bytes));
}
absl::Status IpcBytes::CopyOut(int64_t offset, void* data, int64_t bytes) const {
  return memory_.CopyOut(offset, data, static_cast<size_t>(bytes));
}

const std::vector<uint8_t>* ProblemInput(const kernels::HostProblem& p, Operand operand) {
  switch (operand) {
    case Operand::kInput:
      return &p.x;
    case Operand::kGamma:
      return p.gamma.empty() ? nullptr : &p.gamma;
    case Operand::kBeta:
      return p.beta.empty() ? nullptr : &p.beta;
    case Operand::kMask:
      return p.mask.empty() ? nullptr : &p.mask;
    case Operand::kResidual:
      return p.residual.empty() ? nullptr : &p.residual;
    default:
      return nullptr;
  }
}

absl::string_view ProblemInputBytes(const kernels::HostProblem& p, Operand operand) {
  if (operand == Operand::kQuantScale) {
    return absl::string_view(reinterpret_cast<const char*>(p.quant_scale.data()),
                             p.quant_scale.size() * sizeof(float));
  }
  const std::vector<uint8_t>* data = ProblemInput(p, operand);
  return data == nullptr
             ? absl::string_view()
             : absl::string_view(reinterpret_cast<const char*>(data->data()), data->size());
}

int64_t ProblemOperandBytes(const kernels::HostProblem& p, Operand operand) {
  const absl::string_view data = ProblemInputBytes(p, operand);
  if (!data.empty()) return static_cast<int64_t>(data.size());
  if (operand == Operand::kOutput) {
    // The output's extent: its layout's gaps, one byte per code.
    return kernels::OperandBytes(p.op, operand, p.dtype, p.shape, p.params);
  }
  const std::vector<float>* reference = RowReference(p, operand);
  return reference != nullptr ? static_cast<int64_t>(reference->size() * sizeof(float)) : 0;
}

OperandLayout LayOutOperands(const kernels::HostProblem& p) {
  OperandLayout layout;
  for (Operand operand : kernels::kAllOperands) {
    const int64_t bytes = ProblemOperandBytes(p, operand);
    layout.offset[static_cast<size_t>(operand)] = bytes > 0 ? layout.total : -1;
    if (bytes > 0) layout.total += (bytes + 255) / 256 * 256;
  }
  return layout;
}

RunArgs ProblemRunArgs(const kernels::HostProblem& p) {
  RunArgs args;
  args.op = proto::OpToProto(p.op);
  args.dtype = proto::DTypeToProto(p.dtype);
  args.rows = p.shape.rows;
  args.cols = p.shape.cols;
  args.inner = p.shape.inner;
  args.epsilon = p.params.epsilon;
  if (p.op == kernels::Op::kScaledMaskedSoftmax) {
    args.scale = p.params.scale;
    args.mask_rows = p.params.mask_rows;
    args.causal = p.params.causal;
  }
  if (kernels::IsRmsNormFamily(p.op)) args.weight_offset = p.params.weight_offset;
  if (kernels::QuantizesOutput(p.op)) {
    args.quant_dtype = proto::QuantDTypeToProto(p.params.quant_dtype);
    args.scale_mode = proto::ScaleModeToProto(p.params.scale_mode);
    args.group_size = p.params.group_size;
    args.scale_ub = p.params.scale_ub;
  }
  if (kernels::HasRowStrides(p.params, p.shape)) {
    args.row_strides = proto::RowStridesToProto(p.params);
  }
  return args;
}

void SetOperandRef(Operand operand, pb::TensorRef read, pb::OutputRef written, RunArgs& args) {
  switch (operand) {
    case Operand::kInput:
      args.input = std::move(read);
      break;
    case Operand::kOutput:
      args.output = std::move(written);
      break;
    case Operand::kGamma:
      args.gamma = std::move(read);
      break;
    case Operand::kBeta:
      args.beta = std::move(read);
      break;
    case Operand::kMask:
      args.mask = std::move(read);
      break;
    case Operand::kMean:
      args.mean = std::move(written);
      break;
    case Operand::kInvStd:
      args.inv_std = std::move(written);
      break;
    case Operand::kRowScale:
      args.row_scale = std::move(written);
      break;
    case Operand::kResidual:
      args.residual = std::move(read);
      break;
    case Operand::kQuantScale:
      args.quant_scale = std::move(read);
      break;
  }
}

absl::StatusOr<kernels::OpParams> RunOpParams(const RunCliOptions& o, kernels::Op op,
                                              kernels::Shape shape, double epsilon) {
  kernels::OpParams params;
  params.epsilon = epsilon;
  const absl::string_view name = kernels::OpName(op);
  auto usage = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.weight_offset) {
    if (!kernels::IsRmsNormFamily(op)) {
      return usage("--weight_offset is a flag of the rms_norm family, not ", name);
    }
    if (!std::isfinite(*o.weight_offset)) {
      return usage("--weight_offset=", *o.weight_offset, " must be finite");
    }
    params.weight_offset = *o.weight_offset;
  }
  const bool quant_flags =
      o.quant_dtype || o.scale_mode || o.group_size || o.scale_ub || o.quant_scale;
  if (quant_flags && !kernels::QuantizesOutput(op)) {
    return usage(
        "--quant_dtype, --scale_mode, --group_size, --scale_ub and --quant_scale are flags of "
        "the *_quant ops, not ",
        name);
  }
  if (kernels::QuantizesOutput(op)) {
    if (o.quant_dtype) {
      absl::StatusOr<kernels::QuantDType> dtype = kernels::ParseQuantDType(*o.quant_dtype);
      if (!dtype.ok()) {
        return usage("--quant_dtype=", *o.quant_dtype, " must be fp8_e4m3, fp8_e5m2 or int8");
      }
      params.quant_dtype = *dtype;
    }
    if (o.scale_mode) {
      absl::StatusOr<kernels::ScaleMode> mode = kernels::ParseScaleMode(*o.scale_mode);
      if (!mode.ok()) {
        return usage("--scale_mode=", *o.scale_mode, " must be static, per_row or per_group");
      }
      params.scale_mode = *mode;
    }
    const bool per_group = params.scale_mode == kernels::ScaleMode::kPerGroup;
    if (o.group_size && !per_group) return usage("--group_size needs --scale_mode=per_group");
    if (per_group) {
      params.group_size = o.group_size.value_or(128);
      if ((params.group_size != 64 && params.group_size != 128) ||
          shape.cols % params.group_size != 0) {
        return usage("--group_size=", params.group_size,
                     " must be 64 or 128 and divide --cols=", shape.cols);
      }
    }
    const bool is_static = params.scale_mode == kernels::ScaleMode::kStatic;
    if (o.scale_ub) {
      if (is_static) {
        return usage("--scale_ub bounds a dynamic scale; --scale_mode=static has none");
      }
      if (!(std::isfinite(*o.scale_ub) && *o.scale_ub >= 0)) {
        return usage("--scale_ub=", *o.scale_ub, " must be finite and >= 0 (0: no bound)");
      }
      params.scale_ub = *o.scale_ub;
    }
    if (o.quant_scale && !is_static) return usage("--quant_scale needs --scale_mode=static");
    if (is_static && o.quant_scale && !(std::isfinite(*o.quant_scale) && *o.quant_scale > 0)) {
      return usage("--quant_scale=", *o.quant_scale, " must be finite and > 0");
    }
  }
  if (o.row_stride || o.group_rows || o.group_stride) {
    if (shape.inner > 1) return usage("--row_stride and groups are for last-axis ops (--inner=1)");
    const int64_t stride = o.row_stride.value_or(shape.cols);
    if (stride < shape.cols) {
      return usage("--row_stride=", stride, " must be >= --cols=", shape.cols,
                   " (rows must not overlap)");
    }
    if (o.group_rows.has_value() != o.group_stride.has_value()) {
      return usage("--group_rows and --group_stride go together");
    }
    params.x_row_stride = params.y_row_stride = stride;
    if (o.group_rows) {
      // The kernels group rows for QK-norm only (the daemon refuses others).
      if (op != kernels::Op::kRmsNorm) {
        return usage("--group_rows and --group_stride (per-head views) are rms_norm's, not ", name);
      }
      const int64_t group_rows = *o.group_rows;
      if (group_rows < 1 || shape.rows % group_rows != 0) {
        return usage("--group_rows=", group_rows, " must be >= 1 and divide --rows=", shape.rows);
      }
      const int64_t least = (group_rows - 1) * stride + shape.cols;
      if (*o.group_stride < least) {
        return usage("--group_stride=", *o.group_stride, " must be >= ", least,
                     " ((group_rows - 1) * row_stride + cols: groups must not overlap)");
      }
      params.group_rows = group_rows;
      params.x_group_stride = params.y_group_stride = *o.group_stride;
    } else if (kernels::AddsResidual(op)) {
      params.residual_row_stride = stride;
    }
  }
  return params;
}

absl::StatusOr<Via> ParseVia(absl::string_view name) {
  for (Via via : {Via::kAuto, Via::kIpc, Via::kShm, Via::kInline}) {
    if (name == ViaName(via)) return via;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--via=", name, " must be auto, ipc, shm or inline"));
}

absl::string_view ViaName(Via via) {
  switch (via) {
    case Via::kAuto:
      return "auto";
    case Via::kIpc:
      return "ipc";
    case Via::kShm:
      return "shm";
    case Via::kInline:
      return "inline";
  }
  return "?";
}

int RunRunCommand(const RunCliOptions& o, std::ostream& out, std::ostream& err) {
  // Flags first: every problem with them is a usage error.
  absl::StatusOr<kernels::Op> op = kernels::ParseOp(o.op);
  if (!op.ok()) return ReportError(kRunVerb, op.status(), err, kExitUsage);
  if (!o.dtype || !o.rows || !o.cols) {
    return ReportError(kRunVerb,
                       absl::InvalidArgumentError(
                           "--dtype, --rows and --cols are required (e.g. --dtype=float16 "
                           "--rows=4096 --cols=1024)"),
                       err, kExitUsage);
  }
  absl::StatusOr<kernels::DType> dtype = kernels::ParseDType(*o.dtype);
  if (!dtype.ok()) return ReportError(kRunVerb, dtype.status(), err, kExitUsage);
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"rows", *o.rows},
                                    {"cols", *o.cols}}) {
    if (value < 1) {
      return ReportError(
          kRunVerb,
          absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, " must be >= 1")), err,
          kExitUsage);
    }
  }
  absl::StatusOr<Via> via = ParseVia(o.via);
  if (!via.ok()) return ReportError(kRunVerb, via.status(), err, kExitUsage);
  if (o.iterations < 1) {
    return ReportError(kRunVerb,
                       absl::InvalidArgumentError(
                           absl::StrCat("--iterations=", o.iterations, " must be >= 1")),
                       err, kExitUsage);
  }
  if (o.epsilon && !kernels::TakesEpsilon(*op)) {
    return ReportError(kRunVerb,
                       absl::InvalidArgumentError(absl::StrCat(
                           "--epsilon is a flag of layer_norm and rms_norm, not ",
                           kernels::OpName(*op))),
                       err, kExitUsage);
  }
  const double epsilon = o.epsilon.value_or(kDefaultRunEpsilon);
  if (kernels::TakesEpsilon(*op) && !(std::isfinite(epsilon) && epsilon > 0)) {
    return ReportError(kRunVerb,
                       absl::InvalidArgumentError(
                           absl::StrCat("--epsilon=", epsilon, " must be finite and > 0")),
                       err, kExitUsage);
  }
  const int64_t inner = o.inner.value_or(1);
  if (inner < 1) {
    return ReportError(
        kRunVerb, absl::InvalidArgumentError(absl::StrCat("--inner=", inner, " must be >= 1")), err,
        kExitUsage);
  }
  if (inner > 1 && !kernels::SupportsInnerAxis(*op)) {
    return ReportError(kRunVerb,
                       absl::InvalidArgumentError(absl::StrCat(
                           "--inner=", inner, ": ", kernels::OpName(*op),
                           " reduces the last axis only (softmax and log_softmax take --inner)")),
                       err, kExitUsage);
  }
  kernels::AttentionOptions attention;
  attention.with_mask = o.mask;
  attention.causal = o.causal;
  if (*op != kernels::Op::kScaledMaskedSoftmax) {
    if (o.mask || o.causal || o.scale || o.mask_rows) {
      return ReportError(kRunVerb,
                         absl::InvalidArgumentError(absl::StrCat(
                             "--mask, --causal, --scale and --mask_rows are flags of "
                             "scaled_masked_softmax, not ",
                             kernels::OpName(*op))),
                         err, kExitUsage);
    }
  } else {
    if (o.scale) {
      if (!std::isfinite(*o.scale)) {
        return ReportError(kRunVerb,
                           absl::InvalidArgumentError(
                               absl::StrCat("--scale=", *o.scale, " must be finite")),
                           err, kExitUsage);
      }
      // AttentionOptions reads 0 as "1/sqrt(cols)"; a scale of 0 is not
      // worth a special case here.
      if (*o.scale == 0) {
        return ReportError(
            kRunVerb, absl::InvalidArgumentError("--scale=0: give a non-zero scale"), err,
            kExitUsage);
      }
      attention.scale = *o.scale;
    }
    if (o.mask_rows) {
      if (*o.mask_rows < 1 || *o.rows % *o.mask_rows != 0) {
        return ReportError(kRunVerb,
                           absl::InvalidArgumentError(absl::StrCat(
                               "--mask_rows=", *o.mask_rows, " must be >= 1 and divide --rows=",
                               *o.rows, " (it is the query length q of (batch, heads, q, k))")),
                           err, kExitUsage);
      }
      if (!o.mask && !o.causal) {
        return ReportError(kRunVerb,
                           absl::InvalidArgumentError(
                               "--mask_rows needs --mask or --causal (the query length of "
                               "the mask)"),
                           err, kExitUsage);
      }
      attention.mask_rows = *o.mask_rows;
    }
  }
  absl::StatusOr<kernels::OpParams> params =
      RunOpParams(o, *op, kernels::Shape{*o.rows, *o.cols, inner}, epsilon);
  if (!params.ok()) return ReportError(kRunVerb, params.status(), err, kExitUsage);
  DaemonClientOptions client_options;
  client_options.target = o.server;
  client_options.deadline = o.deadline;
  absl::StatusOr<TcpCredentials> tcp = ReadTcpCredentials(o.tcp);
  if (!tcp.ok()) return ReportError(kRunVerb, tcp.status(), err, kExitUsage);
  client_options.tcp = *std::move(tcp);
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect(client_options);
  if (!client.ok()) return ReportError(kRunVerb, client.status(), err, kExitUsage);

  const kernels::Shape shape{*o.rows, *o.cols, inner};
  absl::StatusOr<ViaChoice> choice =
      ChooseVia(*via, *client, o.device, o.daemon_device, ClientMemoryReason(*op, *params, shape));
  if (!choice.ok()) {
    return absl::IsInvalidArgument(choice.status())
               ? ReportError(kRunVerb, choice.status(), err, kExitUsage)
               : ReportDaemonError(kRunVerb, choice.status(), err);
  }
  if (choice->via == Via::kInline) {
    // Before the problem is made: a shape over the daemon's limit would
    // cost seconds and gigabytes here only to be refused.
    if (absl::Status fits = CheckInlineLimit(*client, *op, *dtype, shape); !fits.ok()) {
      return absl::IsResourceExhausted(fits) ? ReportError(kRunVerb, fits, err)
                                             : ReportDaemonError(kRunVerb, fits, err);
    }
  }
  kernels::ProblemOptions problem_options;
  problem_options.attention = attention;
  problem_options.params = *params;
  // Unset: the largest per-row dynamic scale, so the codes use their range.
  problem_options.static_scale = static_cast<float>(o.quant_scale.value_or(0));
  absl::StatusOr<kernels::HostProblem> problem =
      MakeCheckedProblem(*op, *dtype, shape, o.seed, problem_options);
  if (!problem.ok()) return ReportError(kRunVerb, problem.status(), err);

  std::unique_ptr<Transport> transport;
  switch (choice->via) {
    case Via::kShm:
    case Via::kIpc: {
      absl::StatusOr<std::unique_ptr<Transport>> made =
          choice->via == Via::kShm
              ? ShmTransport(*client, *problem, o.daemon_device)
              : IpcTransport(*client, *problem, o.device, choice->daemon_device);
      if (!made.ok()) return ReportDaemonError(kRunVerb, made.status(), err);
      transport = *std::move(made);
      break;
    }
    default:
      transport = std::make_unique<InlineTransport>(*problem, o.daemon_device);
      break;
  }

  std::vector<double> kernel_us, round_trip_us;
  pb::RunResponse response;
  for (int i = 0; i < o.iterations; ++i) {
    if (absl::Status s = transport->Restore(); !s.ok()) return ReportError(kRunVerb, s, err);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<pb::RunResponse> ran = client->Run(transport->request());
    const auto end = std::chrono::steady_clock::now();
    if (!ran.ok()) return ReportDaemonError(kRunVerb, ran.status(), err);
    round_trip_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    kernel_us.push_back(ran->kernel_time_us());
    response = *std::move(ran);
  }
  absl::StatusOr<Outputs> outputs = transport->Fetch(response);
  if (!outputs.ok()) return ReportError(kRunVerb, outputs.status(), err);
  const kernels::CheckReport check = kernels::CheckHostOutputs(*problem, *outputs);
  // y (or its codes), the residual written back, and every per-row output.
  int64_t checked = shape.elements() * (kernels::AddsResidual(*op) ? 2 : 1);
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (!kernels::IsRowStat(operand) || !kernels::TakesOperand(*op, operand)) continue;
    if (const std::vector<float>* reference = RowReference(*problem, operand)) {
      checked += static_cast<int64_t>(reference->size());
    }
  }

  const pb::ConfigChoice& config = response.config();
  std::string point = db::DescribePoint(kernels::OpName(*op), kernels::DTypeName(*dtype),
                                    shape.rows, shape.cols, shape.inner);
  if (*op == kernels::Op::kScaledMaskedSoftmax) {
    absl::StrAppend(&point, absl::StrFormat(" scale %g", problem->params.scale));
    if (!problem->mask.empty()) absl::StrAppend(&point, ", mask of ", problem->params.mask_rows, " rows");
    if (problem->params.causal) absl::StrAppend(&point, ", causal (q = ", problem->params.mask_rows, ")");
  }
  absl::StrAppend(&point, DescribeFusedParams(*op, *problem));
  if (o.format == OutputFormat::kTable) {
    const kernels::Tolerance tol = kernels::QuantizesOutput(*op)
                                       ? kernels::QuantScaleTolerance()
                                       : kernels::OutputTolerance(*op, *dtype);
    const std::string within =
        kernels::QuantizesOutput(*op)
            ? absl::StrFormat("codes within %d, scales rtol %g", kernels::kCodeSteps, tol.rtol)
            : absl::StrFormat("rtol %g, atol %g", tol.rtol, tol.atol);
    WriteLabelledLines(
        {{"run", absl::StrCat(point, " (seed ", o.seed, ")")},
         {"server", client->target()},
         {"via", absl::StrCat(ViaName(choice->via), " (", choice->why, ")")},
         {"backend", response.backend()},
         {"device", DescribeDevice(response)},
         {"config", DescribeConfig(config)},
         {"check",
          check.passed
              ? absl::StrFormat("matches the fp64 reference (%d values; %s)", checked, within)
              : absl::StrCat("MISMATCH: ", check.bad_elements, " of ", checked,
                             " values outside the tolerance; first ", check.detail)},
         {"kernel", absl::StrFormat("%.1f us median of %d%s", Median(kernel_us), o.iterations,
                                    response.backend() == "cpu" ? " (the CPU reference)" : "")},
         {"round trip",
          absl::StrFormat("%.1f us median of %d, client side", Median(round_trip_us),
                          o.iterations)}},
        out);
  } else {
    Table table({{"server", "SERVER"},
                 {"op", "OP"},
                 {"dtype", "DTYPE"},
                 {"rows", "ROWS"},
                 {"cols", "COLS"},
                 {"inner", "INNER"},
                 {"via", "VIA"},
                 {"backend", "BACKEND"},
                 {"device_ordinal", "DEVICE"},
                 {"device_uuid", "DEVICE UUID"},
                 {"config_source", "SOURCE"},
                 {"config_key", "CONFIG"},
                 {"tuned_rows", "TUNED ROWS"},
                 {"tuned_cols", "TUNED COLS"},
                 {"tuned_median_us", "TUNED US"},
                 {"matches", "MATCHES"},
                 {"bad_values", "BAD"},
                 {"first_mismatch", "FIRST MISMATCH"},
                 {"iterations", "ITERATIONS"},
                 {"kernel_us_median", "KERNEL US"},
                 {"round_trip_us_median", "ROUND TRIP US"}});
    const bool tuned = config.has_tuned_shape();
    const bool ran_on_gpu = response.device_ordinal() >= 0;
    table.AddRow({Cell::Text(client->target()),
                  Cell::Text(std::string(kernels::OpName(*op))),
                  Cell::Text(std::string(kernels::DTypeName(*dtype))),
                  Cell::Int(shape.rows),
                  Cell::Int(shape.cols),
                  Cell::Int(shape.inner),
                  Cell::Text(std::string(ViaName(choice->via))),
                  Cell::Text(response.backend()),
                  ran_on_gpu ? Cell::Int(response.device_ordinal()) : Cell::Null(),
                  ran_on_gpu && !response.device_uuid().empty()
                      ? Cell::Text(response.device_uuid())
                      : Cell::Null(),
                  Cell::Text(std::string(ConfigSourceName(config.source()))),
                  config.has_config() ? Cell::Text(config.config().key()) : Cell::Null(),
                  tuned ? Cell::Int(config.tuned_shape().rows()) : Cell::Null(),
                  tuned ? Cell::Int(config.tuned_shape().cols()) : Cell::Null(),
                  tuned ? Cell::Real(config.tuned_median_us()) : Cell::Null(),
                  Cell::Bool(check.passed),
                  Cell::Int(check.bad_elements),
                  check.detail.empty() ? Cell::Null() : Cell::Text(check.detail),
                  Cell::Int(o.iterations),
                  Cell::Real(Median(kernel_us)),
                  Cell::Real(Median(round_trip_us))});
    if (o.format == OutputFormat::kJson) {
      out << RowToJson(table, 0) << "\n";
    } else {
      Render(table, o.format, out);
    }
  }
  if (!check.passed) {
    return ReportError(kRunVerb,
                       absl::DataLossError(absl::StrCat(
                           point, ": the output does not match the fp64 reference (",
                           check.bad_elements, " bad values; first ", check.detail, ")")),
                       err);
  }
  return kExitOk;
}

}  // namespace kt::client
