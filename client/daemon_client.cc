// DaemonClient and RegisteredBuffer (daemon_client.h).
#include "client/daemon_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/run_queue.h"

namespace kt::client {

struct internal::DaemonConnection {
  std::string target;
  bool wait_for_ready = false;
  bool use_queue = false;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KernTune::Stub> stub;
  // Submission queues, opened as concurrent Runs need them: a Run takes an
  // idle one, so threads do not contend for one queue's ring while there
  // are at most kMaxQueues of them; beyond, they share in turn. After the
  // stub, so they close first. A queue the daemon closed is replaced.
  static constexpr int kMaxQueues = 4;
  // Guards the four members after it; a std::mutex, as RunQueueClient's
  // (run_queue.h says why).
  mutable std::mutex queue_mu;
  mutable std::vector<std::shared_ptr<RunQueueClient>> queues;
  mutable std::vector<std::shared_ptr<RunQueueClient>> idle_queues;
  mutable size_t next_shared = 0;
  mutable bool queue_refused = false;

  // The path of a "unix:PATH" or "unix:///PATH" target.
  std::string SocketPath() const {
    absl::string_view path = absl::StripPrefix(target, "unix:");
    if (absl::StartsWith(path, "//")) path.remove_prefix(2);
    return std::string(path);
  }

  // A queue lent to one Run; an exclusive one goes back to the idle list.
  struct QueueLease {
    std::shared_ptr<RunQueueClient> queue;
    bool exclusive = false;
  };
  // The queue to send `request` through, or none: gRPC then.
  QueueLease LeaseQueue(const pb::RunRequest& request, absl::Duration deadline) const {
    if (!use_queue || !QueueCarries(request)) return {};
    std::lock_guard<std::mutex> lock(queue_mu);
    // GoneQuiet: the daemon may have died while none of them was in use.
    auto is_closed = [](const std::shared_ptr<RunQueueClient>& q) {
      return q->closed() || q->GoneQuiet();
    };
    while (!idle_queues.empty()) {
      std::shared_ptr<RunQueueClient> queue = std::move(idle_queues.back());
      idle_queues.pop_back();
      if (!is_closed(queue)) return {std::move(queue), true};
      queues.erase(std::remove(queues.begin(), queues.end(), queue), queues.end());
    }
    queues.erase(std::remove_if(queues.begin(), queues.end(), is_closed), queues.end());
    if (static_cast<int>(queues.size()) < kMaxQueues && !queue_refused) {
      absl::StatusOr<std::unique_ptr<RunQueueClient>> opened = RunQueueClient::Open(
          *stub, SocketPath(), std::min(deadline, absl::Seconds(10)));
      if (opened.ok()) {
        queues.push_back(*std::move(opened));
        return {queues.back(), true};
      }
      // A daemon without queues (or that refuses one) is served over gRPC
      // from now on, unless this connection already has queues to share;
      // one that is not there (yet) is asked again next time.
      queue_refused = queues.empty() && !absl::IsUnavailable(opened.status());
    }
    if (queues.empty()) return {};
    return {queues[next_shared++ % queues.size()], false};
  }
  void ReturnQueue(QueueLease& lease) const {
    if (!lease.exclusive) return;
    std::lock_guard<std::mutex> lock(queue_mu);
    idle_queues.push_back(std::move(lease.queue));
  }
};

namespace {

using Connection = internal::DaemonConnection;

// Keeps the code; says which call to which daemon failed.
absl::Status InContext(absl::string_view rpc, const std::string& target,
                       const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(rpc, " on ", target, ": ", status.message()));
}

// What a Unix socket shows when a call on it found no daemon: gRPC says
// only "failed to connect", whether the file is missing, left behind by a
// daemon that died, or served again by a new one.
enum class SocketState { kMissing, kRefused, kAccepts };

// How long LookAtSocket waits for a server's first bytes.
constexpr int kSocketAnswerMs = 250;

SocketState LookAtSocket(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return SocketState::kMissing;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return SocketState::kRefused;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool answers = false;
  if (fd >= 0 &&
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
    // A gRPC server speaks first (its HTTP/2 SETTINGS). A connection into
    // the backlog of a daemon that is dying is accepted too, and then
    // closed unanswered.
    pollfd readable{fd, POLLIN, 0};
    char byte = 0;
    answers = poll(&readable, 1, kSocketAnswerMs) == 1 && recv(fd, &byte, 1, 0) == 1;
  }
  if (fd >= 0) close(fd);
  return answers ? SocketState::kAccepts : SocketState::kRefused;
}

std::string SocketHint(const std::string& path, SocketState state) {
  switch (state) {
    case SocketState::kMissing:
      return absl::StrCat("no socket at ", path, ": start kerntuned (--socket=", path,
                          "; --cpu on a machine without a GPU), or name the socket it listens on");
    case SocketState::kRefused:
      return absl::StrCat("the socket ", path, " exists but refuses connections: kerntuned "
                          "exited without removing it (start it again) or is still starting");
    case SocketState::kAccepts:
      break;
  }
  return absl::StrCat("kerntuned accepts connections at ", path, " again: the call failed while "
                      "it was away; calls succeed again within a second");
}

// A connection failure on a Unix socket, not the daemon's own UNAVAILABLE
// ("kerntuned is shutting down").
bool Unreachable(const Connection& connection, const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE && IsUnixTarget(connection.target) &&
         !absl::StartsWith(status.error_message(), "kerntuned ");
}

template <typename Request, typename Response>
grpc::Status Attempt(const Connection& connection, absl::Duration deadline,
                     grpc::Status (pb::KernTune::Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                     const Request& request, Response& response) {
  grpc::ClientContext context;
  if (deadline != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  }
  context.set_wait_for_ready(connection.wait_for_ready);
  return (connection.stub.get()->*method)(&context, request, &response);
}

// A call with the deadline given. One that fails because the channel is
// down while the socket accepts connections (a daemon that came back)
// waits for the channel, up to twice kReconnectMaxMs, and is tried again:
// gRPC reconnects within kReconnectMaxMs, but a synchronous client reads a
// new connection only while something waits on the channel (else gRPC's
// backup poller does, every 5 s), and a call that fails at once never
// waits. A failure then says what the socket shows.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(const Connection& connection, absl::Duration deadline,
                              absl::string_view rpc,
                              grpc::Status (pb::KernTune::Stub::*method)(grpc::ClientContext*,
                                                                         const Request&,
                                                                         Response*),
                              const Request& request) {
  Response response;
  grpc::Status status = Attempt(connection, deadline, method, request, response);
  if (status.ok()) return response;
  if (!Unreachable(connection, status)) {
    return InContext(rpc, connection.target, FromGrpcStatus(status));
  }
  const SocketState socket = LookAtSocket(connection.SocketPath());
  if (socket == SocketState::kAccepts &&
      connection.channel->WaitForConnected(absl::ToChronoTime(
          absl::Now() + std::min(deadline, absl::Milliseconds(2 * kReconnectMaxMs))))) {
    response.Clear();
    status = Attempt(connection, deadline, method, request, response);
    if (status.ok()) return response;
    if (!Unreachable(connection, status)) {
      return InContext(rpc, connection.target, FromGrpcStatus(status));
    }
  }
  return InContext(rpc, connection.target,
                   absl::UnavailableError(absl::StrCat(
                       SocketHint(connection.SocketPath(), socket), " (",
                       FromGrpcStatus(status).message(), ")")));
}

absl::Status UnregisterById(const Connection& connection, absl::Duration deadline,
                        absl::string_view buffer_id) {
  pb::UnregisterBufferRequest request;
  request.set_buffer_id(std::string(buffer_id));
  return Call(connection, deadline, "UnregisterBuffer", &pb::KernTune::Stub::UnregisterBuffer,
              request)
      .status();
}

// The channel credentials of `target`: plaintext, or TLS with the client's
// certificate and the token when given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const std::string& target, const TcpCredentials& tcp) {
  if (tcp.empty()) return grpc::InsecureChannelCredentials();
  if (IsUnixTarget(target)) {
    return absl::InvalidArgumentError(absl::StrCat(
        target, ": TLS and tokens are for TCP targets; the Unix socket is guarded by its file "
        "mode and the callers' credentials"));
  }
  if (tcp.root_certs.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate or token needs TLS: give the CA certificates that sign the "
        "daemon's (kerntune --tls_ca) too; gRPC sends tokens over TLS only");
  }
  if (tcp.cert_chain.empty() != tcp.private_key.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate and its private key go together: give both or neither");
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tcp.root_certs;
  ssl.pem_cert_chain = tcp.cert_chain;
  ssl.pem_private_key = tcp.private_key;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (tcp.token.empty()) return credentials;
  return grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(tcp.token));
}

}  // namespace

std::string DefaultDaemonSocketPath() {
  // Keep in step with server/server.cc DefaultSocketPath.
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && runtime_dir[0] != '\0') {
    return absl::StrCat(runtime_dir, "/kerntune.sock");
  }
  return "/run/kerntune/kerntune.sock";
}

absl::StatusOr<std::string> ResolveTarget(absl::string_view target) {
  if (target.empty()) return absl::StrCat("unix:", DefaultDaemonSocketPath());
  if (absl::StartsWith(target, "unix:")) {
    if (target.size() == 5) {
      return absl::InvalidArgumentError("--server=unix: needs a socket path after \"unix:\"");
    }
    return std::string(target);
  }
  if (absl::StartsWith(target, "/") || absl::StartsWith(target, "./") ||
      absl::StartsWith(target, "../")) {
    return absl::StrCat("unix:", target);
  }
  // host:port, or a gRPC URI (dns:///host:port, ipv4:addr:port, ...).
  if (absl::StrContains(target, ':')) return std::string(target);
  return absl::InvalidArgumentError(
      absl::StrCat("--server=", target,
                   ": expected unix:PATH, a socket path starting with / or ./, or host:port"));
}

bool IsUnixTarget(absl::string_view resolved_target) {
  return absl::StartsWith(resolved_target, "unix:");
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return absl::OkStatus();
    case grpc::StatusCode::CANCELLED:
      code = absl::StatusCode::kCancelled;
      break;
    case grpc::StatusCode::UNKNOWN:
      code = absl::StatusCode::kUnknown;
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = absl::StatusCode::kDeadlineExceeded;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = absl::StatusCode::kNotFound;
      break;
    case grpc::StatusCode::ALREADY_EXISTS:
      code = absl::StatusCode::kAlreadyExists;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      code = absl::StatusCode::kPermissionDenied;
      break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case grpc::StatusCode::ABORTED:
      code = absl::StatusCode::kAborted;
      break;
    case grpc::StatusCode::OUT_OF_RANGE:
      code = absl::StatusCode::kOutOfRange;
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      code = absl::StatusCode::kUnimplemented;
      break;
    case grpc::StatusCode::INTERNAL:
      code = absl::StatusCode::kInternal;
      break;
    case grpc::StatusCode::UNAVAILABLE:
      code = absl::StatusCode::kUnavailable;
      break;
    case grpc::StatusCode::DATA_LOSS:
      code = absl::StatusCode::kDataLoss;
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      code = absl::StatusCode::kUnauthenticated;
      break;
    default:
      code = absl::StatusCode::kUnknown;
      break;
  }
  // An error without text (gRPC's own UNIMPLEMENTED, say) would print as
  // nothing at all.
  return absl::Status(code, status.error_message().empty()
                                ? absl::StrCat(absl::StatusCodeToString(code),
                                               " (no message from the daemon)")
                                : status.error_message());
}

pb::TensorRef InlineTensor(std::string bytes) {
  pb::TensorRef ref;
  ref.set_inline_data(std::move(bytes));
  return ref;
}

pb::TensorRef BufferTensor(absl::string_view buffer_id, int64_t offset_bytes) {
  pb::TensorRef ref;
  ref.mutable_buffer()->set_buffer_id(std::string(buffer_id));
  ref.mutable_buffer()->set_offset_bytes(offset_bytes);
  return ref;
}

pb::TensorRef IpcTensor(std::string handle, int32_t device_ordinal, int64_t offset_bytes) {
  pb::TensorRef ref;
  ref.mutable_cuda_ipc()->set_handle(std::move(handle));
  ref.mutable_cuda_ipc()->set_device_ordinal(device_ordinal);
  ref.mutable_cuda_ipc()->set_offset_bytes(offset_bytes);
  return ref;
}

pb::OutputRef InlineOutput() {
  pb::OutputRef ref;
  ref.set_return_inline(true);
  return ref;
}

pb::OutputRef BufferOutput(absl::string_view buffer_id, int64_t offset_bytes) {
  pb::OutputRef ref;
  ref.mutable_buffer()->set_buffer_id(std::string(buffer_id));
  ref.mutable_buffer()->set_offset_bytes(offset_bytes);
  return ref;
}

pb::OutputRef IpcOutput(std::string handle, int32_t device_ordinal, int64_t offset_bytes) {
  pb::OutputRef ref;
  ref.mutable_cuda_ipc()->set_handle(std::move(handle));
  ref.mutable_cuda_ipc()->set_device_ordinal(device_ordinal);
  ref.mutable_cuda_ipc()->set_offset_bytes(offset_bytes);
  return ref;
}

namespace {

// A quantizing norm's Quantization: the dynamic scales go where row_scale
// says (unset: inline).
pb::Quantization MakeQuantization(const RunArgs& args) {
  pb::Quantization quant;
  quant.set_dtype(args.quant_dtype);
  quant.set_scale_mode(args.scale_mode);
  quant.set_group_size(args.group_size);
  quant.set_scale_ub(args.scale_ub);
  if (args.quant_scale) *quant.mutable_scale() = *args.quant_scale;
  if (args.row_scale) *quant.mutable_scales() = *args.row_scale;
  return quant;
}

}  // namespace

pb::RunRequest MakeRunRequest(const RunArgs& args) {
  pb::RunRequest request;
  request.set_op(args.op);
  request.set_dtype(args.dtype);
  request.mutable_shape()->set_rows(args.rows);
  request.mutable_shape()->set_cols(args.cols);
  if (args.inner != 1) request.mutable_shape()->set_inner(args.inner);
  *request.mutable_input() = args.input;
  *request.mutable_output() = args.output;
  if (args.row_strides) *request.mutable_row_strides() = *args.row_strides;
  switch (args.op) {
    case pb::OP_LAYER_NORM:
    case pb::OP_ADD_LAYER_NORM:
    case pb::OP_LAYER_NORM_QUANT:
    case pb::OP_ADD_LAYER_NORM_QUANT: {
      pb::LayerNormParams* params = request.mutable_layer_norm();
      if (args.gamma) *params->mutable_gamma() = *args.gamma;
      if (args.beta) *params->mutable_beta() = *args.beta;
      params->set_epsilon(args.epsilon);
      params->set_want_mean_inv_std(args.want_mean_inv_std);
      if (args.mean) *params->mutable_mean() = *args.mean;
      if (args.inv_std) *params->mutable_inv_std() = *args.inv_std;
      if (args.residual) *params->mutable_residual() = *args.residual;
      if (args.op == pb::OP_LAYER_NORM_QUANT || args.op == pb::OP_ADD_LAYER_NORM_QUANT) {
        *params->mutable_quant() = MakeQuantization(args);
      }
      break;
    }
    case pb::OP_RMS_NORM:
    case pb::OP_ADD_RMS_NORM:
    case pb::OP_RMS_NORM_QUANT:
    case pb::OP_ADD_RMS_NORM_QUANT: {
      pb::RmsNormParams* params = request.mutable_rms_norm();
      if (args.gamma) *params->mutable_weight() = *args.gamma;
      params->set_epsilon(args.epsilon);
      params->set_want_inv_rms(args.want_inv_rms);
      if (args.inv_std) *params->mutable_inv_rms() = *args.inv_std;
      if (args.residual) *params->mutable_residual() = *args.residual;
      params->set_weight_offset(args.weight_offset);
      if (args.op == pb::OP_RMS_NORM_QUANT || args.op == pb::OP_ADD_RMS_NORM_QUANT) {
        *params->mutable_quant() = MakeQuantization(args);
      }
      break;
    }
    case pb::OP_REDUCE_SCALE:
      if (args.row_scale) *request.mutable_reduce_scale()->mutable_row_scale() = *args.row_scale;
      break;
    case pb::OP_SCALED_MASKED_SOFTMAX: {
      pb::ScaledMaskedSoftmaxParams* params = request.mutable_scaled_masked_softmax();
      if (args.scale) params->set_scale(*args.scale);
      if (args.mask) *params->mutable_mask() = *args.mask;
      params->set_mask_rows(args.mask_rows);
      params->set_causal(args.causal);
      break;
    }
    default:
      break;
  }
  request.set_wait_event(args.wait_event);
  request.set_done_event(args.done_event);
  request.set_time_kernel(args.time_kernel);
  request.set_device(args.device);
  return request;
}

absl::StatusOr<int32_t> DaemonOrdinalForUuid(const pb::GetStatusResponse& status,
                                             absl::string_view uuid, int32_t fallback) {
  if (uuid.empty()) return fallback;
  bool any_uuid = false;
  std::vector<std::string> seen;
  for (const pb::Device& device : status.devices()) {
    if (device.uuid().empty()) continue;
    any_uuid = true;
    // nvidia-smi prints lower case; compare without regard to case.
    if (absl::EqualsIgnoreCase(device.uuid(), uuid)) return device.ordinal();
    seen.push_back(absl::StrCat(device.ordinal(), "=", device.uuid()));
  }
  if (!any_uuid) return fallback;
  return absl::FailedPreconditionError(
      absl::StrCat("the daemon does not see this process's GPU ", uuid, " (it sees ",
                   absl::StrJoin(seen, ", "), "); start it with a CUDA_VISIBLE_DEVICES that "
                   "includes this GPU"));
}

RegisteredBuffer::RegisteredBuffer(RegisteredBuffer&& other) noexcept
    : connection_(std::move(other.connection_)),
      deadline_(other.deadline_),
      info_(std::move(other.info_)) {
  other.connection_.reset();
}

RegisteredBuffer& RegisteredBuffer::operator=(RegisteredBuffer&& other) noexcept {
  if (this != &other) {
    if (valid()) Unregister().IgnoreError();
    connection_ = std::move(other.connection_);
    other.connection_.reset();
    deadline_ = other.deadline_;
    info_ = std::move(other.info_);
  }
  return *this;
}

RegisteredBuffer::~RegisteredBuffer() {
  if (!valid()) return;
  if (const absl::Status status = Unregister(); !status.ok()) {
    // No caller to return to; the lease or our exit ends it anyway.
    std::fprintf(stderr, "kerntune client: buffer %s stays registered until its lease ends: %s\n",
                 info_.buffer_id().c_str(), status.ToString().c_str());
  }
}

absl::Status RegisteredBuffer::Unregister() {
  if (!valid()) return absl::FailedPreconditionError("no registration held");
  const std::shared_ptr<const Connection> connection = std::move(connection_);
  connection_.reset();
  return UnregisterById(*connection, deadline_, info_.buffer_id());
}

std::string RegisteredBuffer::Release() {
  connection_.reset();
  return info_.buffer_id();
}

absl::StatusOr<DaemonClient> DaemonClient::Connect(const DaemonClientOptions& options) {
  absl::StatusOr<std::string> target = ResolveTarget(options.target);
  if (!target.ok()) return target.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(*target, options.tcp);
  if (!credentials.ok()) return credentials.status();
  auto connection = std::make_shared<Connection>();
  connection->target = *target;
  connection->wait_for_ready = options.wait_for_ready;
  connection->use_queue = options.use_queue && IsUnixTarget(*target);
  grpc::ChannelArguments args;
  // After the daemon went away, gRPC retries the connection after
  // kReconnectInitialMs, then 1.6 times later each time, at most
  // kReconnectMaxMs apart. gRPC's defaults (1 s growing to 120 s) left a
  // client of a daemon restarted after a 30 s outage failing for 20 s more;
  // a retry is one connect() (or TCP handshake), nothing to a daemon.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectInitialMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectMaxMs);
  // Inline outputs are as large as the inputs the daemon accepts
  // (--max_request_bytes, 256 MiB by default); gRPC's 4 MiB default would
  // refuse them.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  connection->channel = grpc::CreateCustomChannel(*target, *credentials, args);
  connection->stub = pb::KernTune::NewStub(connection->channel);
  return DaemonClient(std::move(connection), options.deadline);
}

DaemonClient DaemonClient::WithDeadline(absl::Duration deadline) const {
  return DaemonClient(connection_, deadline);
}

const std::string& DaemonClient::target() const { return connection_->target; }

absl::StatusOr<pb::RunResponse> DaemonClient::Run(const pb::RunRequest& request) const {
  if (Connection::QueueLease lease = connection_->LeaseQueue(request, deadline_); lease.queue) {
    RunQueueClient::Outcome outcome = lease.queue->Run(request, deadline_);
    connection_->ReturnQueue(lease);
    if (outcome.submitted) {
      if (!outcome.response.ok()) {
        return InContext("Run", connection_->target, outcome.response.status());
      }
      return *std::move(outcome.response);
    }
    // Never reached the daemon (the queue closed): gRPC is as good.
  }
  return Call(*connection_, deadline_, "Run", &pb::KernTune::Stub::Run, request);
}

absl::StatusOr<pb::ConfigChoice> DaemonClient::GetConfig(pb::Op op, pb::DType dtype, int64_t rows,
                                                         int64_t cols, int64_t inner,
                                                         absl::string_view device) const {
  pb::GetConfigRequest request;
  request.set_op(op);
  request.set_dtype(dtype);
  request.mutable_shape()->set_rows(rows);
  request.mutable_shape()->set_cols(cols);
  if (inner != 1) request.mutable_shape()->set_inner(inner);
  request.set_device(std::string(device));
  absl::StatusOr<pb::GetConfigResponse> response =
      Call(*connection_, deadline_, "GetConfig", &pb::KernTune::Stub::GetConfig, request);
  if (!response.ok()) return response.status();
  return response->config();
}

absl::StatusOr<pb::ListConfigsResponse> DaemonClient::ListConfigs(
    absl::string_view device) const {
  pb::ListConfigsRequest request;
  request.set_device(std::string(device));
  return Call(*connection_, deadline_, "ListConfigs", &pb::KernTune::Stub::ListConfigs,
              request);
}

absl::StatusOr<pb::GetStatusResponse> DaemonClient::GetStatus() const {
  return Call(*connection_, deadline_, "GetStatus", &pb::KernTune::Stub::GetStatus,
              pb::GetStatusRequest());
}

absl::StatusOr<pb::ListServedShapesResponse> DaemonClient::ListServedShapes() const {
  return Call(*connection_, deadline_, "ListServedShapes", &pb::KernTune::Stub::ListServedShapes,
              pb::ListServedShapesRequest());
}

absl::StatusOr<int32_t> DaemonClient::DeviceOrdinalFor(absl::string_view uuid,
                                                        int32_t fallback) const {
  if (uuid.empty()) return fallback;
  absl::StatusOr<pb::GetStatusResponse> status = GetStatus();
  if (!status.ok()) return status.status();
  return DaemonOrdinalForUuid(*status, uuid, fallback);
}

absl::StatusOr<std::vector<pb::BufferInfo>> DaemonClient::ListBuffers() const {
  absl::StatusOr<pb::ListBuffersResponse> response =
      Call(*connection_, deadline_, "ListBuffers", &pb::KernTune::Stub::ListBuffers,
           pb::ListBuffersRequest());
  if (!response.ok()) return response.status();
  return std::vector<pb::BufferInfo>(response->buffers().begin(), response->buffers().end());
}

absl::StatusOr<RegisteredBuffer> DaemonClient::Register(
    const pb::RegisterBufferRequest& request) const {
  absl::StatusOr<pb::RegisterBufferResponse> response = Call(
      *connection_, deadline_, "RegisterBuffer", &pb::KernTune::Stub::RegisterBuffer, request);
  if (!response.ok()) return response.status();
  return RegisteredBuffer(connection_, deadline_, response->buffer());
}

absl::StatusOr<RegisteredBuffer> DaemonClient::RegisterCudaIpc(std::string handle,
                                                               int32_t device_ordinal,
                                                               int64_t size_bytes,
                                                               int64_t ttl_seconds,
                                                               absl::string_view label) const {
  pb::RegisterBufferRequest request;
  request.mutable_cuda_ipc()->set_handle(std::move(handle));
  request.mutable_cuda_ipc()->set_device_ordinal(device_ordinal);
  request.set_size_bytes(size_bytes);
  request.set_ttl_seconds(ttl_seconds);
  request.set_label(std::string(label));
  return Register(request);
}

absl::StatusOr<RegisteredBuffer> DaemonClient::RegisterHostShm(absl::string_view name,
                                                               int64_t size_bytes,
                                                               int64_t ttl_seconds,
                                                               absl::string_view label) const {
  pb::RegisterBufferRequest request;
  request.mutable_host_shm()->set_name(std::string(name));
  request.set_size_bytes(size_bytes);
  request.set_ttl_seconds(ttl_seconds);
  request.set_label(std::string(label));
  return Register(request);
}

absl::Status DaemonClient::Unregister(absl::string_view buffer_id) const {
  return UnregisterById(*connection_, deadline_, buffer_id);
}

}  // namespace kt::client
