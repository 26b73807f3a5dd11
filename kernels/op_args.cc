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
  }
  return "unknown";
}

bool IsRowStat(Operand operand) {
  return operand == Operand::kMean || operand == Operand::kInvStd ||
         operand == Operand::kRowScale;
}

bool IsOutput(Operand operand) { return operand == Operand::kOutput || IsRowStat(operand); }

bool TakesOperand(Op op, Operand operand) {
  switch (operand) {
    case Operand::kInput:
    case Operand::kOutput:
      return true;
    case Operand::kGamma:
    case Operand::kInvStd:
      return op == Op::kLayerNorm || op == Op::kRmsNorm;
    case Operand::kBeta:
    case Operand::kMean:
      return op == Op::kLayerNorm;
    case Operand::kMask:
      return op == Op::kScaledMaskedSoftmax;
    case Operand::kRowScale:
      return op == Op::kReduceScale;
  }
  return false;
}

int64_t OperandBytes(Operand operand, DType dtype, Shape shape, int64_t mask_rows) {
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  switch (operand) {
    case Operand::kInput:
    case Operand::kOutput:
      return shape.elements() * element;
    case Operand::kGamma:
    case Operand::kBeta:
      return shape.cols * element;
    case Operand::kMask:
      return mask_rows * shape.cols * element;
    case Operand::kMean:
    case Operand::kInvStd:
    case Operand::kRowScale:
      return shape.rows * static_cast<int64_t>(sizeof(float));
  }
  return 0;
}

int64_t MinimumBytesMoved(Op op, DType dtype, Shape shape, bool has_gamma, bool has_beta,
                          bool has_stats, int64_t mask_rows) {
  int64_t bytes = 0;
  for (Operand operand : kAllOperands) {
    if (!TakesOperand(op, operand)) continue;
    const bool present = operand == Operand::kGamma  ? has_gamma
                         : operand == Operand::kBeta ? has_beta
                         : IsRowStat(operand)        ? has_stats
                                                     : true;
    if (present) bytes += OperandBytes(operand, dtype, shape, mask_rows);
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
  return absl::OkStatus();
}

}  // namespace kt::kernels
