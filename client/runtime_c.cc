// The runtime's C interface (runtime_c.h).
#include "client/runtime_c.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/runtime.h"
#include "kernels/launch_config.h"

#define KT_EXPORT extern "C" __attribute__((visibility("default")))

struct kt_runtime {
  std::unique_ptr<kt::client::Runtime> runtime;
};

namespace {

using kt::kernels::DType;
using kt::kernels::Op;

void Copy(absl::string_view text, char* out, size_t size) {
  if (out == nullptr || size == 0) return;
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

int Fail(const absl::Status& status, char* error, size_t error_size) {
  Copy(status.message(), error, error_size);
  return static_cast<int>(status.code());
}

// An enum value the caller passed, checked against the enum's range.
template <typename Enum>
absl::StatusOr<Enum> EnumOf(int32_t value, int32_t count, absl::string_view field) {
  if (value < 0 || value >= count) {
    return absl::InvalidArgumentError(absl::StrCat(field, "=", value, " is not a value of ",
                                                   field, " (kt_runtime_enum gives them)"));
  }
  return static_cast<Enum>(value);
}

constexpr int32_t kOpCount = sizeof(kt::kernels::kAllOps) / sizeof(kt::kernels::kAllOps[0]);
constexpr int32_t kDTypeCount =
    sizeof(kt::kernels::kAllDTypes) / sizeof(kt::kernels::kAllDTypes[0]);
constexpr int32_t kQuantDTypeCount =
    sizeof(kt::kernels::kAllQuantDTypes) / sizeof(kt::kernels::kAllQuantDTypes[0]);
constexpr int32_t kScaleModeCount = 3;

struct Problem {
  Op op;
  DType dtype;
  kt::kernels::Shape shape;
  kt::kernels::RowOpArgs args;
};

absl::StatusOr<Problem> ProblemOf(const kt_run& run) {
  Problem problem;
  absl::StatusOr<Op> op = EnumOf<Op>(run.op, kOpCount, "op");
  if (!op.ok()) return op.status();
  absl::StatusOr<DType> dtype = EnumOf<DType>(run.dtype, kDTypeCount, "dtype");
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<kt::kernels::QuantDType> quant = EnumOf<kt::kernels::QuantDType>(
      run.quant_dtype, kQuantDTypeCount, "quant_dtype");
  if (!quant.ok()) return quant.status();
  absl::StatusOr<kt::kernels::ScaleMode> mode =
      EnumOf<kt::kernels::ScaleMode>(run.scale_mode, kScaleModeCount, "scale_mode");
  if (!mode.ok()) return mode.status();
  if (run.rows < 1 || run.cols < 1 || run.inner < 1) {
    return absl::InvalidArgumentError(absl::StrCat("rows=", run.rows, ", cols=", run.cols,
                                                   ", inner=", run.inner,
                                                   ": each must be >= 1"));
  }
  problem.op = *op;
  problem.dtype = *dtype;
  problem.shape = {run.rows, run.cols, run.inner};
  kt::kernels::RowOpArgs& args = problem.args;
  args.x = run.x;
  args.y = run.y;
  args.gamma = run.gamma;
  args.beta = run.beta;
  args.mask = run.mask;
  args.mean = run.mean;
  args.inv_std = run.inv_std;
  args.row_scale = run.row_scale;
  args.residual = run.residual;
  args.quant_scale = run.quant_scale;
  args.workspace = run.workspace;
  args.workspace_bytes = run.workspace_bytes;
  kt::kernels::OpParams& params = args.params;
  params.epsilon = run.epsilon;
  params.scale = run.scale;
  params.mask_rows = run.mask_rows;
  params.causal = run.causal != 0;
  params.weight_offset = run.weight_offset;
  params.quant_dtype = *quant;
  params.scale_mode = *mode;
  params.group_size = run.group_size;
  params.scale_ub = run.scale_ub;
  params.x_row_stride = run.x_row_stride;
  params.y_row_stride = run.y_row_stride;
  params.residual_row_stride = run.residual_row_stride;
  params.group_rows = run.group_rows;
  params.x_group_stride = run.x_group_stride;
  params.y_group_stride = run.y_group_stride;
  return problem;
}

// Makes `device` current for the call when it is not: a caller's thread
// may have another current device than the tensors'.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ == device) return;
    if (cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      status_ = absl::InvalidArgumentError(
          absl::StrCat("device=", device, " is not a CUDA device of this process"));
      return;
    }
    switched_ = previous_ >= 0;
  }
  ~CurrentDevice() {
    if (switched_) cudaSetDevice(previous_);
  }
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  absl::Status status_;
};

}  // namespace

KT_EXPORT size_t kt_runtime_run_size(void) { return sizeof(kt_run); }

KT_EXPORT int32_t kt_runtime_enum(const char* kind, const char* name) {
  if (kind == nullptr || name == nullptr) return -1;
  const absl::string_view k(kind);
  if (k == "op") {
    absl::StatusOr<Op> op = kt::kernels::ParseOp(name);
    return op.ok() ? static_cast<int32_t>(*op) : -1;
  }
  if (k == "dtype") {
    absl::StatusOr<DType> dtype = kt::kernels::ParseDType(name);
    return dtype.ok() ? static_cast<int32_t>(*dtype) : -1;
  }
  if (k == "quant_dtype") {
    absl::StatusOr<kt::kernels::QuantDType> dtype = kt::kernels::ParseQuantDType(name);
    return dtype.ok() ? static_cast<int32_t>(*dtype) : -1;
  }
  if (k == "scale_mode") {
    absl::StatusOr<kt::kernels::ScaleMode> mode = kt::kernels::ParseScaleMode(name);
    return mode.ok() ? static_cast<int32_t>(*mode) : -1;
  }
  return -1;
}

KT_EXPORT int kt_runtime_create(const char* daemon_target, const char* db_path,
                                const char* configs_dir, double refresh_seconds,
                                kt_runtime** runtime, char* error, size_t error_size) {
  if (runtime == nullptr) return Fail(absl::InvalidArgumentError("runtime is NULL"), error,
                                      error_size);
  *runtime = nullptr;
  if (!(refresh_seconds >= 0)) {
    return Fail(absl::InvalidArgumentError("refresh_seconds must be >= 0"), error, error_size);
  }
  kt::client::RuntimeOptions options;
  options.daemon_target = daemon_target == nullptr ? "" : daemon_target;
  options.db_path = db_path == nullptr ? "" : db_path;
  options.shipped_config_dir = configs_dir == nullptr ? "" : configs_dir;
  options.refresh_interval = absl::Seconds(refresh_seconds);
  absl::StatusOr<std::unique_ptr<kt::client::Runtime>> made =
      kt::client::Runtime::Create(std::move(options));
  if (!made.ok()) return Fail(made.status(), error, error_size);
  *runtime = new kt_runtime{*std::move(made)};
  return 0;
}

KT_EXPORT void kt_runtime_destroy(kt_runtime* runtime) { delete runtime; }

KT_EXPORT int kt_runtime_run(kt_runtime* runtime, const kt_run* run, int64_t* workspace_bytes,
                             char* config_key, size_t config_key_size, char* error,
                             size_t error_size) {
  if (runtime == nullptr || run == nullptr) {
    return Fail(absl::InvalidArgumentError("runtime and run must not be NULL"), error,
                error_size);
  }
  absl::StatusOr<Problem> problem = ProblemOf(*run);
  if (!problem.ok()) return Fail(problem.status(), error, error_size);
  if (run->device < 0) {
    absl::Status done =
        runtime->runtime->RunOnHost(problem->op, problem->dtype, problem->shape, problem->args);
    if (!done.ok()) return Fail(done, error, error_size);
    Copy("", config_key, config_key_size);
    return 0;
  }
  CurrentDevice current(run->device);
  if (!current.status().ok()) return Fail(current.status(), error, error_size);
  absl::StatusOr<kt::kernels::LaunchConfig> launched = runtime->runtime->Launch(
      problem->op, problem->dtype, problem->shape, problem->args,
      static_cast<cudaStream_t>(run->stream), run->batch_invariant != 0, workspace_bytes);
  if (!launched.ok()) return Fail(launched.status(), error, error_size);
  if (config_key != nullptr) Copy(kt::kernels::ConfigKey(*launched), config_key, config_key_size);
  return 0;
}

KT_EXPORT int kt_runtime_choose(kt_runtime* runtime, int32_t op, int32_t dtype, int64_t rows,
                                int64_t cols, int64_t inner, int32_t batch_invariant,
                                int32_t device, char* config_key,
                                size_t config_key_size, char* source, size_t source_size,
                                char* error, size_t error_size) {
  if (runtime == nullptr) {
    return Fail(absl::InvalidArgumentError("runtime is NULL"), error, error_size);
  }
  absl::StatusOr<Op> the_op = EnumOf<Op>(op, kOpCount, "op");
  if (!the_op.ok()) return Fail(the_op.status(), error, error_size);
  absl::StatusOr<DType> the_dtype = EnumOf<DType>(dtype, kDTypeCount, "dtype");
  if (!the_dtype.ok()) return Fail(the_dtype.status(), error, error_size);
  absl::StatusOr<kt::kernels::DeviceInfo> info = kt::kernels::GetDeviceInfo(device);
  if (!info.ok()) return Fail(info.status(), error, error_size);
  absl::StatusOr<kt::tuner::ConfigChoice> choice =
      runtime->runtime->Choose(*the_op, *the_dtype, {rows, cols, inner}, *info,
                               batch_invariant != 0);
  if (!choice.ok()) return Fail(choice.status(), error, error_size);
  Copy(kt::kernels::ConfigKey(choice->config), config_key, config_key_size);
  Copy(kt::tuner::ConfigSourceName(choice->source), source, source_size);
  return 0;
}

KT_EXPORT int kt_runtime_describe(kt_runtime* runtime, int32_t device, char* text,
                                  size_t text_size, char* error, size_t error_size) {
  if (runtime == nullptr) {
    return Fail(absl::InvalidArgumentError("runtime is NULL"), error, error_size);
  }
  absl::StatusOr<kt::kernels::DeviceInfo> info = kt::kernels::GetDeviceInfo(device);
  if (!info.ok()) return Fail(info.status(), error, error_size);
  std::shared_ptr<const kt::client::FetchedConfigs> configs = runtime->runtime->ConfigsFor(*info);
  Copy(configs->problem.empty() ? configs->origin
                                : absl::StrCat(configs->origin, "; ", configs->problem),
       text, text_size);
  return 0;
}

KT_EXPORT void kt_runtime_refresh(kt_runtime* runtime) {
  if (runtime != nullptr) runtime->runtime->Refresh();
}
