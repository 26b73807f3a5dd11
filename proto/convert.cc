// Proto <-> C++ conversions (convert.h). Each enum pairing is one table, read
// in both directions.
#include "proto/convert.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kt::proto {
namespace {

constexpr std::pair<kernels::Op, pb::Op> kOps[] = {
    {kernels::Op::kSoftmax, pb::OP_SOFTMAX},
    {kernels::Op::kLogSoftmax, pb::OP_LOG_SOFTMAX},
    {kernels::Op::kLayerNorm, pb::OP_LAYER_NORM},
    {kernels::Op::kRmsNorm, pb::OP_RMS_NORM},
    {kernels::Op::kReduceScale, pb::OP_REDUCE_SCALE},
    {kernels::Op::kScaledMaskedSoftmax, pb::OP_SCALED_MASKED_SOFTMAX},
    {kernels::Op::kAddRmsNorm, pb::OP_ADD_RMS_NORM},
    {kernels::Op::kAddLayerNorm, pb::OP_ADD_LAYER_NORM},
    {kernels::Op::kRmsNormQuant, pb::OP_RMS_NORM_QUANT},
    {kernels::Op::kLayerNormQuant, pb::OP_LAYER_NORM_QUANT},
    {kernels::Op::kAddRmsNormQuant, pb::OP_ADD_RMS_NORM_QUANT},
    {kernels::Op::kAddLayerNormQuant, pb::OP_ADD_LAYER_NORM_QUANT},
};

constexpr std::pair<kernels::DType, pb::DType> kDTypes[] = {
    {kernels::DType::kFloat32, pb::DTYPE_FLOAT32},
    {kernels::DType::kFloat16, pb::DTYPE_FLOAT16},
    {kernels::DType::kBFloat16, pb::DTYPE_BFLOAT16},
};

constexpr std::pair<kernels::QuantDType, pb::QuantDType> kQuantDTypes[] = {
    {kernels::QuantDType::kFp8E4M3, pb::QUANT_DTYPE_FP8_E4M3},
    {kernels::QuantDType::kFp8E5M2, pb::QUANT_DTYPE_FP8_E5M2},
    {kernels::QuantDType::kInt8, pb::QUANT_DTYPE_INT8},
};

constexpr std::pair<kernels::ScaleMode, pb::ScaleMode> kScaleModes[] = {
    {kernels::ScaleMode::kStatic, pb::SCALE_MODE_STATIC},
    {kernels::ScaleMode::kPerRow, pb::SCALE_MODE_PER_ROW},
    {kernels::ScaleMode::kPerGroup, pb::SCALE_MODE_PER_GROUP},
};

constexpr std::pair<tuner::ConfigSource, pb::ConfigSource> kConfigSources[] = {
    {tuner::ConfigSource::kTuned, pb::CONFIG_SOURCE_TUNED},
    {tuner::ConfigSource::kShipped, pb::CONFIG_SOURCE_SHIPPED},
    {tuner::ConfigSource::kNearestTuned, pb::CONFIG_SOURCE_NEAREST_TUNED},
    {tuner::ConfigSource::kHeuristic, pb::CONFIG_SOURCE_HEURISTIC},
};

template <typename Kernel, typename Proto, size_t N>
Proto ToProto(const std::pair<Kernel, Proto> (&table)[N], Kernel value) {
  for (const auto& [kernel, proto] : table) {
    if (kernel == value) return proto;
  }
  return Proto{};  // the *_UNSPECIFIED value: every kernel enum is in its table
}

// `field`=N (NAME) must be one of the table's names. An enum value this
// build does not know (a newer client) has no name: "(unknown)".
template <typename Kernel, typename Proto, size_t N>
absl::StatusOr<Kernel> FromProto(const std::pair<Kernel, Proto> (&table)[N], Proto value,
                                 absl::string_view field,
                                 const std::string& (*name_of)(Proto)) {
  for (const auto& [kernel, proto] : table) {
    if (proto == value) return kernel;
  }
  const std::string& name = name_of(value);
  std::vector<std::string> allowed;
  for (const auto& [kernel, proto] : table) allowed.push_back(name_of(proto));
  const std::string last = allowed.back();
  allowed.pop_back();
  return absl::InvalidArgumentError(absl::StrCat(
      field, "=", static_cast<int>(value), " (", name.empty() ? "unknown" : name, ") must be ",
      absl::StrJoin(allowed, ", "), " or ", last));
}

const std::string& OpName(pb::Op op) { return pb::Op_Name(op); }
const std::string& DTypeName(pb::DType dtype) { return pb::DType_Name(dtype); }
const std::string& SourceName(pb::ConfigSource source) { return pb::ConfigSource_Name(source); }
const std::string& QuantDTypeName(pb::QuantDType dtype) { return pb::QuantDType_Name(dtype); }
const std::string& ScaleModeName(pb::ScaleMode mode) { return pb::ScaleMode_Name(mode); }

// Where a tuned entry was loaded from, as the source of its exact point.
pb::ConfigSource OriginToProto(tuner::EntryOrigin origin) {
  return origin == tuner::EntryOrigin::kLocal ? pb::CONFIG_SOURCE_TUNED
                                              : pb::CONFIG_SOURCE_SHIPPED;
}

absl::Status Disagrees(const pb::LaunchConfig& fields, absl::string_view name,
                       const std::string& value, const std::string& expected) {
  return absl::InvalidArgumentError(absl::StrCat("config.", name, "=", value,
                                                 " disagrees with config.key=\"", fields.key(),
                                                 "\" (which says ", expected, ")"));
}

}  // namespace

absl::StatusOr<kernels::Op> OpFromProto(pb::Op op, absl::string_view field) {
  return FromProto(kOps, op, field, &OpName);
}

absl::StatusOr<kernels::DType> DTypeFromProto(pb::DType dtype, absl::string_view field) {
  return FromProto(kDTypes, dtype, field, &DTypeName);
}

pb::Op OpToProto(kernels::Op op) { return ToProto(kOps, op); }

pb::DType DTypeToProto(kernels::DType dtype) { return ToProto(kDTypes, dtype); }

absl::StatusOr<kernels::QuantDType> QuantDTypeFromProto(pb::QuantDType dtype,
                                                        absl::string_view field) {
  return FromProto(kQuantDTypes, dtype, field, &QuantDTypeName);
}

absl::StatusOr<kernels::ScaleMode> ScaleModeFromProto(pb::ScaleMode mode, absl::string_view field) {
  return FromProto(kScaleModes, mode, field, &ScaleModeName);
}

pb::QuantDType QuantDTypeToProto(kernels::QuantDType dtype) { return ToProto(kQuantDTypes, dtype); }

pb::ScaleMode ScaleModeToProto(kernels::ScaleMode mode) { return ToProto(kScaleModes, mode); }

absl::Status QuantizationFromProto(const pb::Quantization& quant, absl::string_view field,
                                   kernels::OpParams& params) {
  absl::StatusOr<kernels::QuantDType> dtype =
      QuantDTypeFromProto(quant.dtype(), absl::StrCat(field, ".dtype"));
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<kernels::ScaleMode> mode =
      ScaleModeFromProto(quant.scale_mode(), absl::StrCat(field, ".scale_mode"));
  if (!mode.ok()) return mode.status();
  params.quant_dtype = *dtype;
  params.scale_mode = *mode;
  params.group_size = quant.group_size();
  params.scale_ub = quant.scale_ub();
  return absl::OkStatus();
}

pb::Quantization QuantizationToProto(const kernels::OpParams& params) {
  pb::Quantization out;
  out.set_dtype(QuantDTypeToProto(params.quant_dtype));
  out.set_scale_mode(ScaleModeToProto(params.scale_mode));
  out.set_group_size(params.group_size);
  out.set_scale_ub(params.scale_ub);
  return out;
}

void RowStridesFromProto(const pb::RowStrides& strides, kernels::OpParams& params) {
  params.x_row_stride = strides.input();
  params.y_row_stride = strides.output();
  params.residual_row_stride = strides.residual();
  params.group_rows = strides.group_rows();
  params.x_group_stride = strides.input_group();
  params.y_group_stride = strides.output_group();
}

pb::RowStrides RowStridesToProto(const kernels::OpParams& params) {
  pb::RowStrides out;
  out.set_input(params.x_row_stride);
  out.set_output(params.y_row_stride);
  out.set_residual(params.residual_row_stride);
  out.set_group_rows(params.group_rows);
  out.set_input_group(params.x_group_stride);
  out.set_output_group(params.y_group_stride);
  return out;
}

absl::StatusOr<kernels::Shape> ShapeFromProto(const pb::Shape& shape, kernels::Op op,
                                              kernels::DType dtype) {
  if (shape.rows() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shape.rows=", shape.rows(), " must be >= 1"));
  }
  if (shape.cols() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shape.cols=", shape.cols(), " must be >= 1"));
  }
  if (shape.inner() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape.inner=", shape.inner(), " must be >= 1 (0, unset, means 1: the last axis)"));
  }
  const int64_t inner = std::max<int64_t>(shape.inner(), 1);
  if (inner > 1 && !kernels::SupportsInnerAxis(op)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape.inner=", inner, ": op=", kernels::OpName(op),
        " reduces the last axis only (inner 0 or 1); only softmax and log_softmax reduce a "
        "middle axis"));
  }
  const int64_t size = static_cast<int64_t>(kernels::DTypeSize(dtype));
  const int64_t max = std::numeric_limits<int64_t>::max();
  if (shape.rows() > max / shape.cols() || shape.rows() * shape.cols() > max / inner ||
      shape.rows() * shape.cols() * inner > max / size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape.rows=", shape.rows(), " x shape.cols=", shape.cols(),
        inner > 1 ? absl::StrCat(" x shape.inner=", inner) : std::string(), " x ", size,
        " bytes overflows a 64-bit byte count"));
  }
  return kernels::Shape{shape.rows(), shape.cols(), inner};
}

pb::Shape ShapeToProto(const kernels::Shape& shape) {
  pb::Shape out;
  out.set_rows(shape.rows);
  out.set_cols(shape.cols);
  out.set_inner(shape.inner);
  return out;
}

pb::LaunchConfig LaunchConfigToProto(const kernels::LaunchConfig& config) {
  pb::LaunchConfig out;
  out.set_impl(std::string(kernels::ImplName(config.impl)));
  out.set_block_size(config.block_size);
  out.set_pack_size(config.pack_size);
  out.set_thread_group_width(config.thread_group_width);
  out.set_rows_per_access(config.rows_per_access);
  out.set_grid_waves(config.grid_waves);
  out.set_key(kernels::ConfigKey(config));
  out.set_split(config.split);
  return out;
}

absl::StatusOr<kernels::LaunchConfig> LaunchConfigFromProto(const pb::LaunchConfig& fields) {
  if (fields.key().empty()) return absl::InvalidArgumentError("config.key is missing");
  absl::StatusOr<kernels::LaunchConfig> config = kernels::ParseLaunchConfig(fields.key());
  if (!config.ok()) return config.status();
  // The key is the truth; the fields repeat it for people and must agree.
  // Files written before split existed have none: 1.
  const int split = fields.split() == 0 ? 1 : fields.split();
  const std::pair<const char*, std::pair<int, int>> numbers[] = {
      {"block_size", {fields.block_size(), config->block_size}},
      {"pack_size", {fields.pack_size(), config->pack_size}},
      {"thread_group_width", {fields.thread_group_width(), config->thread_group_width}},
      {"rows_per_access", {fields.rows_per_access(), config->rows_per_access}},
      {"grid_waves", {fields.grid_waves(), config->grid_waves}},
      {"split", {split, config->split}},
  };
  const absl::string_view impl = kernels::ImplName(config->impl);
  if (fields.impl() != impl) {
    return Disagrees(fields, "impl", absl::StrCat("\"", fields.impl(), "\""),
                     absl::StrCat("\"", impl, "\""));
  }
  for (const auto& [name, values] : numbers) {
    if (values.first != values.second) {
      return Disagrees(fields, name, absl::StrCat(values.first), absl::StrCat(values.second));
    }
  }
  return *config;
}

pb::GpuSku SkuToProto(const db::GpuSku& sku) {
  pb::GpuSku out;
  out.set_name(sku.name);
  out.set_cc_major(sku.cc_major);
  out.set_cc_minor(sku.cc_minor);
  out.set_sm_count(sku.sm_count);
  out.set_total_memory_bytes(sku.total_memory_bytes);
  return out;
}

db::GpuSku SkuFromProto(const pb::GpuSku& sku) {
  return db::GpuSku{sku.name(), sku.cc_major(), sku.cc_minor(), sku.sm_count(),
                    sku.total_memory_bytes()};
}

pb::ConfigSource ConfigSourceToProto(tuner::ConfigSource source) {
  return ToProto(kConfigSources, source);
}

absl::StatusOr<tuner::ConfigSource> ConfigSourceFromProto(pb::ConfigSource source,
                                                          absl::string_view field) {
  return FromProto(kConfigSources, source, field, &SourceName);
}

pb::ConfigChoice ConfigChoiceToProto(const tuner::ConfigChoice& choice) {
  pb::ConfigChoice out;
  *out.mutable_config() = LaunchConfigToProto(choice.config);
  out.set_source(ConfigSourceToProto(choice.source));
  if (choice.tuned) {
    *out.mutable_tuned_shape() = ShapeToProto(choice.tuned->shape);
    out.set_tuned_median_us(choice.tuned->median_us);
    out.set_tuned_origin(OriginToProto(choice.tuned->origin));
  }
  return out;
}

pb::TunedEntry TunedEntryToProto(const tuner::TunedEntry& entry) {
  pb::TunedEntry out;
  out.set_op(OpToProto(entry.op));
  out.set_dtype(DTypeToProto(entry.dtype));
  *out.mutable_shape() = ShapeToProto(entry.shape);
  *out.mutable_config() = LaunchConfigToProto(entry.config);
  out.set_median_us(entry.median_us);
  out.set_kernel_version(entry.kernel_version);
  out.set_source(OriginToProto(entry.origin));
  return out;
}

absl::StatusOr<tuner::TunedEntry> TunedEntryFromProto(const pb::TunedEntry& entry) {
  tuner::TunedEntry out;
  absl::StatusOr<kernels::Op> op = OpFromProto(entry.op(), "entry.op");
  if (!op.ok()) return op.status();
  absl::StatusOr<kernels::DType> dtype = DTypeFromProto(entry.dtype(), "entry.dtype");
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<kernels::Shape> shape = ShapeFromProto(entry.shape(), *op, *dtype);
  if (!shape.ok()) return shape.status();
  absl::StatusOr<kernels::LaunchConfig> config = LaunchConfigFromProto(entry.config());
  if (!config.ok()) return config.status();
  switch (entry.source()) {
    case pb::CONFIG_SOURCE_TUNED:
      out.origin = tuner::EntryOrigin::kLocal;
      break;
    case pb::CONFIG_SOURCE_SHIPPED:
      out.origin = tuner::EntryOrigin::kShipped;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "entry.source=", static_cast<int>(entry.source()), " (", SourceName(entry.source()),
          ") must be CONFIG_SOURCE_TUNED or CONFIG_SOURCE_SHIPPED"));
  }
  out.op = *op;
  out.dtype = *dtype;
  out.shape = *shape;
  out.config = *config;
  out.median_us = entry.median_us();
  out.kernel_version = entry.kernel_version();
  return out;
}

}  // namespace kt::proto
