// KernTune service handlers (see service.h).
#include "server/service.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/version.h"
#include "proto/convert.h"
#include "server/log.h"
#include "server/run_request.h"
#include "server/served_shapes.h"
#include "server/stage_clock.h"
#include "tuner/backend.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

// RunLabels.path of each way a Run comes.
constexpr char kGrpcPath[] = "grpc";
constexpr char kQueuePath[] = "queue";

// A queue carries references to client memory only: an inline tensor
// cannot fit a descriptor and an output returned inline has nowhere to go.
absl::Status RefuseInlineTensors(const RunRequest& run) {
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (run.tensor(operand).where != TensorView::Where::kInline) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        kernels::OperandName(operand), " is ",
        kernels::IsOutput(operand) ? "returned inline" : "inline",
        "; a queue carries tensors in client memory only (buffers or CUDA IPC): send this Run "
        "over gRPC"));
  }
  return absl::OkStatus();
}

// Stage one's first part, the request on its own: ValidateRunRequest and,
// for a Run that came through a queue (`path`), the queue's rule.
absl::StatusOr<RunRequest> ValidateRun(const pb::RunRequest& request, int64_t max_request_bytes,
                                       const char* path) {
  absl::StatusOr<RunRequest> run = ValidateRunRequest(request, max_request_bytes);
  if (run.ok() && path == kQueuePath) {
    if (absl::Status s = RefuseInlineTensors(*run); !s.ok()) return s;
  }
  return run;
}

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
  if (result.inline_outputs.empty()) return;
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

// The fields of a Run's response that every Run of its point on its device
// repeats: the config and its source, the backend and the device.
void PointToProto(const RunResult& result, const std::string& backend,
                  pb::RunResponse* response) {
  *response->mutable_config() = ChoiceToProto(result.config);
  response->set_backend(backend);
  response->set_device_ordinal(result.device_ordinal);
  response->set_device_uuid(result.device_uuid.data(), result.device_uuid.size());
}

// Whether two choices give the same ConfigChoiceToProto.
bool SameChoiceFields(const std::optional<tuner::ConfigChoice>& a,
                      const std::optional<tuner::ConfigChoice>& b) {
  if (!a || !b) return !a && !b;
  if (!(a->config == b->config) || a->source != b->source || !a->tuned != !b->tuned) return false;
  return !a->tuned || (a->tuned->shape == b->tuned->shape &&
                       a->tuned->median_us == b->tuned->median_us &&
                       a->tuned->origin == b->tuned->origin);
}

// PointToProto serialized, for a queued Run's completion: made again only
// when the thread's last answer was of another point, so that a client
// sending one Run again and again gets its config's fields copied, not
// built and serialized per Run (0.3-0.5 us of each answer on the lent H100
// hosts). The view stays valid until the thread's next call.
absl::string_view QueuedAnswerPrefix(const RunResult& result, const std::string& backend) {
  struct Memo {
    bool made = false;
    std::optional<tuner::ConfigChoice> config;
    std::string backend;
    int device_ordinal = -1;
    std::string device_uuid;
    std::string bytes;
  };
  thread_local Memo memo;
  if (!memo.made || memo.device_ordinal != result.device_ordinal ||
      memo.device_uuid != result.device_uuid || memo.backend != backend ||
      !SameChoiceFields(memo.config, result.config)) {
    pb::RunResponse point;
    PointToProto(result, backend, &point);
    memo = Memo{true, result.config, backend, result.device_ordinal,
                std::string(result.device_uuid), point.SerializeAsString()};
  }
  return memo.bytes;
}

// The fields of a Run's response that are its own: the outputs returned
// inline, the kernel time and where the backend spent the Run.
void RunResultToProto(RunResult& result, pb::RunResponse* response) {
  InlineOutputsToProto(result, response);
  response->set_kernel_time_us(result.kernel_time_us);
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
  response->set_database_problem(cache.store_problem());
  response->set_shipped_entries(cache.shipped_entries());
  response->set_stale_entries_skipped(cache.stale().total());
  for (const std::string& file : shipped_files) response->add_shipped_config_files(file);
}

void DeviceToProto(const BackendDevice& device, const BufferRegistry::Totals& buffers,
                   pb::Device* out) {
  out->set_ordinal(device.info.ordinal);
  *out->mutable_sku() = proto::SkuToProto(tuner::SkuOf(device.info));
  out->set_uuid(device.identity.uuid);
  out->set_pci_bus_id(device.identity.pci_bus_id);
  out->set_available(device.failure.empty());
  out->set_unavailable_reason(device.failure);
  if (device.config_cache != nullptr) {
    out->set_tuned_entries(device.config_cache->local_entries());
    out->set_shipped_entries(device.config_cache->shipped_entries());
    out->set_stale_entries_skipped(device.config_cache->stale().total());
  }
  out->set_registered_buffers(buffers.buffers);
  out->set_registered_bytes(buffers.bytes);
  out->set_runs(device.runs);
  out->set_runs_in_flight(device.runs_in_flight);
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

struct KernTuneService::PreparedRun {
  DrainGuard::Admission admission;
  StageClock::time_point start;
  const pb::RunRequest* request = nullptr;  // null: a descriptor that held none
  RunRequest run;
  bool validated = false;
  int device = -1;  // routed: an index below backend_.device_count()
  // Who sent it (the Unix socket's peer, or the queue's owner) and how.
  std::optional<PeerProcess> caller;
  const char* path = kGrpcPath;
};

KernTuneService::KernTuneService(Backend& backend, ServiceOptions options)
    : backend_(backend), options_(std::move(options)), started_(absl::Now()) {
  for (int device = 0; device < backend_.device_count(); ++device) {
    device_workers_.push_back(std::make_unique<WorkerPool>(options_.workers));
  }
}

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
  if (RunsOnGrpcThread(*request)) {
    return Answer(context, false, &KernTuneService::HandleRun, request, response);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Stage one on a shared worker (resolution may open an IPC handle), stage
  // two on the device's own workers. The request and response stay alive
  // until Finish.
  workers_.Submit([this, reactor, peer = context->peer(), request, response] {
    std::shared_ptr<PreparedRun> prepared(
        new PreparedRun{drain_.Admit(), StageClock::now(), request});
    if (!prepared->admission) return reactor->Finish(ShuttingDown());
    prepared->caller = Caller(peer);
    if (absl::Status s =
            Prepare(*request, ValidateRun(*request, options_.max_request_bytes, kGrpcPath),
                    *prepared, *response->mutable_server_timing());
        !s.ok()) {
      return reactor->Finish(RunAnswered(peer, *prepared, s, nullptr));
    }
    device_workers_[prepared->device]->Submit([this, reactor, peer, prepared, response] {
      Complete(peer, *prepared, response,
               [reactor](const grpc::Status& status, absl::string_view) {
                 reactor->Finish(status);
               });
    });
  });
  return reactor;
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

grpc::ServerUnaryReactor* KernTuneService::ListServedShapes(
    grpc::CallbackServerContext* context, const pb::ListServedShapesRequest* request,
    pb::ListServedShapesResponse* response) {
  return Answer(context, false, &KernTuneService::HandleListServedShapes, request, response);
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

grpc::ServerUnaryReactor* KernTuneService::OpenQueue(grpc::CallbackServerContext* context,
                                                     const pb::OpenQueueRequest* request,
                                                     pb::OpenQueueResponse* response) {
  return Answer(context, false, &KernTuneService::HandleOpenQueue, request, response);
}

grpc::ServerUnaryReactor* KernTuneService::CloseQueue(grpc::CallbackServerContext* context,
                                                      const pb::CloseQueueRequest* request,
                                                      pb::CloseQueueResponse* response) {
  return Answer(context, false, &KernTuneService::HandleCloseQueue, request, response);
}

absl::Status KernTuneService::Prepare(const pb::RunRequest& request,
                                      absl::StatusOr<RunRequest> validated, PreparedRun& prepared,
                                      pb::RunTiming& timing) {
  if (!validated.ok()) return validated.status();
  prepared.run = *std::move(validated);
  prepared.validated = true;
  const StageClock::time_point validated_at = StageClock::now();
  timing.set_validate_us(MicrosSince(prepared.start, validated_at));
  prepared.run.caller = prepared.caller;
  ClientTensorResolver resolver(registry_, cuda_ipc_, prepared.run.caller);
  if (absl::Status s = ResolveTensorRefs(request, resolver, prepared.run); !s.ok()) return s;
  absl::StatusOr<int> device = backend_.Route(prepared.run);
  if (!device.ok()) return device.status();
  prepared.device = *device;
  timing.set_resolve_us(MicrosSince(validated_at, StageClock::now()));
  return absl::OkStatus();
}

void KernTuneService::Complete(absl::string_view peer, PreparedRun& prepared,
                               pb::RunResponse* response, Deliver deliver) {
  const StageClock::time_point routed = StageClock::now();
  absl::StatusOr<RunResult> result = backend_.Execute(prepared.device, prepared.run);
  Respond(peer, prepared, routed, result, response, deliver);
}

void KernTuneService::Respond(absl::string_view peer, const PreparedRun& prepared,
                              StageClock::time_point routed, absl::StatusOr<RunResult>& result,
                              pb::RunResponse* response, Deliver deliver) {
  if (!result.ok()) return deliver(RunAnswered(peer, prepared, result.status(), nullptr), {});
  response->mutable_server_timing()->set_execute_us(MicrosSince(routed, StageClock::now()));
  absl::string_view prefix;
  if (prepared.path == kQueuePath) {
    prefix = QueuedAnswerPrefix(*result, backend_.name());
  } else {
    PointToProto(*result, backend_.name(), response);
  }
  RunResultToProto(*result, response);
  const double handler_us = MicrosSince(prepared.start, StageClock::now());
  response->mutable_server_timing()->set_handler_us(handler_us);
  // Counted before the answer leaves, so that GetStatus after it sees it.
  run_counters_.Count(handler_us, result->answered_early);
  deliver(grpc::Status::OK, prefix);
  // The request may be gone now; a validated Run's labels come from
  // `prepared.run`.
  RunAnswered(peer, prepared, absl::OkStatus(), &*result);
}

grpc::Status KernTuneService::RunAnswered(absl::string_view peer, const PreparedRun& prepared,
                                          const absl::Status& status, const RunResult* result) {
  if (options_.metrics != nullptr) {
    RunLabels labels;
    // A Run refused by validation still has an op and dtype when those two
    // fields were fine.
    labels.path = prepared.path;
    if (prepared.request != nullptr) {
      absl::StatusOr<kernels::Op> op = prepared.validated
                                           ? prepared.run.op
                                           : proto::OpFromProto(prepared.request->op(), "op");
      absl::StatusOr<kernels::DType> dtype =
          prepared.validated ? prepared.run.dtype
                             : proto::DTypeFromProto(prepared.request->dtype(), "dtype");
      if (op.ok()) labels.op = std::string(kernels::OpName(*op));
      if (dtype.ok()) labels.dtype = std::string(kernels::DTypeName(*dtype));
    }
    if (prepared.device >= 0) labels.device = backend_.device_label(prepared.device);
    double kernel_seconds = -1;
    if (result != nullptr && result->kernel_time_us > 0) {
      kernel_seconds = result->kernel_time_us * 1e-6;
    }
    options_.metrics->CountRun(labels, status.code(),
                               MicrosSince(prepared.start, StageClock::now()) * 1e-6,
                               kernel_seconds);
    if (result != nullptr && result->config) {
      options_.metrics->CountLookup(labels.device,
                                    tuner::ConfigSourceName(result->config->source));
    }
  }
  if (!status.ok()) return Fail("Run", peer, status);
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleRun(absl::string_view peer, const pb::RunRequest* request,
                                        pb::RunResponse* response) {
  PreparedRun prepared{drain_.Admit(), StageClock::now(), request};
  if (!prepared.admission) return ShuttingDown();
  prepared.caller = Caller(peer);
  if (absl::Status s =
          Prepare(*request, ValidateRun(*request, options_.max_request_bytes, kGrpcPath),
                  prepared, *response->mutable_server_timing());
      !s.ok()) {
    return RunAnswered(peer, prepared, s, nullptr);
  }
  grpc::Status answered;
  Complete(peer, prepared, response,
           [&answered](const grpc::Status& status, absl::string_view) { answered = status; });
  return answered;
}

std::unique_ptr<QueueStreams> KernTuneService::OpenStreams() {
  return std::make_unique<QueueStreams>(backend_);
}

void KernTuneService::RunQueued(const std::shared_ptr<RunQueue>& queue, RunQueue::Taken taken,
                                QueueStreams& streams) {
  // Held until the completion is written: the request, the Run between its
  // stages and its response.
  struct Queued {
    PreparedRun prepared;
    std::shared_ptr<const pb::RunRequest> request;
    pb::RunResponse response;
  };
  std::shared_ptr<Queued> queued(
      new Queued{PreparedRun{drain_.Admit(), StageClock::now(), nullptr}, {}, {}});
  PreparedRun& prepared = queued->prepared;
  prepared.caller = queue->owner();
  prepared.path = kQueuePath;
  const uint64_t tag = taken.tag;
  if (!prepared.admission) {
    return queue->Complete(tag, absl::UnavailableError("kerntuned is shutting down"), nullptr);
  }
  const std::string& peer = queue->Describe();  // lives as long as `queue`
  if (!taken.request.ok()) {
    RunAnswered(peer, prepared, taken.request.status(), nullptr);
    return queue->Complete(tag, taken.request.status(), nullptr);
  }
  queued->request = *std::move(taken.request);
  prepared.request = queued->request.get();
  pb::RunTiming& timing = *queued->response.mutable_server_timing();
  // A descriptor that repeats the queue's last one (the same parsed
  // request) reuses its validation; other bytes are validated and kept.
  absl::StatusOr<RunRequest> validated;
  if (const RunRequest* kept = queue->ValidatedRun(*queued->request); kept != nullptr) {
    validated = *kept;
    timing.set_repeated_descriptor(true);
  } else {
    validated = ValidateRun(*queued->request, options_.max_request_bytes, kQueuePath);
    if (validated.ok()) queue->KeepValidatedRun(queued->request, *validated);
  }
  if (absl::Status s = Prepare(*queued->request, std::move(validated), prepared, timing);
      !s.ok()) {
    RunAnswered(peer, prepared, s, nullptr);
    return queue->Complete(tag, s, nullptr);
  }
  auto answer = [queue, queued, tag](const grpc::Status& status, absl::string_view prefix) {
    // grpc and absl number their codes alike.
    queue->Complete(tag,
                    absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                 status.error_message()),
                    &queued->response, prefix);
  };
  // On the device's stream: the poller answers it once the GPU is done.
  RunStream::Done done = [this, answer, queue, queued, routed = StageClock::now()](
                             absl::StatusOr<RunResult> result) {
    Respond(queue->Describe(), queued->prepared, routed, result, &queued->response, answer);
  };
  const RunPriority priority =
      RunsOnGrpcThread(*queued->request) ? RunPriority::kHigh : RunPriority::kNormal;
  if (streams.Submit(prepared.device, priority, prepared.run, done)) return;
  // A backend without streams (the CPU): as a gRPC Run, small ones here, on
  // the poller's thread; large ones on their device's workers, so that a
  // long Run holds no other queue.
  auto complete = [this, answer, queue, queued] {
    Complete(queue->Describe(), queued->prepared, &queued->response, answer);
  };
  if (RunsOnGrpcThread(*queued->request)) return complete();
  device_workers_[prepared.device]->Submit(std::move(complete));
}

grpc::Status KernTuneService::HandleOpenQueue(absl::string_view peer,
                                              const pb::OpenQueueRequest* request,
                                              pb::OpenQueueResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  const std::optional<PeerProcess> caller = Caller(peer);
  // A queue carries memory references only.
  if (absl::Status s = MayOpenClientMemory(caller, "OpenQueue"); !s.ok()) {
    return Fail("OpenQueue", peer, s);
  }
  absl::StatusOr<std::shared_ptr<RunQueue>> queue = queues_.Open(*caller, request->entries());
  if (!queue.ok()) return Fail("OpenQueue", peer, queue.status());
  poller_.Wake();
  response->set_queue_id((*queue)->id());
  response->set_shm_name((*queue)->shm_name());
  response->set_region_bytes(static_cast<int64_t>((*queue)->region_bytes()));
  response->set_entries((*queue)->entries());
  response->set_layout_version(proto::queue::kQueueLayoutVersion);
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleCloseQueue(absl::string_view peer,
                                               const pb::CloseQueueRequest* request,
                                               pb::CloseQueueResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  const std::optional<PeerProcess> caller = Caller(peer);
  if (!caller) return Fail("CloseQueue", peer, NeedsUnixSocket("CloseQueue"));
  if (absl::Status s = queues_.Close(*caller, request->queue_id()); !s.ok()) {
    return Fail("CloseQueue", peer, s);
  }
  poller_.Wake();  // a sleeping poller holds the queue (its region, its fd) until it looks again
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
  absl::StatusOr<const ConfigCache*> cache = backend_.ConfigCacheFor(request->device());
  if (!cache.ok()) return Fail("GetConfig", peer, cache.status());
  if (*cache == nullptr) {
    *response->mutable_config() = ChoiceToProto(std::nullopt);
    return grpc::Status::OK;
  }
  absl::StatusOr<tuner::ConfigChoice> choice = (*cache)->Lookup(*op, *dtype, *shape);
  if (!choice.ok()) return Fail("GetConfig", peer, choice.status());
  *response->mutable_config() = ChoiceToProto(*choice);
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleListConfigs(absl::string_view peer,
                                                const pb::ListConfigsRequest* request,
                                                pb::ListConfigsResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  absl::StatusOr<const ConfigCache*> cache = backend_.ConfigCacheFor(request->device());
  if (!cache.ok()) return Fail("ListConfigs", peer, cache.status());
  if (*cache == nullptr) return grpc::Status::OK;  // the CPU reference uses no configs
  *response->mutable_sku() = proto::SkuToProto((*cache)->sku());
  for (const tuner::TunedEntry& entry : (*cache)->Entries()) {
    *response->add_entries() = proto::TunedEntryToProto(entry);
  }
  return grpc::Status::OK;
}

grpc::Status KernTuneService::HandleListServedShapes(absl::string_view peer,
                                                     const pb::ListServedShapesRequest* request,
                                                     pb::ListServedShapesResponse* response) {
  const DrainGuard::Admission admission = drain_.Admit();
  if (!admission) return ShuttingDown();
  // Devices of one SKU are one list: tuning is per SKU.
  std::vector<db::GpuSku> skus;
  std::vector<std::vector<ServedShape>> lists;
  for (const BackendDevice& device : backend_.devices()) {
    if (device.config_cache == nullptr) continue;
    const ConfigCache& cache = *device.config_cache;
    response->set_evicted(response->evicted() + cache.served_untuned().evicted());
    const size_t at = std::find(skus.begin(), skus.end(), cache.sku()) - skus.begin();
    if (at == skus.size()) {
      skus.push_back(cache.sku());
      lists.emplace_back();
    }
    for (const ServedShape& shape : cache.served_untuned().List()) lists[at].push_back(shape);
  }
  for (size_t i = 0; i < skus.size(); ++i) {
    for (const ServedShape& shape : MergeServedShapes(std::move(lists[i]))) {
      pb::ServedShape* out = response->add_shapes();
      *out->mutable_sku() = proto::SkuToProto(skus[i]);
      out->set_op(proto::OpToProto(shape.key.op));
      out->set_dtype(proto::DTypeToProto(shape.key.dtype));
      *out->mutable_shape() = proto::ShapeToProto(shape.key.shape);
      out->set_runs(shape.runs);
      out->set_first_seen_unix_ms(absl::ToUnixMillis(shape.first_seen));
      out->set_last_seen_unix_ms(absl::ToUnixMillis(shape.last_seen));
      out->set_source(proto::ConfigSourceToProto(shape.source));
    }
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
    DeviceToProto(device, registry_.totals_on(device.info.ordinal), response->add_devices());
  }
  response->set_database_path(options_.database_path);
  if (absl::StatusOr<const ConfigCache*> cache = backend_.ConfigCacheFor("");
      cache.ok() && *cache != nullptr) {
    ConfigsToProto(**cache, options_.shipped_config_files, response);
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
  response->set_open_queues(queues_.size());
  // host:bound port (--metrics_address may give port 0).
  if (options_.metrics != nullptr) response->set_metrics_address(options_.metrics->address());
  pb::IdleTuning* idle = response->mutable_idle_tuning();
  if (options_.idle_tuner != nullptr) {
    const IdleTuner::Status tuner = options_.idle_tuner->status();
    idle->set_enabled(true);
    idle->set_tuning(tuner.tuning);
    idle->set_paused(tuner.paused);
    idle->set_problems_tuned(tuner.problems_tuned);
    idle->set_problems_failed(tuner.problems_failed);
  }
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
  if (absl::Status s = MayOpenClientMemory(caller, "RegisterBuffer"); !s.ok()) {
    return Fail("RegisterBuffer", peer, s);
  }
  if (absl::Status s = ValidateRegisterBuffer(*request); !s.ok()) {
    return Fail("RegisterBuffer", peer, s);
  }
  if (absl::Status s = registry_.Admits(*caller); !s.ok()) return Fail("RegisterBuffer", peer, s);
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
  const uint64_t queues_before = queues_.generation();
  const int queues_reaped = queues_.Reap(IsAlive);
  // A poller asleep on its queues' doorbells looks at them once: a region
  // broken meanwhile (truncated) is closed, and reaped at the next sweep;
  // and it lets go of queues just removed, whose regions and descriptors
  // it holds until it looks again.
  if (queues_.size() > 0 || queues_.generation() != queues_before) poller_.Wake();
  if (queues_reaped > 0) {
    LogInfo(absl::StrFormat("closed %d queues of exited processes", queues_reaped));
  }
  const int evicted = cuda_ipc_.Evict(now, IsAlive);
  backend_.Housekeep(now, IsAlive);
  // Every pass: a registration racing the failure may land after the first.
  for (int device : backend_.failed_devices()) {
    const bool first = released_devices_.insert(device).second;
    const int released = registry_.ReleaseDevice(device);
    const int closed = cuda_ipc_.EvictDevice(device);
    if (options_.metrics != nullptr) options_.metrics->CountReaped("device_failed", released);
    if (!first && released + closed == 0) continue;
    LogWarning(absl::StrFormat(
        "released %d registrations and %d CUDA IPC mappings of failed CUDA device %d", released,
        closed, device));
  }
  if (options_.metrics != nullptr) {
    options_.metrics->CountReaped("expired", reaped.expired);
    options_.metrics->CountReaped("owner_exited", reaped.owner_exited);
    UpdateGauges();
  }
  if (reaped.expired + reaped.owner_exited + evicted > 0) {
    LogInfo(absl::StrFormat(
        "ended %d registrations past their lease and %d of exited processes; closed %d idle "
        "CUDA IPC mappings",
        reaped.expired, reaped.owner_exited, evicted));
  }
  request_log_.Flush(now);
}

void KernTuneService::UpdateGauges() {
  std::vector<DeviceGauges> gauges;
  BufferRegistry::Totals on_devices;
  for (const BackendDevice& device : backend_.devices()) {
    const BufferRegistry::Totals buffers = registry_.totals_on(device.info.ordinal);
    on_devices.buffers += buffers.buffers;
    on_devices.bytes += buffers.bytes;
    DeviceGauges out;
    out.device = absl::StrCat(device.info.ordinal);
    out.uuid = device.identity.uuid;
    out.sku = device.info.name;
    out.up = device.failure.empty();
    out.registered_buffers = buffers.buffers;
    out.registered_bytes = buffers.bytes;
    out.ipc_mappings = cuda_ipc_.size_on(device.info.ordinal);
    if (device.config_cache != nullptr) {
      out.tuned_entries = device.config_cache->local_entries();
      out.shipped_entries = device.config_cache->shipped_entries();
      out.stale_entries = device.config_cache->stale().total();
    }
    gauges.push_back(std::move(out));
  }
  if (gauges.empty()) {  // the CPU backend: one place, always up
    DeviceGauges cpu;
    cpu.device = "cpu";
    cpu.sku = "cpu";
    gauges.push_back(cpu);
  }
  const BufferRegistry::Totals all = registry_.totals();
  options_.metrics->SetState(gauges, all.buffers - on_devices.buffers,
                             all.bytes - on_devices.bytes, all.owners);
}

void KernTuneService::CloseClientMemory() {
  poller_.Stop();
  queues_.Clear();
  registry_.Clear();
  cuda_ipc_.Clear();
}

}  // namespace kt::server
