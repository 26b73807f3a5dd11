// The operand table (op_args.h): names, directions, sizes and which op
// takes which operand, in one place.
#include "kernels/op_args.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace kt::kernels {

absl::string_view OperandName(Operand operand) {
  switch (operand) {
    case Operand::kInput:
      return "input";
    case Operand::kOutput:
      return "output";
    case Operand::kGamma:
      return "gamma";
    case Operand::kBeta:
      return "beta";
    case Operand::kMask:
      return "mask";
    case Operand::kMean:
      return "mean";
    case Operand::kInvStd:
      return "inv_std";
    case Operand::kRowScale:
      return "row_scale";
    case Operand::kResidual:
      return "residual";
    case Operand::kQuantScale:
      return "quant_scale";
  }
  return "unknown";
}

bool IsRowStat(Operand operand) {
  return operand == Operand::kMean || operand == Operand::kInvStd ||
         operand == Operand::kRowScale;
}

bool IsOutput(Operand operand) {
  return operand == Operand::kOutput || operand == Operand::kResidual || IsRowStat(operand);
}

bool TakesOperand(Op op, Operand operand) {
  switch (operand) {
    case Operand::kInput:
    case Operand::kOutput:
      return true;
    case Operand::kGamma:
    case Operand::kInvStd:
      return IsLayerNormFamily(op) || IsRmsNormFamily(op);
    case Operand::kBeta:
    case Operand::kMean:
      return IsLayerNormFamily(op);
    case Operand::kMask:
      return op == Op::kScaledMaskedSoftmax;
    case Operand::kRowScale:
      return op == Op::kReduceScale || QuantizesOutput(op);
    case Operand::kResidual:
      return AddsResidual(op);
    case Operand::kQuantScale:
      return QuantizesOutput(op);
  }
  return false;
}

RowLayout RowLayoutOf(Operand operand, const OpParams& params, Shape shape) {
  RowLayout layout{shape.cols, 0, 0};
  int64_t stride = 0;
  int64_t group_stride = 0;
  if (operand == Operand::kInput) {
    stride = params.x_row_stride;
    group_stride = params.x_group_stride;
  } else if (operand == Operand::kOutput) {
    stride = params.y_row_stride;
    group_stride = params.y_group_stride;
  } else if (operand == Operand::kResidual) {
    stride = params.residual_row_stride;
  } else {
    return layout;
  }
  if (stride > 0) layout.stride = stride;
  if (operand != Operand::kResidual && params.group_rows > 0) {
    layout.group_rows = params.group_rows;
    layout.group_stride =
        group_stride > 0 ? group_stride : params.group_rows * layout.stride;
  }
  return layout;
}

bool HasRowStrides(const OpParams& params, Shape shape) {
  for (Operand operand : {Operand::kInput, Operand::kOutput, Operand::kResidual}) {
    if (!RowLayoutOf(operand, params, shape).contiguous(shape.cols)) return true;
  }
  return false;
}

RowPlacement PlacementOf(const OpParams& params, Shape shape) {
  if (params.group_rows > 0) return RowPlacement::kGrouped;
  return HasRowStrides(params, shape) ? RowPlacement::kStrided : RowPlacement::kContiguous;
}

int64_t OutputElementBytes(Op op, DType dtype) {
  return QuantizesOutput(op) ? 1 : static_cast<int64_t>(DTypeSize(dtype));
}

namespace {

// Per-row scales of a quantizing op: one per row, or one per group.
int64_t ScalesPerRow(const OpParams& params, Shape shape) {
  if (params.scale_mode == ScaleMode::kPerGroup && params.group_size > 0) {
    return (shape.cols + params.group_size - 1) / params.group_size;
  }
  return 1;
}

// Elements a (rows, cols) tensor laid out as `layout` spans: its last row's
// offset plus cols (the last row starts furthest: strides are >= cols).
int64_t SpannedElements(Shape shape, const RowLayout& layout) {
  if (shape.rows < 1) return 0;
  return (layout.Offset(shape.rows - 1) + shape.cols) * shape.inner;
}

}  // namespace

int64_t OperandBytes(Op op, Operand operand, DType dtype, Shape shape, const OpParams& params) {
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  switch (operand) {
    case Operand::kInput:
    case Operand::kResidual:
      return SpannedElements(shape, RowLayoutOf(operand, params, shape)) * element;
    case Operand::kOutput:
      return SpannedElements(shape, RowLayoutOf(operand, params, shape)) *
             OutputElementBytes(op, dtype);
    case Operand::kGamma:
    case Operand::kBeta:
      return shape.cols * element;
    case Operand::kMask:
      return params.mask_rows * shape.cols * element;
    case Operand::kMean:
    case Operand::kInvStd:
      return shape.rows * static_cast<int64_t>(sizeof(float));
    case Operand::kRowScale:
      if (QuantizesOutput(op) && params.scale_mode == ScaleMode::kStatic) return 0;
      return shape.rows * (QuantizesOutput(op) ? ScalesPerRow(params, shape) : 1) *
             static_cast<int64_t>(sizeof(float));
    case Operand::kQuantScale:
      return params.scale_mode == ScaleMode::kStatic ? static_cast<int64_t>(sizeof(float)) : 0;
  }
  return 0;
}

int64_t MinimumBytesMoved(Op op, DType dtype, Shape shape, bool has_gamma, bool has_beta,
                          bool has_stats, const OpParams& params) {
  // Strided rows move their elements only.
  OpParams dense = params;
  dense.x_row_stride = dense.y_row_stride = dense.residual_row_stride = 0;
  dense.group_rows = dense.x_group_stride = dense.y_group_stride = 0;
  int64_t bytes = 0;
  for (Operand operand : kAllOperands) {
    if (!TakesOperand(op, operand)) continue;
    bool present = true;
    if (operand == Operand::kGamma) present = has_gamma;
    if (operand == Operand::kBeta) present = has_beta;
    if (operand == Operand::kMean || operand == Operand::kInvStd) present = has_stats;
    // ReduceScale's scales are optional extras like the norms' statistics;
    // a quantizing op's scales are half of its result.
    if (operand == Operand::kRowScale) present = has_stats || QuantizesOutput(op);
    if (!present) continue;
    int64_t operand_bytes = OperandBytes(op, operand, dtype, shape, dense);
    if (operand == Operand::kResidual) operand_bytes *= 2;  // read and written back
    bytes += operand_bytes;
  }
  return bytes;
}

const void* RowOpArgs::operand(Operand which) const {
  switch (which) {
    case Operand::kInput:
      return x;
    case Operand::kOutput:
      return y;
    case Operand::kGamma:
      return gamma;
    case Operand::kBeta:
      return beta;
    case Operand::kMask:
      return mask;
    case Operand::kMean:
      return mean;
    case Operand::kInvStd:
      return inv_std;
    case Operand::kRowScale:
      return row_scale;
    case Operand::kResidual:
      return residual;
    case Operand::kQuantScale:
      return quant_scale;
  }
  return nullptr;
}

void RowOpArgs::set_operand(Operand which, void* pointer) {
  switch (which) {
    case Operand::kInput:
      x = pointer;
      break;
    case Operand::kOutput:
      y = pointer;
      break;
    case Operand::kGamma:
      gamma = pointer;
      break;
    case Operand::kBeta:
      beta = pointer;
      break;
    case Operand::kMask:
      mask = pointer;
      break;
    case Operand::kMean:
      mean = static_cast<float*>(pointer);
      break;
    case Operand::kInvStd:
      inv_std = static_cast<float*>(pointer);
      break;
    case Operand::kRowScale:
      row_scale = static_cast<float*>(pointer);
      break;
    case Operand::kResidual:
      residual = pointer;
      break;
    case Operand::kQuantScale:
      quant_scale = static_cast<const float*>(pointer);
      break;
  }
}

absl::Status ValidateOpArgs(Op op, DType dtype, Shape shape, const RowOpArgs& args) {
  if (args.x == nullptr) return absl::InvalidArgumentError("x is null");
  if (args.y == nullptr) return absl::InvalidArgumentError("y is null");
  for (Operand operand : kAllOperands) {
    const void* pointer = args.operand(operand);
    if (pointer == nullptr) continue;
    if (!TakesOperand(op, operand)) {
      return absl::InvalidArgumentError(
          absl::StrCat(OpName(op), " takes no ", OperandName(operand), "; pass null"));
    }
  }
  const OpParams& params = args.params;
  if (TakesEpsilon(op) && !(std::isfinite(params.epsilon) && params.epsilon > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epsilon=", params.epsilon, " must be finite and > 0"));
  }
  if (op == Op::kScaledMaskedSoftmax) {
    if (!std::isfinite(params.scale)) {
      return absl::InvalidArgumentError(absl::StrCat("scale=", params.scale, " must be finite"));
    }
    if ((args.mask != nullptr || params.causal) &&
        (params.mask_rows < 1 || shape.rows % params.mask_rows != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("mask_rows=", params.mask_rows,
                       " (the query length) must be >= 1 and divide rows=", shape.rows));
    }
  } else if (params.causal) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " takes no mask; causal is for scaled_masked_softmax"));
  }
  if (AddsResidual(op) && args.residual == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(OpName(op), " needs a residual"));
  }
  if (!std::isfinite(params.weight_offset)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_offset=", params.weight_offset, " must be finite"));
  }
  if (params.weight_offset != 0 && (!IsRmsNormFamily(op) || args.gamma == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight_offset=", params.weight_offset,
        " needs a weight and an op of the RMSNorm family; ", OpName(op),
        args.gamma == nullptr ? " has no weight" : " is not one"));
  }
  if (QuantizesOutput(op)) {
    if (!(std::isfinite(params.scale_ub) && params.scale_ub >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("scale_ub=", params.scale_ub, " must be finite and >= 0"));
    }
    if (params.scale_mode == ScaleMode::kStatic) {
      if (args.quant_scale == nullptr) {
        return absl::InvalidArgumentError("a static quantization needs quant_scale");
      }
      if (args.row_scale != nullptr) {
        return absl::InvalidArgumentError(
            "a static quantization writes no row_scale; pass null");
      }
    } else {
      if (args.row_scale == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a ", ScaleModeName(params.scale_mode), " quantization needs row_scale"));
      }
      if (args.quant_scale != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a ", ScaleModeName(params.scale_mode), " quantization reads no quant_scale"));
      }
    }
    if (params.scale_mode == ScaleMode::kPerGroup) {
      if ((params.group_size != 64 && params.group_size != 128) ||
          shape.cols % params.group_size != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "group_size=", params.group_size, " must be 64 or 128 and divide cols=", shape.cols));
      }
    } else if (params.group_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group_size=", params.group_size, " is for per_group scales; pass 0"));
    }
  }
  if (HasRowStrides(params, shape) && shape.inner > 1) {
    return absl::InvalidArgumentError(
        "row strides are for last-axis rows; rows reduced along a middle axis (inner > 1) are "
        "contiguous");
  }
  if (params.group_rows > 0 && op != Op::kRmsNorm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group_rows=", params.group_rows,
        ": grouped rows (per-head views, QK-norm) are for rms_norm, not ", OpName(op)));
  }
  if (params.group_rows < 0 || (params.group_rows > 0 && shape.rows % params.group_rows != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("group_rows=", params.group_rows,
                                                   " must be >= 0 and divide rows=", shape.rows));
  }
  for (Operand operand : {Operand::kInput, Operand::kOutput, Operand::kResidual}) {
    const int64_t stride = operand == Operand::kInput    ? params.x_row_stride
                           : operand == Operand::kOutput ? params.y_row_stride
                                                         : params.residual_row_stride;
    if (stride != 0 && stride < shape.cols) {
      return absl::InvalidArgumentError(absl::StrCat(OperandName(operand), " row stride=", stride,
                                                     " must be >= cols=", shape.cols));
    }
    if (operand == Operand::kResidual) continue;
    const int64_t group_stride =
        operand == Operand::kInput ? params.x_group_stride : params.y_group_stride;
    const RowLayout layout = RowLayoutOf(operand, params, shape);
    if (group_stride != 0 &&
        (params.group_rows == 0 ||
         group_stride < (params.group_rows - 1) * layout.stride + shape.cols)) {
      return absl::InvalidArgumentError(absl::StrCat(
          OperandName(operand), " group stride=", group_stride,
          params.group_rows == 0 ? " needs group_rows"
                                 : absl::StrCat(" must be >= (group_rows - 1) * row stride + "
                                                "cols = ",
                                                (params.group_rows - 1) * layout.stride +
                                                    shape.cols)));
    }
  }
  if (args.x == args.y) {
    const RowLayout x = RowLayoutOf(Operand::kInput, params, shape);
    const RowLayout y = RowLayoutOf(Operand::kOutput, params, shape);
    if (x.stride != y.stride || x.group_stride != y.group_stride) {
      return absl::InvalidArgumentError(
          "y is x (in place) but their row strides differ; give both the same");
    }
  }
  if (args.x == args.y && QuantizesOutput(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " writes one-byte codes; y cannot be x"));
  }
  return absl::OkStatus();
}

}  // namespace kt::kernels
