// KernTune service handlers (see service.h).
#include "server/service.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/version.h"
#include "proto/convert.h"
#include "server/log.h"
#include "server/run_request.h"
#include "server/stage_clock.h"
#include "tuner/backend.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

// server/CMakeLists.txt passes the project's version.
#ifdef KT_PROJECT_VERSION
constexpr char kProjectVersion[] = KT_PROJECT_VERSION;
#else
constexpr char kProjectVersion[] = "unknown";
#endif

grpc::Status ShuttingDown() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "kerntuned is shutting down");
}

// A missing choice means the CPU reference ran: no lookup, no config.
pb::ConfigChoice ChoiceToProto(const std::optional<tuner::ConfigChoice>& choice) {
  if (choice) return proto::ConfigChoiceToProto(*choice);
  pb::ConfigChoice cpu;
  cpu.set_source(pb::CONFIG_SOURCE_CPU_REFERENCE);
  return cpu;
}

// The outputs a Run returned inline, into the response's fields: the
// output's bytes, and each per-row output's float32 values.
void InlineOutputsToProto(RunResult& result, pb::RunResponse* response) {
  *response->mutable_output_data() =
      std::move(result.inline_output(kernels::Operand::kOutput));
  const std::pair<kernels::Operand, google::protobuf::RepeatedField<float>*> row_stats[] = {
      {kernels::Operand::kMean, response->mutable_mean()},
      {kernels::Operand::kInvStd, response->mutable_inv_std()},
      {kernels::Operand::kRowScale, response->mutable_row_scale()}};
  for (const auto& [operand, field] : row_stats) {
    const std::string& bytes = result.inline_output(operand);
    if (bytes.empty()) continue;
    field->Resize(static_cast<int>(bytes.size() / sizeof(float)), 0.0f);
    std::memcpy(field->mutable_data(), bytes.data(), bytes.size());
  }
}

// A Run's result into its response: the outputs returned inline, the config
// and its source, the kernel time and where the backend spent the Run.
void RunResultToProto(RunResult& result, const std::string& backend, pb::RunResponse* response) {
  InlineOutputsToProto(result, response);
  *response->mutable_config() = ChoiceToProto(result.config);
  response->set_kernel_time_us(result.kernel_time_us);
  response->set_backend(backend);
  pb::RunTiming* timing = response->mutable_server_timing();
  timing->set_lane_wait_us(result.timing.lane_wait_us);
  timing->set_launch_us(result.timing.launch_us);
  timing->set_gpu_wait_us(result.timing.gpu_wait_us);
  timing->set_lookup_us(result.timing.lookup_us);
  timing->set_timing_events_us(result.timing.timing_events_us);
  timing->set_kernel_launch_us(result.timing.kernel_launch_us);
}

// What GetStatus says of the configs: the local and shipped entries served,
// the files they came from, the stale ones left out.
void ConfigsToProto(const ConfigCache& cache, const std::vector<std::string>& shipped_files,
                    pb::GetStatusResponse* response) {
  response->set_tuned_entries(cache.local_entries());
  response->set_database_data_version(cache.data_version());
  response->set_shipped_entries(cache.shipped_entries());
  response->set_stale_entries_skipped(cache.stale().total());
  for (const std::string& file : shipped_files) response->add_shipped_config_files(file);
}

void StatsToProto(const BackendStats& backend, const RunCounters::Totals& runs,
                  pb::DaemonStats* out) {
  out->set_kernels_timed(backend.kernels_timed);
  out->set_kernel_us(backend.kernel_us);
  out->set_runs(runs.runs);
  out->set_runs_answered_early(runs.answered_early);
  out->set_handler_us(runs.handler_us);
}

// RegisterBuffer's own fields (the memory is checked as it is opened).
absl::Status ValidateRegisterBuffer(const pb::RegisterBufferRequest& request) {
  if (request.size_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("size_bytes=", request.size_bytes(),
                                                   " must be >= 0 (0 = all of it)"));
  }
  if (request.ttl_seconds() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl_seconds=", request.ttl_seconds(), " must be >= 0 (0 = the default)"));
  }
  if (request.label().size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("label has ", request.label().size(), " bytes; at most 256"));
  }
  return absl::OkStatus();
}

void BufferToProto(const Registration& registration, pb::BufferInfo* out) {
  out->set_buffer_id(registration.id);
  out->set_kind(registration.kind == BufferKind::kCudaIpc ? pb::BUFFER_KIND_CUDA_IPC
                                                          : pb::BUFFER_KIND_HOST_SHM);
  out->set_device_ordinal(registration.kind == BufferKind::kCudaIpc
                              ? registration.memory->device()
                              : 0);
  out->set_size_bytes(registration.size_bytes);
  out->set_label(registration.label);
  out->set_ttl_seconds(absl::ToInt64Seconds(registration.ttl));
  out->set_registered_unix_ms(absl::ToUnixMillis(registration.registered));
  out->set_expires_unix_ms(absl::ToUnixMillis(registration.last_used + registration.ttl));
  out->set_runs(registration.runs);
}

}  // namespace

// Logs a failed request at the edge, naming its caller by process, and
// converts its status.
grpc::Status KernTuneService::Fail(absl::string_view rpc, absl::string_view peer,
                                   const absl::Status& status) {
  request_log_.Failed(rpc, DescribeCaller(peer, Caller(peer)), status, absl::Now());
  return ToGrpcStatus(status);
}

KernTuneService::KernTuneService(Backend& backend, ServiceOptions options)
    : backend_(backend), options_(std::move(options)), started_(absl::Now()) {}

KernTuneService::~KernTuneService() { CloseClientMemory(); }

bool KernTuneService::Drain(absl::Duration timeout) { return drain_.Drain(timeout); }

grpc::Status ToGrpcStatus(const absl::Status& status) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return grpc::Status::OK;
    case absl::StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case absl::StatusCode::kUnknown:
      code = grpc::StatusCode::UNKNOWN;
      break;
    case absl::StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case absl::StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case absl::StatusCode::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case absl::StatusCode::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case absl::StatusCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case absl::StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case absl::StatusCode::kAborted:
      code = grpc::StatusCode::ABORTED;
      break;
    case absl::StatusCode::kOutOfRange:
      code = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case absl::StatusCode::kUnimplemented:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case absl::StatusCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
    case absl::StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case absl::StatusCode::kDataLoss:
      code = grpc::StatusCode::DATA_LOSS;
      break;
    case absl::StatusCode::kUnauthenticated:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    default:
      code = grpc::StatusCode::UNKNOWN;
      break;
  }
  return grpc::Status(code, std::string(status.message()));
}

std::optional<PeerProcess> KernTuneService::Caller(absl::string_view peer) const {
  if (!options_.identify_caller) return std::nullopt;
  return options_.identify_caller(peer);
}

bool RunsOnGrpcThread(const pb::RunRequest& request) {
  const pb::Shape& shape = request.shape();
  int64_t elements = 1;
  for (int64_t extent : {shape.rows(), shape.cols(), std::max<int64_t>(shape.inner(), 1)}) {
    if (extent <= 0) return true;  // refused by validation, at once
    if (__builtin_mul_overflow(elements, extent, &elements)) return false;
  }
  return elements <= kMaxGrpcThreadRunElements;
}

template <class Request, class Response>
grpc::ServerUnaryReactor* KernTuneService::Answer(grpc::CallbackServerContext* context,
                                                  bool on_worker, Handler<Request, Response> handle,
                                                  const Request* request, Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!on_worker) {
    reactor->Finish((this->*handle)(context->peer(), request, response));
    return reactor;
  }
  // The request and response stay alive until Finish.
  workers_.Submit([this, reactor, peer = context->peer(), handle, request, response] {
    reactor->Finish((this->*handle)(peer, request, response));
  });
  return reactor;
}

grpc::ServerUnaryReactor* KernTuneService::Run(grpc::CallbackServerContext* context,
                                               const pb::RunRequest* request,
                                               pb::RunResponse* response) {
  return Answer(context, !RunsOnGrpcThread(*request), &KernTuneService::HandleRun, request,
                response);
}

grpc::ServerUnaryReactor* KernTuneService::GetConfig(grpc::CallbackServerContext* context,
                                                     const pb::GetConfigRequest* request,
                                                     pb::GetConfigResponse* response) {
  return Answer(context, false, &KernTuneService::HandleGetConfig, request, response);
}

grpc::ServerUnaryReactor* KernTuneService::ListConfigs(grpc::CallbackServerContext* context,
                                                       const pb::ListConfigsRequest* request,
                                                       pb::ListConfigsResponse* response) {
  return Answer(context, false, &KernTuneService::HandleListConfigs, request, response);
}

grpc::ServerUnaryReactor* KernTuneService::GetStatus(grpc::CallbackServerContext* context,
                                                     const pb::GetStatusRequest* request,
                                                     pb::GetStatusResponse* response) {
  return Answer(context, false, &KernTuneService::HandleGetStatus, request, response);
}

// Opening an IPC handle can take milliseconds: a worker does it.
grpc::ServerUnaryReactor* KernTuneService::RegisterBuffer(
    grpc::CallbackServerContext* context, const pb::RegisterBufferRequest* request,
    pb::RegisterBufferResponse* response) {
  return Answer(context, true, &KernTuneService::HandleRegisterBuffer, request, response);
}

grpc::ServerUnaryReactor* KernTuneService::UnregisterBuffer(
    grpc::CallbackServerContext* context, const pb::UnregisterBufferRequest* request,
    pb::UnregisterBufferResponse* response) {
  return Answer(context, false, &KernTuneService::HandleUnregisterBuffer, request, response);
}

grpc::ServerUnaryReactor* KernTuneService::ListBuffers(grpc::CallbackServerContext* context,
                                                       const pb::ListBuffersRequest* request,
                                                       pb::ListBuffersResponse* response) {
  return Answer(context, false, &KernTuneService::HandleListBuffers, request, response);
}

absl::StatusOr<RunResult> KernTuneService::ValidateAndExecute(absl::string_view peer,
                                                              const pb::RunRequest& request,
                                                              pb::RunTiming& timing) {
  const StageClock::time_point start = StageClock::now();
  absl::StatusOr<RunRequest> run = ValidateRunRequest(request, options_.max_request_bytes);
  if (!run.ok()) return run.status();
  const StageClock::time_point validated = StageClock::now();
  run->caller = Caller(peer);
  ClientTensorResolver resolver(registry_, cuda_ipc_, run->caller);
  if (absl::Status s = ResolveTensorRefs(request, resolver, *run); !s.ok()) return s;
  const StageClock::time_point resolved = StageClock::now();
  absl::StatusOr<RunResult> result = backend_.Execute(*run);
  timing.set_validate_us(MicrosSince(start, validated));
  timing.set_resolve_us(MicrosSince(validated, resolved));
  timing.set_execute_us(MicrosSince(resolved, StageClock::now()));
  return result;
}

grpc::Status KernTuneService::HandleRun(absl::string_view peer, const pb::RunRequest* request,
                                        pb::RunResponse* response) {
  const StageClock::time_point start = StageClock::now();
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  absl::StatusOr<RunResult> result =
      ValidateAndExecute(peer, *request, *response->mutable_server_timing());
  if (!result.ok()) return Fail("Run", peer, result.status());
  RunResultToProto(*result, backend_.name(), response);
  const double handler_us = MicrosSince(start, StageClock::now());
  response->mutable_server_timing()->set_handler_us(handler_us);
  run_counters_.Count(handler_us, result->answered_early);
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleGetConfig(absl::string_view peer,
                                              const pb::GetConfigRequest* request,
                                              pb::GetConfigResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  absl::StatusOr<kernels::Op> op = proto::OpFromProto(request->op(), "op");
  if (!op.ok()) return Fail("GetConfig", peer, op.status());
  absl::StatusOr<kernels::DType> dtype = proto::DTypeFromProto(request->dtype(), "dtype");
  if (!dtype.ok()) return Fail("GetConfig", peer, dtype.status());
  absl::StatusOr<kernels::Shape> shape = proto::ShapeFromProto(request->shape(), *op, *dtype);
  if (!shape.ok()) return Fail("GetConfig", peer, shape.status());
  const ConfigCache* cache = backend_.config_cache();
  if (cache == nullptr) {
    *response->mutable_config() = ChoiceToProto(std::nullopt);
    return grpc::Status::OK;
  }
  absl::StatusOr<tuner::ConfigChoice> choice = cache->Lookup(*op, *dtype, *shape);
  if (!choice.ok()) return Fail("GetConfig", peer, choice.status());
  *response->mutable_config() = ChoiceToProto(*choice);
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleListConfigs(absl::string_view peer,
                                                const pb::ListConfigsRequest* request,
                                                pb::ListConfigsResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  const ConfigCache* cache = backend_.config_cache();
  if (cache == nullptr) return grpc::Status::OK;  // the CPU reference uses no configs
  *response->mutable_sku() = proto::SkuToProto(cache->sku());
  for (const tuner::TunedEntry& entry : cache->Entries()) {
    *response->add_entries() = proto::TunedEntryToProto(entry);
  }
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleGetStatus(absl::string_view peer,
                                              const pb::GetStatusRequest* request,
                                              pb::GetStatusResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  response->set_version(kProjectVersion);
  response->set_kernel_library_version(kernels::kKernelLibraryVersion);
  response->set_backend(backend_.name());
  response->set_backend_reason(options_.backend_reason);
  response->set_backend_note(backend_.note());
  for (const BackendDevice& device : backend_.devices()) {
    pb::Device* out = response->add_devices();
    out->set_ordinal(device.info.ordinal);
    *out->mutable_sku() = proto::SkuToProto(tuner::SkuOf(device.info));
    out->set_uuid(device.identity.uuid);
    out->set_pci_bus_id(device.identity.pci_bus_id);
  }
  response->set_database_path(options_.database_path);
  if (const ConfigCache* cache = backend_.config_cache(); cache != nullptr) {
    ConfigsToProto(*cache, options_.shipped_config_files, response);
  }
  response->set_uptime_seconds(absl::ToInt64Seconds(absl::Now() - started_));
  const BufferRegistry::Totals totals = registry_.totals();
  response->set_registered_buffers(totals.buffers);
  response->set_registered_bytes(totals.bytes);
  response->set_buffer_owners(totals.owners);
  response->set_open_ipc_mappings(static_cast<int64_t>(cuda_ipc_.size()));
  response->set_default_buffer_ttl_seconds(absl::ToInt64Seconds(options_.registry.default_ttl));
  response->set_max_request_bytes(options_.max_request_bytes);
  response->set_cuda_ipc_supported(backend_.supports_cuda_ipc());
  StatsToProto(backend_.stats(), run_counters_.totals(), response->mutable_stats());
  return grpc::Status::OK;
}

absl::StatusOr<std::shared_ptr<const ClientMemory>> KernTuneService::OpenRegisteredMemory(
    const pb::RegisterBufferRequest& request, const PeerProcess& caller) {
  switch (request.memory_case()) {
    case pb::RegisterBufferRequest::kCudaIpc:
      if (request.cuda_ipc().handle().size() != kCudaIpcHandleBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda_ipc.handle has ", request.cuda_ipc().handle().size(), " bytes, want exactly ",
            kCudaIpcHandleBytes, " (a cudaIpcMemHandle_t)"));
      }
      return cuda_ipc_.Open(request.cuda_ipc().handle(), request.cuda_ipc().device_ordinal(),
                            caller);
    case pb::RegisterBufferRequest::kHostShm:
      return OpenHostSharedMemory(request.host_shm().name(), caller.uid);
    case pb::RegisterBufferRequest::MEMORY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("memory is not set: give cuda_ipc or host_shm");
}

grpc::Status KernTuneService::HandleRegisterBuffer(absl::string_view peer,
                                                   const pb::RegisterBufferRequest* request,
                                                   pb::RegisterBufferResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  const std::optional<PeerProcess> caller = Caller(peer);
  if (!caller) return Fail("RegisterBuffer", peer, NeedsUnixSocket("RegisterBuffer"));
  if (absl::Status s = ValidateRegisterBuffer(*request); !s.ok()) {
    return Fail("RegisterBuffer", peer, s);
  }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> memory =
      OpenRegisteredMemory(*request, *caller);
  if (!memory.ok()) return Fail("RegisterBuffer", peer, memory.status());
  const BufferKind kind = request->has_cuda_ipc() ? BufferKind::kCudaIpc : BufferKind::kHostShm;
  absl::StatusOr<Registration> registration = registry_.Register(
      *caller, kind, *std::move(memory), request->size_bytes(),
      absl::Seconds(request->ttl_seconds()), request->label(), absl::Now());
  if (!registration.ok()) return Fail("RegisterBuffer", peer, registration.status());
  BufferToProto(*registration, response->mutable_buffer());
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleUnregisterBuffer(absl::string_view peer,
                                                     const pb::UnregisterBufferRequest* request,
                                                     pb::UnregisterBufferResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  const std::optional<PeerProcess> caller = Caller(peer);
  if (!caller) return Fail("UnregisterBuffer", peer, NeedsUnixSocket("UnregisterBuffer"));
  const absl::Status status = registry_.Unregister(*caller, request->buffer_id());
  if (!status.ok()) return Fail("UnregisterBuffer", peer, status);
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleListBuffers(absl::string_view peer,
                                                const pb::ListBuffersRequest* request,
                                                pb::ListBuffersResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  const std::optional<PeerProcess> caller = Caller(peer);
  if (!caller) return Fail("ListBuffers", peer, NeedsUnixSocket("ListBuffers"));
  for (const Registration& registration : registry_.List(*caller)) {
    BufferToProto(registration, response->add_buffers());
  }
  return grpc::Status::OK;
}

void KernTuneService::Housekeep(absl::Time now) {
  const BufferRegistry::Reaped reaped = registry_.Reap(now, IsAlive);
  const int evicted = cuda_ipc_.Evict(now, IsAlive);
  backend_.Housekeep(now, IsAlive);
  if (reaped.expired + reaped.owner_exited + evicted > 0) {
    LogInfo(absl::StrFormat(
        "ended %d registrations past their lease and %d of exited processes; closed %d idle "
        "CUDA IPC mappings",
        reaped.expired, reaped.owner_exited, evicted));
  }
  request_log_.Flush(now);
}

void KernTuneService::CloseClientMemory() {
  registry_.Clear();
  cuda_ipc_.Clear();
}

}  // namespace kt::server
