// Names and sizes of the shared vocabulary (types.h).
#include "kernels/types.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kt::kernels {

absl::string_view OpName(Op op) {
  switch (op) {
    case Op::kSoftmax:
      return "softmax";
    case Op::kLogSoftmax:
      return "log_softmax";
    case Op::kLayerNorm:
      return "layer_norm";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kReduceScale:
      return "reduce_scale";
    case Op::kScaledMaskedSoftmax:
      return "scaled_masked_softmax";
    case Op::kAddRmsNorm:
      return "add_rms_norm";
    case Op::kAddLayerNorm:
      return "add_layer_norm";
    case Op::kRmsNormQuant:
      return "rms_norm_quant";
    case Op::kLayerNormQuant:
      return "layer_norm_quant";
    case Op::kAddRmsNormQuant:
      return "add_rms_norm_quant";
    case Op::kAddLayerNormQuant:
      return "add_layer_norm_quant";
  }
  return "unknown";
}

absl::string_view QuantDTypeName(QuantDType dtype) {
  switch (dtype) {
    case QuantDType::kFp8E4M3:
      return "fp8_e4m3";
    case QuantDType::kFp8E5M2:
      return "fp8_e5m2";
    case QuantDType::kInt8:
      return "int8";
  }
  return "unknown";
}

absl::StatusOr<QuantDType> ParseQuantDType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (QuantDType dtype : kAllQuantDTypes) {
    if (lower == QuantDTypeName(dtype)) return dtype;
  }
  if (lower == "e4m3" || lower == "float8_e4m3fn") return QuantDType::kFp8E4M3;
  if (lower == "e5m2" || lower == "float8_e5m2") return QuantDType::kFp8E5M2;
  return absl::InvalidArgumentError(
      absl::StrCat("quant dtype=\"", name, "\" is not one of fp8_e4m3, fp8_e5m2, int8"));
}

absl::string_view ScaleModeName(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::kStatic:
      return "static";
    case ScaleMode::kPerRow:
      return "per_row";
    case ScaleMode::kPerGroup:
      return "per_group";
  }
  return "unknown";
}

absl::StatusOr<ScaleMode> ParseScaleMode(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (ScaleMode mode : {ScaleMode::kStatic, ScaleMode::kPerRow, ScaleMode::kPerGroup}) {
    if (lower == ScaleModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("scale mode=\"", name, "\" is not one of static, per_row, per_group"));
}

double QuantMax(QuantDType dtype) {
  switch (dtype) {
    case QuantDType::kFp8E4M3:
      return 448.0;
    case QuantDType::kFp8E5M2:
      return 57344.0;
    case QuantDType::kInt8:
      return 127.0;
  }
  return 0;
}

bool SupportsInnerAxis(Op op) { return op == Op::kSoftmax || op == Op::kLogSoftmax; }

bool TakesEpsilon(Op op) { return IsRmsNormFamily(op) || IsLayerNormFamily(op); }

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

absl::StatusOr<Op> ParseOp(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (Op op : kAllOps) {
    if (lower == OpName(op)) return op;
  }
  if (lower == "logsoftmax") return Op::kLogSoftmax;
  if (lower == "layernorm") return Op::kLayerNorm;
  if (lower == "rmsnorm") return Op::kRmsNorm;
  if (lower == "attention_softmax") return Op::kScaledMaskedSoftmax;
  return absl::InvalidArgumentError(
      absl::StrCat("op=\"", name,
                   "\" is not one of softmax, log_softmax, layer_norm, rms_norm, "
                   "reduce_scale, scaled_masked_softmax, add_rms_norm, add_layer_norm, "
                   "rms_norm_quant, layer_norm_quant, add_rms_norm_quant, "
                   "add_layer_norm_quant"));
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "float32" || lower == "fp32" || lower == "f32" || lower == "float") {
    return DType::kFloat32;
  }
  if (lower == "float16" || lower == "fp16" || lower == "f16" || lower == "half") {
    return DType::kFloat16;
  }
  if (lower == "bfloat16" || lower == "bf16") return DType::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype=\"", name, "\" is not one of float32, float16, bfloat16"));
}

namespace {

template <typename T, typename ParseFn>
absl::StatusOr<std::vector<T>> ParseList(absl::string_view names, ParseFn parse) {
  std::vector<T> values;
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    absl::StatusOr<T> value = parse(name);
    if (!value.ok()) return value.status();
    values.push_back(*value);
  }
  return values;
}

}  // namespace

absl::StatusOr<std::vector<Op>> ParseOpList(absl::string_view names) {
  return ParseList<Op>(names, ParseOp);
}

absl::StatusOr<std::vector<DType>> ParseDTypeList(absl::string_view names) {
  return ParseList<DType>(names, ParseDType);
}

size_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

}  // namespace kt::kernels
