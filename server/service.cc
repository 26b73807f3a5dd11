// KernTune service handlers (see service.h).
#include "server/service.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "kernels/version.h"
#include "server/run_request.h"
#include "tuner/backend.h"

#ifndef KT_PROJECT_VERSION
#define KT_PROJECT_VERSION "unknown"
#endif

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

pb::ConfigSource SourceToProto(ConfigSource source) {
  switch (source) {
    case ConfigSource::kTuned:
      return pb::CONFIG_SOURCE_TUNED;
    case ConfigSource::kNearestTuned:
      return pb::CONFIG_SOURCE_NEAREST_TUNED;
    case ConfigSource::kHeuristic:
      return pb::CONFIG_SOURCE_HEURISTIC;
  }
  return pb::CONFIG_SOURCE_UNSPECIFIED;
}

void ConfigToProto(const kernels::LaunchConfig& config, pb::LaunchConfig* out) {
  out->set_impl(std::string(kernels::ImplName(config.impl)));
  out->set_block_size(config.block_size);
  out->set_pack_size(config.pack_size);
  out->set_thread_group_width(config.thread_group_width);
  out->set_rows_per_access(config.rows_per_access);
  out->set_grid_waves(config.grid_waves);
  out->set_key(kernels::ConfigKey(config));
}

// A missing choice means the CPU reference ran.
void ChoiceToProto(const std::optional<ConfigChoice>& choice, pb::ConfigChoice* out) {
  if (!choice) {
    out->set_source(pb::CONFIG_SOURCE_CPU_REFERENCE);
    return;
  }
  ConfigToProto(choice->config, out->mutable_config());
  out->set_source(SourceToProto(choice->source));
  if (choice->tuned) {
    out->mutable_tuned_shape()->set_rows(choice->tuned->shape.rows);
    out->mutable_tuned_shape()->set_cols(choice->tuned->shape.cols);
    out->set_tuned_median_us(choice->tuned->median_us);
  }
}

void SkuToProto(const db::GpuSku& sku, pb::GpuSku* out) {
  out->set_name(sku.name);
  out->set_cc_major(sku.cc_major);
  out->set_cc_minor(sku.cc_minor);
  out->set_sm_count(sku.sm_count);
  out->set_total_memory_bytes(sku.total_memory_bytes);
}

// Logs a failed request at the edge and converts its status.
grpc::Status Fail(absl::string_view rpc, grpc::ServerContext* context,
                  const absl::Status& status) {
  std::fprintf(stderr, "kerntuned: %s from %s failed: %s\n", std::string(rpc).c_str(),
               context->peer().c_str(), status.ToString().c_str());
  return ToGrpcStatus(status);
}

}  // namespace

// Counts a call in flight for Drain; refuses it once draining began.
class KernTuneService::CallGuard {
 public:
  explicit CallGuard(KernTuneService& service) : service_(service) {
    absl::MutexLock lock(&service_.mu_);
    admitted_ = !service_.draining_;
    if (admitted_) ++service_.in_flight_;
  }
  ~CallGuard() {
    if (!admitted_) return;
    absl::MutexLock lock(&service_.mu_);
    --service_.in_flight_;
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;
  bool admitted() const { return admitted_; }

 private:
  KernTuneService& service_;
  bool admitted_ = false;
};

#define KT_ADMIT_CALL()                                                           \
  CallGuard call_guard(*this);                                                    \
  if (!call_guard.admitted()) {                                                   \
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "kerntuned is shutting down"); \
  }

bool KernTuneService::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

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

grpc::Status KernTuneService::Run(grpc::ServerContext* context, const pb::RunRequest* request,
                                  pb::RunResponse* response) {
  KT_ADMIT_CALL();
  absl::StatusOr<RunRequest> run = ValidateRunRequest(*request, options_.max_request_bytes);
  if (!run.ok()) return Fail("Run", context, run.status());
  absl::StatusOr<RunResult> result = backend_.Execute(*run);
  if (!result.ok()) return Fail("Run", context, result.status());
  *response->mutable_output_data() = std::move(result->output);
  response->mutable_mean()->Add(result->mean.begin(), result->mean.end());
  response->mutable_inv_std()->Add(result->inv_std.begin(), result->inv_std.end());
  ChoiceToProto(result->config, response->mutable_config());
  response->set_kernel_time_us(result->kernel_time_us);
  response->set_backend(backend_.name());
  return grpc::Status::OK;
}

grpc::Status KernTuneService::GetConfig(grpc::ServerContext* context,
                                        const pb::GetConfigRequest* request,
                                        pb::GetConfigResponse* response) {
  KT_ADMIT_CALL();
  absl::StatusOr<kernels::Op> op = OpFromProto(request->op(), "op");
  if (!op.ok()) return Fail("GetConfig", context, op.status());
  absl::StatusOr<kernels::DType> dtype = DTypeFromProto(request->dtype(), "dtype");
  if (!dtype.ok()) return Fail("GetConfig", context, dtype.status());
  absl::StatusOr<kernels::Shape> shape = ValidateShape(request->shape(), *dtype);
  if (!shape.ok()) return Fail("GetConfig", context, shape.status());
  const ConfigCache* cache = backend_.config_cache();
  if (cache == nullptr) {
    ChoiceToProto(std::nullopt, response->mutable_config());
    return grpc::Status::OK;
  }
  absl::StatusOr<ConfigChoice> choice = cache->Lookup(*op, *dtype, *shape);
  if (!choice.ok()) return Fail("GetConfig", context, choice.status());
  ChoiceToProto(*choice, response->mutable_config());
  return grpc::Status::OK;
}

grpc::Status KernTuneService::ListConfigs(grpc::ServerContext* context,
                                          const pb::ListConfigsRequest* request,
                                          pb::ListConfigsResponse* response) {
  KT_ADMIT_CALL();
  const ConfigCache* cache = backend_.config_cache();
  if (cache == nullptr) return grpc::Status::OK;  // the CPU reference uses no configs
  SkuToProto(cache->sku(), response->mutable_sku());
  for (const TunedEntry& entry : cache->Entries()) {
    pb::TunedEntry* out = response->add_entries();
    out->set_op(OpToProto(entry.op));
    out->set_dtype(DTypeToProto(entry.dtype));
    out->mutable_shape()->set_rows(entry.shape.rows);
    out->mutable_shape()->set_cols(entry.shape.cols);
    ConfigToProto(entry.config, out->mutable_config());
    out->set_median_us(entry.median_us);
    out->set_kernel_version(entry.kernel_version);
  }
  return grpc::Status::OK;
}

grpc::Status KernTuneService::GetStatus(grpc::ServerContext* context,
                                        const pb::GetStatusRequest* request,
                                        pb::GetStatusResponse* response) {
  KT_ADMIT_CALL();
  response->set_version(KT_PROJECT_VERSION);
  response->set_kernel_library_version(kernels::kKernelLibraryVersion);
  response->set_backend(backend_.name());
  response->set_backend_reason(options_.backend_reason);
  for (const kernels::DeviceInfo& device : backend_.devices()) {
    pb::Device* out = response->add_devices();
    out->set_ordinal(device.ordinal);
    SkuToProto(tuner::SkuOf(device), out->mutable_sku());
  }
  response->set_database_path(options_.database_path);
  if (const ConfigCache* cache = backend_.config_cache(); cache != nullptr) {
    response->set_tuned_entries(static_cast<int64_t>(cache->Entries().size()));
    response->set_database_data_version(cache->data_version());
  }
  response->set_uptime_seconds(absl::ToInt64Seconds(absl::Now() - started_));
  return grpc::Status::OK;
}

}  // namespace kt::server
