// kt::client::DaemonClient: the C++ client of kerntuned's KernTune service
// (proto/kerntune/v1/kerntune.proto). Typed calls with a deadline each,
// grpc::Status turned into absl::Status in one place, and RegisteredBuffer,
// which ends its registration when it goes out of scope. No CUDA here: CUDA
// IPC handles travel as 64 opaque bytes (client/cuda_ipc.h makes them).
#ifndef KERNTUNE_CLIENT_DAEMON_CLIENT_H_
#define KERNTUNE_CLIENT_DAEMON_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "kerntune/v1/kerntune.grpc.pb.h"

namespace kt::client {

namespace pb = ::kerntune::v1;

// $XDG_RUNTIME_DIR/kerntune.sock, else /run/kerntune/kerntune.sock. Must
// match server/server.cc DefaultSocketPath (the client does not link the
// server); tests/client checks the two agree.
std::string DefaultDaemonSocketPath();

// A gRPC target from what a user writes: "" = the default socket;
// "unix:PATH" as is; a path ("/..", "./..", "../..") = that socket;
// "host:port" (or any gRPC URI such as "dns:///host:port") as is.
// InvalidArgument for anything else ("--server=foo").
absl::StatusOr<std::string> ResolveTarget(absl::string_view target);
// True for "unix:" targets, the only ones that may register buffers or send
// CUDA IPC handles (the daemon needs the peer's credentials).
bool IsUnixTarget(absl::string_view resolved_target);

// The one place a grpc::Status becomes an absl::Status: same code, same
// message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// Where a tensor lives, for RunArgs. Thin builders of the proto messages.
pb::TensorRef InlineTensor(std::string bytes);
pb::TensorRef BufferTensor(absl::string_view buffer_id, int64_t offset_bytes);
pb::TensorRef IpcTensor(std::string handle, int32_t device_ordinal, int64_t offset_bytes);
pb::OutputRef InlineOutput();
pb::OutputRef BufferOutput(absl::string_view buffer_id, int64_t offset_bytes);
pb::OutputRef IpcOutput(std::string handle, int32_t device_ordinal, int64_t offset_bytes);

// One Run in typed form; MakeRunRequest turns it into the proto.
struct RunArgs {
  pb::Op op = pb::OP_UNSPECIFIED;
  pb::DType dtype = pb::DTYPE_UNSPECIFIED;
  int64_t rows = 0;
  int64_t cols = 0;
  // > 1: softmax / log_softmax along the middle axis of (rows, cols, inner).
  int64_t inner = 1;
  pb::TensorRef input;
  pb::OutputRef output = InlineOutput();
  // LayerNorm and RMSNorm. epsilon is required by the daemon (no silent
  // default). RMSNorm: gamma is its weight (beta and mean unused), inv_std
  // its 1/rms written to memory, want_inv_rms the same returned inline.
  std::optional<pb::TensorRef> gamma;
  std::optional<pb::TensorRef> beta;
  double epsilon = 0;
  bool want_mean_inv_std = false;  // LayerNorm stats returned inline
  bool want_inv_rms = false;       // RMSNorm's 1/rms returned inline
  std::optional<pb::OutputRef> mean;  // or written to memory (both or neither)
  std::optional<pb::OutputRef> inv_std;
  // ReduceScale, and the quantizing norms with a dynamic scale: where the
  // scales go (rows of them; rows x cols / group_size per group); unset =
  // returned inline (RunResponse.row_scale).
  std::optional<pb::OutputRef> row_scale;
  // The add_* norms: (rows, cols) of the dtype, read and r = x + residual
  // written back; client memory (a buffer or cuda_ipc), never inline.
  std::optional<pb::TensorRef> residual;
  // The RMSNorm family: y = x_hat * (weight_offset + weight) (Gemma: 1).
  double weight_offset = 0;
  // The *_quant norms: the code type, the scale mode, the group size
  // (per_group: 64 or 128), the dynamic modes' bound on max |y| (0: none)
  // and the static mode's one float32 scale.
  pb::QuantDType quant_dtype = pb::QUANT_DTYPE_UNSPECIFIED;
  pb::ScaleMode scale_mode = pb::SCALE_MODE_UNSPECIFIED;
  int64_t group_size = 0;
  double scale_ub = 0;
  std::optional<pb::TensorRef> quant_scale;
  // Where the rows of the input, output and residual start (last-axis ops);
  // unset = contiguous rows.
  std::optional<pb::RowStrides> row_strides;
  // ScaledMaskedSoftmax: scale (unset: the daemon's 1), an additive
  // (mask_rows, cols) mask, the query length, causal.
  std::optional<double> scale;
  std::optional<pb::TensorRef> mask;
  int64_t mask_rows = 0;
  bool causal = false;
  // cudaIpcEventHandle_t bytes (64) or empty; device tensors only.
  std::string wait_event;
  std::string done_event;
  // Have the daemon time the kernel (RunResponse.kernel_time_us); costs a
  // few microseconds per Run.
  bool time_kernel = false;
  // The daemon's GPU for a Run without device tensors (inline or shared
  // memory): its UUID, a unique UUID prefix or the daemon's ordinal; empty =
  // the least-loaded one. Runs on device tensors run where they live.
  // RunResponse.device_ordinal / device_uuid say which device ran it.
  std::string device;
};
pb::RunRequest MakeRunRequest(const RunArgs& args);

// The daemon's ordinal of the GPU whose UUID ("GPU-...", cuda_ipc.h
// CudaDeviceUuid) is `uuid`, from its GetStatus: CUDA ordinals depend on each
// process's CUDA_VISIBLE_DEVICES, UUIDs do not. `fallback` (the caller's own
// ordinal, the old assumption that both number GPUs alike) when `uuid` is
// empty or the daemon reports no UUIDs (an older daemon, the CPU backend).
// FailedPrecondition when the daemon reports UUIDs and none is `uuid`.
absl::StatusOr<int32_t> DaemonOrdinalForUuid(const pb::GetStatusResponse& status,
                                             absl::string_view uuid, int32_t fallback);

// How a TCP target is secured (kerntuned's --tls_cert, --tls_client_ca,
// --token_file). A unix: target takes none: the socket's file mode decides
// who may connect, and the daemon knows each caller's process.
struct TcpCredentials {
  // PEM of the CAs that sign the daemon's certificate; non-empty = TLS. The
  // daemon's certificate must name the host of the target (IP or DNS SAN).
  std::string root_certs;
  // PEM certificate chain and private key of this client, for a daemon
  // that asks for client certificates; both or neither.
  std::string cert_chain;
  std::string private_key;
  // The bearer token sent with every call (needs TLS: gRPC sends tokens
  // over TLS only).
  std::string token;

  bool empty() const {
    return root_certs.empty() && cert_chain.empty() && private_key.empty() && token.empty();
  }
};

// How soon a client finds a restarted daemon again: gRPC's reconnect
// backoff starts at the first and never exceeds the second (the Python
// client's _RECONNECT_INITIAL_MS / _RECONNECT_MAX_MS).
inline constexpr int kReconnectInitialMs = 100;
inline constexpr int kReconnectMaxMs = 1000;

struct DaemonClientOptions {
  // As for ResolveTarget; empty = the default socket.
  std::string target;
  // TCP targets only; InvalidArgument from Connect on a unix: target.
  TcpCredentials tcp;
  // Every call's deadline (DaemonClient::WithDeadline changes it).
  absl::Duration deadline = absl::Seconds(60);
  // false: a daemon that is not there fails the call at once (UNAVAILABLE)
  // instead of waiting out the deadline for it to appear.
  bool wait_for_ready = false;
  // Runs whose tensors are all in client memory (registered buffers, CUDA
  // IPC) go through a shared-memory submission queue when the daemon offers
  // one (client/run_queue.h), else over gRPC; false: always gRPC. The
  // answers are the same either way.
  bool use_queue = true;
};

class DaemonClient;
namespace internal {
struct DaemonConnection;  // channel, stub and target, shared by copies
}  // namespace internal

// One registration, owned by this process. Move-only; the destructor
// unregisters it (an error there is written to stderr, not thrown: the
// daemon also ends it when the lease runs out or this process dies). The
// connection is shared, so a RegisteredBuffer may outlive its DaemonClient.
class RegisteredBuffer {
 public:
  RegisteredBuffer() = default;
  RegisteredBuffer(RegisteredBuffer&& other) noexcept;
  RegisteredBuffer& operator=(RegisteredBuffer&& other) noexcept;
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;
  ~RegisteredBuffer();

  bool valid() const { return connection_ != nullptr; }
  const pb::BufferInfo& info() const { return info_; }
  const std::string& id() const { return info_.buffer_id(); }
  int64_t size_bytes() const { return info_.size_bytes(); }

  // Slices of it, for RunArgs.
  pb::TensorRef Tensor(int64_t offset_bytes) const { return BufferTensor(id(), offset_bytes); }
  pb::OutputRef Output(int64_t offset_bytes) const { return BufferOutput(id(), offset_bytes); }

  // Unregisters now and reports how it went; the object is then empty.
  absl::Status Unregister();
  // Forgets the registration without unregistering (it ends by lease or
  // when this process exits); returns its id.
  std::string Release();

 private:
  friend class DaemonClient;
  using Connection = internal::DaemonConnection;
  RegisteredBuffer(std::shared_ptr<const Connection> connection, absl::Duration deadline,
                   pb::BufferInfo info)
      : connection_(std::move(connection)), deadline_(deadline), info_(std::move(info)) {}

  std::shared_ptr<const Connection> connection_;
  absl::Duration deadline_;
  pb::BufferInfo info_;
};

// A connection to one kerntuned. Cheap to copy (copies share the channel).
// Errors keep the daemon's code; their message names the call and target,
// e.g. "Run on unix:/run/kerntune/kerntune.sock: input.buffer ... not found".
class DaemonClient {
 public:
  // Checks the target and its credentials; the connection itself is made
  // by the first call.
  static absl::StatusOr<DaemonClient> Connect(const DaemonClientOptions& options);

  // The same connection with another per-call deadline.
  DaemonClient WithDeadline(absl::Duration deadline) const;

  const std::string& target() const;

  absl::StatusOr<pb::RunResponse> Run(const RunArgs& args) const {
    return Run(MakeRunRequest(args));
  }
  absl::StatusOr<pb::RunResponse> Run(const pb::RunRequest& request) const;

  // `device` names whose configs (a node may mix GPU models), as
  // RunArgs::device; empty = the daemon's first device.
  absl::StatusOr<pb::ConfigChoice> GetConfig(pb::Op op, pb::DType dtype, int64_t rows,
                                             int64_t cols, int64_t inner = 1,
                                             absl::string_view device = "") const;
  absl::StatusOr<pb::ListConfigsResponse> ListConfigs(absl::string_view device = "") const;
  absl::StatusOr<pb::GetStatusResponse> GetStatus() const;
  // The problems the daemon served without a tuned entry for exactly them.
  absl::StatusOr<pb::ListServedShapesResponse> ListServedShapes() const;
  // DaemonOrdinalForUuid on this daemon's GetStatus.
  absl::StatusOr<int32_t> DeviceOrdinalFor(absl::string_view uuid, int32_t fallback) const;
  // This process's registrations.
  absl::StatusOr<std::vector<pb::BufferInfo>> ListBuffers() const;

  // Registers a CUDA allocation by its cudaIpcMemHandle_t bytes (of the
  // allocation's base). size_bytes 0 = the whole allocation; ttl_seconds 0 =
  // the daemon's default idle lease.
  absl::StatusOr<RegisteredBuffer> RegisterCudaIpc(std::string handle, int32_t device_ordinal,
                                                   int64_t size_bytes, int64_t ttl_seconds,
                                                   absl::string_view label) const;
  // Registers a POSIX shared-memory object by its shm_open name.
  absl::StatusOr<RegisteredBuffer> RegisterHostShm(absl::string_view name, int64_t size_bytes,
                                                   int64_t ttl_seconds,
                                                   absl::string_view label) const;
  // By id: for a registration held elsewhere (RegisteredBuffer::Release).
  absl::Status Unregister(absl::string_view buffer_id) const;

 private:
  using Connection = internal::DaemonConnection;
  DaemonClient(std::shared_ptr<const Connection> connection, absl::Duration deadline)
      : connection_(std::move(connection)), deadline_(deadline) {}
  absl::StatusOr<RegisteredBuffer> Register(const pb::RegisterBufferRequest& request) const;

  std::shared_ptr<const Connection> connection_;
  absl::Duration deadline_;
};

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_DAEMON_CLIENT_H_
