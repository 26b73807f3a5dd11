// `kerntune run OP`: sends one random problem to a running kerntuned (inline
// bytes, a registered shared-memory buffer or a registered CUDA IPC
// allocation), checks the output against the fp64 reference, and prints the
// config the daemon used with its source and the kernel and round-trip
// times.
#ifndef KERNTUNE_CLIENT_RUN_CLI_H_
#define KERNTUNE_CLIENT_RUN_CLI_H_

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cuda_ipc.h"
#include "client/daemon_cli_common.h"
#include "client/daemon_client.h"
#include "client/output_format.h"
#include "client/shared_memory.h"
#include "kernels/op_args.h"
#include "kernels/verify.h"

namespace kt::client {

// How the tensors reach the daemon.
enum class Via {
  kAuto,    // kIpc when this process sees a GPU and the daemon takes CUDA IPC, else kInline
  kIpc,     // one registered cudaMalloc allocation (GPU daemon, Unix socket)
  kShm,     // one registered POSIX shared-memory object (Unix socket)
  kInline,  // bytes in the request and the reply
};
absl::StatusOr<Via> ParseVia(absl::string_view name);
absl::string_view ViaName(Via via);

inline constexpr double kDefaultRunEpsilon = 1e-5;

// Flag values as the user typed them; RunRunCommand checks them (a bad or
// missing one is a usage error naming the flag).
struct RunCliOptions {
  std::string server;  // client::ResolveTarget; empty = the default socket
  TcpCredentialFiles tcp;  // TLS and the token, for a TCP server
  std::string op;
  std::optional<std::string> dtype;
  std::optional<int64_t> rows;
  std::optional<int64_t> cols;
  // softmax / log_softmax along a middle axis: (rows, cols, inner), reduced
  // along cols. Unset: 1, the last axis.
  std::optional<int64_t> inner;
  std::string via = "auto";
  int iterations = 10;    // Runs timed; the output of the last is checked
  // layer_norm, rms_norm (unset: kDefaultRunEpsilon); refused for the others.
  std::optional<double> epsilon;
  // scaled_masked_softmax: an additive random (mask_rows, cols) mask (1 in
  // 8 entries -inf), the causal mask, the scale (unset: 1/sqrt(cols)), and
  // the query length (unset: the largest divisor of rows <= cols).
  bool mask = false;
  bool causal = false;
  std::optional<double> scale;
  std::optional<int64_t> mask_rows;
  // The fused norms. weight_offset: the RMSNorm family (y = x_hat *
  // (weight_offset + w)). The *_quant ops: quant_dtype (unset: fp8_e4m3),
  // scale_mode (unset: per_row), group_size (per_group; unset: 128),
  // scale_ub (the dynamic modes' bound on max |y|; unset: none) and
  // quant_scale (static; unset: the problem's largest per-row dynamic
  // scale, so the codes use their whole range).
  std::optional<double> weight_offset;
  std::optional<std::string> quant_dtype;
  std::optional<std::string> scale_mode;
  std::optional<int64_t> group_size;
  std::optional<double> scale_ub;
  std::optional<double> quant_scale;
  // Strided rows (last-axis ops): row r of the input and output starts at
  // r * row_stride elements, or with groups of group_rows rows at (r /
  // group_rows) * group_stride + (r % group_rows) * row_stride (QK-norm of
  // a [tokens, 3, heads, head_dim] tensor: --cols=head_dim
  // --row_stride=head_dim --group_rows=heads --group_stride=3*heads*head_dim).
  // Groups are rms_norm's only (the kernels'). The residual takes
  // row_stride when there are no groups.
  std::optional<int64_t> row_stride;
  std::optional<int64_t> group_rows;
  std::optional<int64_t> group_stride;
  int device = 0;         // --via=ipc: this process's CUDA device to allocate on
  // The daemon's GPU to run on: its ordinal, UUID or a unique UUID prefix.
  // Inline and shm: RunRequest.device (empty: the least-loaded one). ipc:
  // the daemon's ordinal of `device` (empty: the one with the same UUID in
  // GetStatus, or `device` when the daemon reports no UUIDs). auto: ipc when
  // it is `device`'s GPU, else inline to it.
  std::string daemon_device;
  uint64_t seed = 42;
  OutputFormat format = OutputFormat::kTable;
  absl::Duration deadline = absl::Seconds(120);  // per Run
};

// The fused norms' flags of `o` as OpParams for `op` on `shape` (epsilon
// included): InvalidArgument naming the flag for one the op does not take or
// a value out of range.
absl::StatusOr<kernels::OpParams> RunOpParams(const RunCliOptions& o, kernels::Op op,
                                              kernels::Shape shape, double epsilon);

// Exit kExitOk when the output matches, kExitFailure on a mismatch or a
// failed call, kExitUsage for bad flags.
int RunRunCommand(const RunCliOptions& options, std::ostream& out, std::ostream& err);

// Puts one operand's reference into the Run where RunArgs names it: `read`
// for an operand read, `written` for one written (the other unused).
void SetOperandRef(kernels::Operand operand, pb::TensorRef read, pb::OutputRef written,
                   RunArgs& args);

// A random problem (kernels::MakeHostProblem) as a Run sends it, for
// `kerntune run` and kt_soak:
// - the data of one of its inputs (the residual as given too); null for an
//   output, an input it does not have and the static scale (float32: see
//   ProblemInputBytes);
const std::vector<uint8_t>* ProblemInput(const kernels::HostProblem& p, kernels::Operand operand);
// - the bytes of one of its inputs, the static scale included; empty for an
//   output or an input it does not have;
absl::string_view ProblemInputBytes(const kernels::HostProblem& p, kernels::Operand operand);
// - the bytes of one of its operands; 0 for one it does not have;
int64_t ProblemOperandBytes(const kernels::HostProblem& p, kernels::Operand operand);
// - every operand's byte offset in one registered buffer (shm or IPC), -1
//   for one it does not have: 256-byte aligned, so any dtype offset rule
//   and the kernels' widest packs are met;
struct OperandLayout {
  std::array<int64_t, kernels::kOperandCount> offset;
  int64_t total = 0;  // the buffer's bytes

  int64_t at(kernels::Operand operand) const { return offset[static_cast<size_t>(operand)]; }
};
OperandLayout LayOutOperands(const kernels::HostProblem& p);

// The bytes of a registered buffer as this process reaches them.
class BufferBytes {
 public:
  virtual ~BufferBytes() = default;
  virtual absl::Status CopyIn(int64_t offset, const void* data, int64_t bytes) = 0;
  virtual absl::Status Fill(int64_t offset, uint8_t value, int64_t bytes) = 0;
  virtual absl::Status CopyOut(int64_t offset, void* data, int64_t bytes) const = 0;
};

// A POSIX shared-memory object mapped here.
class ShmBytes final : public BufferBytes {
 public:
  explicit ShmBytes(SharedMemory memory);
  absl::Status CopyIn(int64_t offset, const void* data, int64_t bytes) override;
  absl::Status Fill(int64_t offset, uint8_t value, int64_t bytes) override;
  absl::Status CopyOut(int64_t offset, void* data, int64_t bytes) const override;
  const SharedMemory& memory() const { return memory_; }

 private:
  SharedMemory memory_;
};

// A cudaMalloc allocation of this process, shared with CUDA IPC.
class IpcBytes final : public BufferBytes {
 public:
  explicit IpcBytes(IpcAllocation memory);
  absl::Status CopyIn(int64_t offset, const void* data, int64_t bytes) override;
  absl::Status Fill(int64_t offset, uint8_t value, int64_t bytes) override;
  absl::Status CopyOut(int64_t offset, void* data, int64_t bytes) const override;
  const IpcAllocation& memory() const { return memory_; }

 private:
  IpcAllocation memory_;
};
// - its op, dtype, shape and parameters, without any tensor.
RunArgs ProblemRunArgs(const kernels::HostProblem& p);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_RUN_CLI_H_
