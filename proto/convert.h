// The one place where the kerntune.v1 proto messages meet the C++ vocabulary
// of the kernel library (ops, dtypes, shapes, launch configs), of the tuning
// store (GPU SKUs) and of the config lookup (config sources, tuned
// entries). The daemon (server/) and the CLI and client library (client/)
// convert through here; kernels/, db/ and tuner/ never see generated code.
#ifndef KERNTUNE_PROTO_CONVERT_H_
#define KERNTUNE_PROTO_CONVERT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "db/records.h"
#include "kernels/launch_config.h"
#include "kernels/op_args.h"
#include "kernels/types.h"
#include "kerntune/v1/common.pb.h"
#include "kerntune/v1/kerntune.pb.h"
#include "tuner/config_lookup.h"

namespace kt::proto {

namespace pb = ::kerntune::v1;

// Kernel enums from proto enums: InvalidArgument names the field and the
// value, e.g. "op=42 (unknown) must be OP_SOFTMAX, ..." or
// "dtype=0 (DTYPE_UNSPECIFIED) must be ...".
absl::StatusOr<kernels::Op> OpFromProto(pb::Op op, absl::string_view field);
absl::StatusOr<kernels::DType> DTypeFromProto(pb::DType dtype, absl::string_view field);
pb::Op OpToProto(kernels::Op op);
pb::DType DTypeToProto(kernels::DType dtype);
absl::StatusOr<kernels::QuantDType> QuantDTypeFromProto(pb::QuantDType dtype,
                                                        absl::string_view field);
absl::StatusOr<kernels::ScaleMode> ScaleModeFromProto(pb::ScaleMode mode, absl::string_view field);
pb::QuantDType QuantDTypeToProto(kernels::QuantDType dtype);
pb::ScaleMode ScaleModeToProto(kernels::ScaleMode mode);

// A Quantization's scalar fields into `params` (quant_dtype, scale_mode,
// group_size, scale_ub): the enums must name a value (UNSPECIFIED is
// refused as `field`.dtype / `field`.scale_mode); the numbers are copied as
// given, for the caller's validation (group size, scale_ub), and the
// tensors (scale, scales) are the caller's. ToProto writes the same four.
absl::Status QuantizationFromProto(const pb::Quantization& quant, absl::string_view field,
                                   kernels::OpParams& params);
pb::Quantization QuantizationToProto(const kernels::OpParams& params);

// RowStrides into OpParams' strides and groups (input -> x_row_stride,
// output -> y_row_stride, residual, group_rows, input_group ->
// x_group_stride, output_group -> y_group_stride), copied as given: 0 stays
// "contiguous"; the caller validates the values (they can be hostile:
// check them before any extent arithmetic).
void RowStridesFromProto(const pb::RowStrides& strides, kernels::OpParams& params);
pb::RowStrides RowStridesToProto(const kernels::OpParams& params);

// A problem shape for `op` in `dtype`: rows >= 1, cols >= 1, inner 0 (read
// as 1) or >= 1, inner > 1 only for an op that reduces a middle axis
// (softmax, log_softmax), and rows * cols * inner * dtype size without
// overflow. Errors name the fields as "shape.rows" etc.
absl::StatusOr<kernels::Shape> ShapeFromProto(const pb::Shape& shape, kernels::Op op,
                                              kernels::DType dtype);
pb::Shape ShapeToProto(const kernels::Shape& shape);

// A launch config with its key (kernels::ConfigKey) beside the fields.
pb::LaunchConfig LaunchConfigToProto(const kernels::LaunchConfig& config);
// The config its key names, checked to agree with every field (a split of 0,
// as in files written before it existed, reads as 1). InvalidArgument names
// the first field that disagrees, or the key that does not parse.
absl::StatusOr<kernels::LaunchConfig> LaunchConfigFromProto(const pb::LaunchConfig& config);

pb::GpuSku SkuToProto(const db::GpuSku& sku);
db::GpuSku SkuFromProto(const pb::GpuSku& sku);

pb::ConfigSource ConfigSourceToProto(tuner::ConfigSource source);
// InvalidArgument for CONFIG_SOURCE_CPU_REFERENCE (no lookup ran: the CPU
// backend launches no config), UNSPECIFIED and values this build does not know.
absl::StatusOr<tuner::ConfigSource> ConfigSourceFromProto(pb::ConfigSource source,
                                                          absl::string_view field);
// The config, its source and, when it came from a tuned entry, that entry's
// point, time and origin. (The service's SameChoiceFields compares exactly
// these to reuse a queued answer's serialized fields: keep the two alike.)
pb::ConfigChoice ConfigChoiceToProto(const tuner::ConfigChoice& choice);
pb::TunedEntry TunedEntryToProto(const tuner::TunedEntry& entry);
// A ListConfigs entry as a lookup entry: its source (TUNED or SHIPPED) is
// its origin. InvalidArgument names what cannot be read (an op, dtype or
// config of a newer daemon, another source).
absl::StatusOr<tuner::TunedEntry> TunedEntryFromProto(const pb::TunedEntry& entry);

}  // namespace kt::proto

#endif  // KERNTUNE_PROTO_CONVERT_H_
