// The malformed-request table (see malformed_requests.h).
#include "tests/server/malformed_requests.h"

#include <cmath>
#include <functional>
#include <limits>

namespace kt::server::testing {
namespace {

namespace pb = ::kerntune::v1;

int64_t Size(pb::DType dtype) { return dtype == pb::DTYPE_FLOAT32 ? 4 : 2; }

MalformedCase Case(std::string name, pb::RunRequest request, absl::StatusCode code,
                   std::string message) {
  return MalformedCase{std::move(name), std::move(request), code, std::move(message)};
}

// A valid request changed by `edit`.
pb::RunRequest Edit(pb::Op op, pb::DType dtype, const std::function<void(pb::RunRequest&)>& edit) {
  pb::RunRequest request = ValidRunRequest(op, dtype, 4, 32);
  edit(request);
  return request;
}

}  // namespace

pb::RunRequest ValidRunRequest(pb::Op op, pb::DType dtype, int64_t rows, int64_t cols) {
  pb::RunRequest request;
  request.set_op(op);
  request.set_dtype(dtype);
  request.mutable_shape()->set_rows(rows);
  request.mutable_shape()->set_cols(cols);
  request.mutable_input()->set_inline_data(std::string(rows * cols * Size(dtype), '\0'));
  request.mutable_output()->set_return_inline(true);
  const bool layer_norm = op == pb::OP_LAYER_NORM || op == pb::OP_ADD_LAYER_NORM ||
                          op == pb::OP_LAYER_NORM_QUANT || op == pb::OP_ADD_LAYER_NORM_QUANT;
  const bool rms_norm = op == pb::OP_RMS_NORM || op == pb::OP_ADD_RMS_NORM ||
                        op == pb::OP_RMS_NORM_QUANT || op == pb::OP_ADD_RMS_NORM_QUANT;
  const bool adds = op == pb::OP_ADD_RMS_NORM || op == pb::OP_ADD_LAYER_NORM ||
                    op == pb::OP_ADD_RMS_NORM_QUANT || op == pb::OP_ADD_LAYER_NORM_QUANT;
  const bool quantizes = op == pb::OP_RMS_NORM_QUANT || op == pb::OP_LAYER_NORM_QUANT ||
                         op == pb::OP_ADD_RMS_NORM_QUANT || op == pb::OP_ADD_LAYER_NORM_QUANT;
  pb::TensorRef* residual = nullptr;
  pb::Quantization* quant = nullptr;
  if (layer_norm) {
    request.mutable_layer_norm()->set_epsilon(1e-5);
    if (adds) residual = request.mutable_layer_norm()->mutable_residual();
    if (quantizes) quant = request.mutable_layer_norm()->mutable_quant();
  }
  if (rms_norm) {
    request.mutable_rms_norm()->set_epsilon(1e-6);
    if (adds) residual = request.mutable_rms_norm()->mutable_residual();
    if (quantizes) quant = request.mutable_rms_norm()->mutable_quant();
  }
  // The residual is client memory only: a buffer, resolved later.
  if (residual != nullptr) residual->mutable_buffer()->set_buffer_id("residual-buffer");
  if (quant != nullptr) {
    quant->set_dtype(pb::QUANT_DTYPE_FP8_E4M3);
    quant->set_scale_mode(pb::SCALE_MODE_PER_ROW);
  }
  return request;
}

std::vector<MalformedCase> MalformedRunRequests() {
  using absl::StatusCode;
  constexpr auto kInvalid = StatusCode::kInvalidArgument;
  constexpr pb::Op kSm = pb::OP_SOFTMAX;
  constexpr pb::Op kLn = pb::OP_LAYER_NORM;
  constexpr pb::DType kF32 = pb::DTYPE_FLOAT32;
  constexpr pb::DType kF16 = pb::DTYPE_FLOAT16;
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<MalformedCase> cases;
  cases.push_back(Case("op unspecified", Edit(kSm, kF32, [](auto& r) { r.clear_op(); }),
                       kInvalid, "op=0 (OP_UNSPECIFIED)"));
  cases.push_back(Case("op unknown number",
                       Edit(kSm, kF32, [](auto& r) { r.set_op(static_cast<pb::Op>(99)); }),
                       kInvalid, "op=99 (unknown) must be"));  // issue 27: was "op=99 ()"
  cases.push_back(Case("dtype unspecified", Edit(kSm, kF32, [](auto& r) { r.clear_dtype(); }),
                       kInvalid, "dtype=0 (DTYPE_UNSPECIFIED)"));
  cases.push_back(Case("dtype unknown number",
                       Edit(kSm, kF32, [](auto& r) { r.set_dtype(static_cast<pb::DType>(42)); }),
                       kInvalid, "dtype=42 (unknown) must be"));
  cases.push_back(Case("shape missing", Edit(kSm, kF32, [](auto& r) { r.clear_shape(); }),
                       kInvalid, "shape.rows=0 must be >= 1"));
  cases.push_back(Case("rows zero",
                       Edit(kSm, kF32, [](auto& r) { r.mutable_shape()->set_rows(0); }),
                       kInvalid, "shape.rows=0 must be >= 1"));
  cases.push_back(Case("rows negative",
                       Edit(kSm, kF32, [](auto& r) { r.mutable_shape()->set_rows(-3); }),
                       kInvalid, "shape.rows=-3 must be >= 1"));
  cases.push_back(Case("cols zero",
                       Edit(kSm, kF32, [](auto& r) { r.mutable_shape()->set_cols(0); }),
                       kInvalid, "shape.cols=0 must be >= 1"));
  cases.push_back(Case("cols negative",
                       Edit(kSm, kF32, [](auto& r) { r.mutable_shape()->set_cols(-1); }),
                       kInvalid, "shape.cols=-1 must be >= 1"));
  cases.push_back(Case("elements overflow", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_shape()->set_rows(int64_t{1} << 62);
                         r.mutable_shape()->set_cols(int64_t{1} << 62);
                       }),
                       kInvalid, "overflows a 64-bit byte count"));
  cases.push_back(Case("bytes overflow", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_shape()->set_rows(int64_t{1} << 31);
                         r.mutable_shape()->set_cols(int64_t{1} << 31);
                       }),
                       kInvalid, "shape.rows=2147483648 x shape.cols=2147483648 x 4 bytes"));
  cases.push_back(Case("over the size limit", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_shape()->set_rows(1024);
                         r.mutable_shape()->set_cols(1024);
                       }),
                       StatusCode::kResourceExhausted, "over the daemon's limit of 1048576"));
  cases.push_back(Case("input missing", Edit(kSm, kF32, [](auto& r) { r.clear_input(); }),
                       kInvalid, "input is not set"));
  cases.push_back(Case("input empty", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_input()->set_inline_data("");
                       }),
                       kInvalid, "input.inline_data has 0 bytes, want exactly 512"));
  cases.push_back(Case("input one byte short", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_input()->mutable_inline_data()->pop_back();
                       }),
                       kInvalid, "input.inline_data has 511 bytes, want exactly 512"));
  cases.push_back(Case("input one byte long", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_input()->mutable_inline_data()->push_back('\0');
                       }),
                       kInvalid, "input.inline_data has 513 bytes, want exactly 512"));
  cases.push_back(Case("input sized for another dtype",
                       Edit(kSm, kF32, [](auto& r) { r.set_dtype(pb::DTYPE_BFLOAT16); }),
                       kInvalid, "input.inline_data has 512 bytes, want exactly 256"));
  cases.push_back(Case("output return_inline false", Edit(kSm, kF16, [](auto& r) {
                         r.mutable_output()->set_return_inline(false);
                       }),
                       kInvalid, "output.return_inline=false"));
  cases.push_back(Case("softmax with layer_norm params", Edit(kSm, kF16, [](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(1e-5);
                       }),
                       kInvalid, "layer_norm is set but op=softmax"));
  cases.push_back(Case("log_softmax with gamma", Edit(pb::OP_LOG_SOFTMAX, kF16, [](auto& r) {
                         r.mutable_layer_norm()->mutable_gamma()->set_inline_data(
                             std::string(64, '\0'));
                       }),
                       kInvalid, "layer_norm is set but op=log_softmax"));
  cases.push_back(Case("layer_norm without params",
                       Edit(kLn, kF16, [](auto& r) { r.clear_layer_norm(); }), kInvalid,
                       "layer_norm is not set"));
  cases.push_back(Case("epsilon zero", Edit(kLn, kF16, [](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(0);
                       }),
                       kInvalid, "layer_norm.epsilon=0 must be finite and > 0"));
  cases.push_back(Case("epsilon negative", Edit(kLn, kF16, [](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(-1e-5);
                       }),
                       kInvalid, "layer_norm.epsilon=-1e-05 must be finite and > 0"));
  cases.push_back(Case("epsilon NaN", Edit(kLn, kF16, [kNaN](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(kNaN);
                       }),
                       kInvalid, "layer_norm.epsilon=nan must be finite"));
  cases.push_back(Case("epsilon infinite", Edit(kLn, kF16, [kInf](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(kInf);
                       }),
                       kInvalid, "layer_norm.epsilon=inf must be finite"));
  cases.push_back(Case("gamma too short", Edit(kLn, kF16, [](auto& r) {
                         r.mutable_layer_norm()->mutable_gamma()->set_inline_data(
                             std::string(62, '\0'));
                       }),
                       kInvalid, "layer_norm.gamma.inline_data has 62 bytes, want exactly 64"));
  cases.push_back(Case("beta sized as the input", Edit(kLn, kF16, [](auto& r) {
                         r.mutable_layer_norm()->mutable_beta()->set_inline_data(
                             std::string(256, '\0'));
                       }),
                       kInvalid, "layer_norm.beta.inline_data has 256 bytes, want exactly 64"));
  cases.push_back(Case("gamma without a location", Edit(kLn, kF32, [](auto& r) {
                         r.mutable_layer_norm()->mutable_gamma();
                       }),
                       kInvalid, "layer_norm.gamma is not set"));

  // Middle-axis shapes (shape.inner).
  constexpr pb::Op kRms = pb::OP_RMS_NORM;
  constexpr pb::Op kScale = pb::OP_REDUCE_SCALE;
  constexpr pb::Op kMasked = pb::OP_SCALED_MASKED_SOFTMAX;
  cases.push_back(Case("inner negative",
                       Edit(kSm, kF32, [](auto& r) { r.mutable_shape()->set_inner(-2); }),
                       kInvalid, "shape.inner=-2 must be >= 1"));
  cases.push_back(Case("inner on layer_norm",
                       Edit(kLn, kF16, [](auto& r) { r.mutable_shape()->set_inner(4); }),
                       kInvalid, "shape.inner=4: op=layer_norm reduces the last axis only"));
  cases.push_back(Case("inner on rms_norm",
                       Edit(kRms, kF16, [](auto& r) { r.mutable_shape()->set_inner(2); }),
                       kInvalid, "shape.inner=2: op=rms_norm reduces the last axis only"));
  cases.push_back(Case("inner on scaled_masked_softmax",
                       Edit(kMasked, kF16, [](auto& r) { r.mutable_shape()->set_inner(8); }),
                       kInvalid,
                       "shape.inner=8: op=scaled_masked_softmax reduces the last axis only"));
  cases.push_back(Case("input sized without inner", Edit(pb::OP_LOG_SOFTMAX, kF32, [](auto& r) {
                         r.mutable_shape()->set_inner(3);
                       }),
                       kInvalid, "input.inline_data has 512 bytes, want exactly 1536"));
  cases.push_back(Case("inner overflows", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_shape()->set_rows(int64_t{1} << 20);
                         r.mutable_shape()->set_cols(int64_t{1} << 20);
                         r.mutable_shape()->set_inner(int64_t{1} << 30);
                       }),
                       kInvalid,
                       "shape.rows=1048576 x shape.cols=1048576 x shape.inner=1073741824 x 4 "
                       "bytes overflows a 64-bit byte count"));
  cases.push_back(Case("inner bytes overflow", Edit(kSm, kF16, [](auto& r) {
                         r.mutable_shape()->set_rows(int64_t{1} << 30);
                         r.mutable_shape()->set_cols(int64_t{1} << 16);
                         r.mutable_shape()->set_inner(int64_t{1} << 16);
                       }),
                       kInvalid, "x shape.inner=65536 x 2 bytes overflows"));
  cases.push_back(Case("inner over the size limit", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_shape()->set_rows(64);
                         r.mutable_shape()->set_cols(64);
                         r.mutable_shape()->set_inner(128);
                       }),
                       StatusCode::kResourceExhausted,
                       "shape.rows=64 x shape.cols=64 x shape.inner=128 is 2097152 bytes"));

  // RMSNorm.
  cases.push_back(Case("rms_norm without params",
                       Edit(kRms, kF16, [](auto& r) { r.clear_rms_norm(); }), kInvalid,
                       "rms_norm is not set: op=rms_norm needs rms_norm.epsilon"));
  cases.push_back(Case("rms_norm epsilon zero", Edit(kRms, kF16, [](auto& r) {
                         r.mutable_rms_norm()->set_epsilon(0);
                       }),
                       kInvalid, "rms_norm.epsilon=0 must be finite and > 0"));
  cases.push_back(Case("rms_norm epsilon NaN", Edit(kRms, kF32, [kNaN](auto& r) {
                         r.mutable_rms_norm()->set_epsilon(kNaN);
                       }),
                       kInvalid, "rms_norm.epsilon=nan must be finite"));
  cases.push_back(Case("rms_norm weight too short", Edit(kRms, kF16, [](auto& r) {
                         r.mutable_rms_norm()->mutable_weight()->set_inline_data(
                             std::string(62, '\0'));
                       }),
                       kInvalid, "rms_norm.weight.inline_data has 62 bytes, want exactly 64"));
  cases.push_back(Case("rms_norm weight without a location", Edit(kRms, kF32, [](auto& r) {
                         r.mutable_rms_norm()->mutable_weight();
                       }),
                       kInvalid, "rms_norm.weight is not set"));
  cases.push_back(Case("rms_norm inv_rms both inline and in memory", Edit(kRms, kF32, [](auto& r) {
                         r.mutable_rms_norm()->set_want_inv_rms(true);
                         r.mutable_rms_norm()->mutable_inv_rms()->mutable_buffer()->set_buffer_id(
                             "0123456789abcdef");
                       }),
                       kInvalid,
                       "rms_norm.want_inv_rms returns rms_norm.inv_rms inline; it cannot be "
                       "combined with rms_norm.inv_rms in client memory"));
  cases.push_back(Case("rms_norm inv_rms not in memory", Edit(kRms, kF32, [](auto& r) {
                         r.mutable_rms_norm()->mutable_inv_rms()->set_return_inline(true);
                       }),
                       kInvalid, "rms_norm.inv_rms must name client memory"));
  cases.push_back(Case("rms_norm inv_rms misaligned", Edit(kRms, kF16, [](auto& r) {
                         auto* buffer = r.mutable_rms_norm()->mutable_inv_rms()->mutable_buffer();
                         buffer->set_buffer_id("0123456789abcdef");
                         buffer->set_offset_bytes(6);
                       }),
                       kInvalid,
                       "rms_norm.inv_rms.buffer.offset_bytes=6 must be >= 0 and a multiple of 4"));
  cases.push_back(Case("softmax with rms_norm params", Edit(kSm, kF16, [](auto& r) {
                         r.mutable_rms_norm()->set_epsilon(1e-6);
                       }),
                       kInvalid, "rms_norm is set but op=softmax takes no rms_norm parameters"));
  cases.push_back(Case("layer_norm with rms_norm params", Edit(kLn, kF16, [](auto& r) {
                         r.mutable_rms_norm()->set_epsilon(1e-6);
                       }),
                       kInvalid, "rms_norm is set but op=layer_norm"));
  cases.push_back(Case("rms_norm with layer_norm params", Edit(kRms, kF16, [](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(1e-6);
                       }),
                       kInvalid, "layer_norm is set but op=rms_norm"));

  // ReduceScale.
  cases.push_back(Case("softmax with reduce_scale params", Edit(kSm, kF32, [](auto& r) {
                         r.mutable_reduce_scale()->mutable_row_scale()->set_return_inline(true);
                       }),
                       kInvalid, "reduce_scale is set but op=softmax"));
  cases.push_back(Case("reduce_scale with layer_norm params", Edit(kScale, kF32, [](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(1e-5);
                       }),
                       kInvalid, "layer_norm is set but op=reduce_scale"));
  cases.push_back(Case("row_scale return_inline false", Edit(kScale, kF16, [](auto& r) {
                         r.mutable_reduce_scale()->mutable_row_scale()->set_return_inline(false);
                       }),
                       kInvalid, "reduce_scale.row_scale.return_inline=false"));
  cases.push_back(Case("row_scale buffer id empty", Edit(kScale, kF16, [](auto& r) {
                         r.mutable_reduce_scale()->mutable_row_scale()->mutable_buffer();
                       }),
                       kInvalid, "reduce_scale.row_scale.buffer.buffer_id must be"));
  cases.push_back(Case("row_scale misaligned", Edit(kScale, kF16, [](auto& r) {
                         auto* buffer =
                             r.mutable_reduce_scale()->mutable_row_scale()->mutable_buffer();
                         buffer->set_buffer_id("0123456789abcdef");
                         buffer->set_offset_bytes(2);
                       }),
                       kInvalid,
                       "reduce_scale.row_scale.buffer.offset_bytes=2 must be >= 0 and a multiple "
                       "of 4"));
  cases.push_back(Case("row_scale ipc handle short", Edit(kScale, kF32, [](auto& r) {
                         r.mutable_reduce_scale()->mutable_row_scale()->mutable_cuda_ipc()->set_handle(
                             std::string(63, 'h'));
                       }),
                       kInvalid, "reduce_scale.row_scale.cuda_ipc.handle has 63 bytes"));

  // Scaled-masked softmax.
  cases.push_back(Case("softmax with a mask", Edit(kSm, kF16, [](auto& r) {
                         auto* params = r.mutable_scaled_masked_softmax();
                         params->set_mask_rows(4);
                         params->mutable_mask()->set_inline_data(std::string(256, '\0'));
                       }),
                       kInvalid, "scaled_masked_softmax is set but op=softmax"));
  cases.push_back(Case("log_softmax causal", Edit(pb::OP_LOG_SOFTMAX, kF16, [](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_causal(true);
                       }),
                       kInvalid, "scaled_masked_softmax is set but op=log_softmax"));
  cases.push_back(Case("mask without mask_rows", Edit(kMasked, kF16, [](auto& r) {
                         r.mutable_scaled_masked_softmax()->mutable_mask()->set_inline_data(
                             std::string(256, '\0'));
                       }),
                       kInvalid, "scaled_masked_softmax.mask_rows=0 must be >= 1 with a mask"));
  cases.push_back(Case("causal without mask_rows", Edit(kMasked, kF32, [](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_causal(true);
                       }),
                       kInvalid, "scaled_masked_softmax.mask_rows=0 must be >= 1 with causal"));
  cases.push_back(Case("mask_rows negative", Edit(kMasked, kF32, [](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_mask_rows(-1);
                       }),
                       kInvalid, "scaled_masked_softmax.mask_rows=-1 must be >= 0"));
  cases.push_back(Case("mask_rows does not divide rows", Edit(kMasked, kF32, [](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_mask_rows(3);
                         r.mutable_scaled_masked_softmax()->set_causal(true);
                       }),
                       kInvalid, "scaled_masked_softmax.mask_rows=3 does not divide shape.rows=4"));
  cases.push_back(Case("mask_rows past rows", Edit(kMasked, kF32, [](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_mask_rows(8);
                       }),
                       kInvalid, "scaled_masked_softmax.mask_rows=8 does not divide shape.rows=4"));
  cases.push_back(Case("mask sized as the input", Edit(kMasked, kF16, [](auto& r) {
                         auto* params = r.mutable_scaled_masked_softmax();
                         params->set_mask_rows(2);
                         params->mutable_mask()->set_inline_data(std::string(256, '\0'));
                       }),
                       kInvalid,
                       "scaled_masked_softmax.mask.inline_data has 256 bytes, want exactly 128"));
  cases.push_back(Case("mask in another dtype", Edit(kMasked, kF32, [](auto& r) {
                         auto* params = r.mutable_scaled_masked_softmax();
                         params->set_mask_rows(4);
                         params->mutable_mask()->set_inline_data(std::string(256, '\0'));
                       }),
                       kInvalid,
                       "scaled_masked_softmax.mask.inline_data has 256 bytes, want exactly 512"));
  cases.push_back(Case("mask without a location", Edit(kMasked, kF32, [](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_mask_rows(4);
                         r.mutable_scaled_masked_softmax()->mutable_mask();
                       }),
                       kInvalid, "scaled_masked_softmax.mask is not set"));
  cases.push_back(Case("mask misaligned", Edit(kMasked, kF32, [](auto& r) {
                         auto* params = r.mutable_scaled_masked_softmax();
                         params->set_mask_rows(4);
                         params->mutable_mask()->mutable_buffer()->set_buffer_id("0123456789abcdef");
                         params->mutable_mask()->mutable_buffer()->set_offset_bytes(-4);
                       }),
                       kInvalid, "scaled_masked_softmax.mask.buffer.offset_bytes=-4"));
  cases.push_back(Case("scale infinite", Edit(kMasked, kF32, [kInf](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_scale(kInf);
                       }),
                       kInvalid, "scaled_masked_softmax.scale=inf must be finite"));
  cases.push_back(Case("scale NaN", Edit(kMasked, kF16, [kNaN](auto& r) {
                         r.mutable_scaled_masked_softmax()->set_scale(kNaN);
                       }),
                       kInvalid, "scaled_masked_softmax.scale=nan must be finite"));
  cases.push_back(Case("masked softmax with layer_norm params", Edit(kMasked, kF16, [](auto& r) {
                         r.mutable_layer_norm()->set_epsilon(1e-5);
                       }),
                       kInvalid, "layer_norm is set but op=scaled_masked_softmax"));
  cases.push_back(Case("mask over the size limit", Edit(kMasked, kF32, [](auto& r) {
                         r.mutable_shape()->set_rows(512);
                         r.mutable_shape()->set_cols(1024);
                         r.mutable_input()->mutable_buffer()->set_buffer_id("0123456789abcdef");
                         r.mutable_output()->mutable_buffer()->set_buffer_id("0123456789abcdef");
                         auto* params = r.mutable_scaled_masked_softmax();
                         params->set_mask_rows(512);
                         params->mutable_mask()->set_inline_data(std::string(512 * 1024 * 4, '\0'));
                       }),
                       StatusCode::kResourceExhausted,
                       "scaled_masked_softmax.mask is 2097152 bytes, over the daemon's limit"));
  // The LLM ops (issue 44): residual, quantization, weight offset, strides.
  constexpr pb::Op kAddRms = pb::OP_ADD_RMS_NORM;
  constexpr pb::Op kAddLn = pb::OP_ADD_LAYER_NORM;
  constexpr pb::Op kRmsQ = pb::OP_RMS_NORM_QUANT;
  constexpr pb::Op kLnQ = pb::OP_LAYER_NORM_QUANT;
  constexpr pb::Op kAddRmsQ = pb::OP_ADD_RMS_NORM_QUANT;
  const auto static_scale = [](pb::RunRequest& r, float value) {
    pb::Quantization* quant = r.mutable_rms_norm()->mutable_quant();
    quant->set_scale_mode(pb::SCALE_MODE_STATIC);
    quant->mutable_scale()->set_inline_data(
        std::string(reinterpret_cast<const char*>(&value), sizeof(value)));
  };
  cases.push_back(Case("add_rms_norm without residual",
                       Edit(kAddRms, kF16, [](auto& r) { r.mutable_rms_norm()->clear_residual(); }),
                       kInvalid, "rms_norm.residual is not set: op=add_rms_norm adds a residual"));
  cases.push_back(Case("add_layer_norm without params",
                       Edit(kAddLn, kF16, [](auto& r) { r.clear_layer_norm(); }), kInvalid,
                       "layer_norm is not set: op=add_layer_norm needs layer_norm.epsilon"));
  cases.push_back(Case("add_layer_norm with rms_norm params",
                       Edit(kAddLn, kF16, [](auto& r) { r.mutable_rms_norm()->set_epsilon(1e-6); }),
                       kInvalid, "rms_norm is set but op=add_layer_norm takes no rms_norm"));
  cases.push_back(Case("residual inline",
                       Edit(kAddLn, kF32,
                            [](auto& r) {
                              r.mutable_layer_norm()->mutable_residual()->set_inline_data(
                                  std::string(512, '\0'));
                            }),
                       kInvalid,
                       "layer_norm.residual.inline_data is refused: the residual is read and "
                       "written back: pass it as a buffer or cuda_ipc"));
  cases.push_back(
      Case("residual without a location",
           Edit(kAddRms, kF32, [](auto& r) { r.mutable_rms_norm()->mutable_residual()->Clear(); }),
           kInvalid, "rms_norm.residual is not set: the residual is read and written"));
  cases.push_back(
      Case("residual misaligned",
           Edit(kAddRms, kF16,
                [](auto& r) {
                  r.mutable_rms_norm()->mutable_residual()->mutable_buffer()->set_offset_bytes(3);
                }),
           kInvalid,
           "rms_norm.residual.buffer.offset_bytes=3 must be >= 0 and a "
           "multiple of 2"));
  cases.push_back(
      Case("residual on rms_norm",
           Edit(kRms, kF16,
                [](auto& r) {
                  r.mutable_rms_norm()->mutable_residual()->mutable_buffer()->set_buffer_id("b");
                }),
           kInvalid, "rms_norm.residual is set but op=rms_norm adds none"));
  cases.push_back(Case("quant on a non-quant op",
                       Edit(kLn, kF16,
                            [](auto& r) {
                              r.mutable_layer_norm()->mutable_quant()->set_dtype(
                                  pb::QUANT_DTYPE_INT8);
                            }),
                       kInvalid, "layer_norm.quant is set but op=layer_norm writes no codes"));
  cases.push_back(Case("quant on add_rms_norm",
                       Edit(kAddRms, kF16, [](auto& r) { r.mutable_rms_norm()->mutable_quant(); }),
                       kInvalid, "rms_norm.quant is set but op=add_rms_norm writes no codes"));
  cases.push_back(Case("quant missing",
                       Edit(kRmsQ, kF16, [](auto& r) { r.mutable_rms_norm()->clear_quant(); }),
                       kInvalid, "rms_norm.quant is not set: op=rms_norm_quant needs"));
  cases.push_back(
      Case("quant dtype unspecified",
           Edit(kRmsQ, kF16, [](auto& r) { r.mutable_rms_norm()->mutable_quant()->clear_dtype(); }),
           kInvalid, "rms_norm.quant.dtype=0 (QUANT_DTYPE_UNSPECIFIED) must be"));
  cases.push_back(Case("quant dtype unknown",
                       Edit(kLnQ, kF16,
                            [](auto& r) {
                              r.mutable_layer_norm()->mutable_quant()->set_dtype(
                                  static_cast<pb::QuantDType>(9));
                            }),
                       kInvalid, "layer_norm.quant.dtype=9 (unknown) must be"));
  cases.push_back(
      Case("scale mode unspecified",
           Edit(kAddRmsQ, kF16,
                [](auto& r) { r.mutable_rms_norm()->mutable_quant()->clear_scale_mode(); }),
           kInvalid, "rms_norm.quant.scale_mode=0 (SCALE_MODE_UNSPECIFIED) must be"));
  cases.push_back(Case("static without scale",
                       Edit(kRmsQ, kF16,
                            [](auto& r) {
                              r.mutable_rms_norm()->mutable_quant()->set_scale_mode(
                                  pb::SCALE_MODE_STATIC);
                            }),
                       kInvalid, "rms_norm.quant.scale is not set: a static quantization"));
  cases.push_back(
      Case("static with scales",
           Edit(kRmsQ, kF16,
                [static_scale](auto& r) {
                  static_scale(r, 0.5f);
                  r.mutable_rms_norm()->mutable_quant()->mutable_scales()->set_return_inline(true);
                }),
           kInvalid,
           "rms_norm.quant.scales is set but a static quantization writes "
           "no scales"));
  cases.push_back(Case("static with scale_ub",
                       Edit(kRmsQ, kF16,
                            [static_scale](auto& r) {
                              static_scale(r, 0.5f);
                              r.mutable_rms_norm()->mutable_quant()->set_scale_ub(10);
                            }),
                       kInvalid, "rms_norm.quant.scale_ub=10 bounds computed scales"));
  cases.push_back(
      Case("dynamic with scale",
           Edit(kLnQ, kF16,
                [](auto& r) {
                  r.mutable_layer_norm()->mutable_quant()->mutable_scale()->set_inline_data(
                      std::string(4, '\0'));
                }),
           kInvalid,
           "layer_norm.quant.scale is set but a per_row quantization "
           "computes its scales"));
  cases.push_back(Case("static scale zero",
                       Edit(kRmsQ, kF16, [static_scale](auto& r) { static_scale(r, 0.0f); }),
                       kInvalid, "rms_norm.quant.scale=0 must be finite and > 0"));
  cases.push_back(Case(
      "static scale NaN",
      Edit(kRmsQ, kF32,
           [static_scale](auto& r) { static_scale(r, std::numeric_limits<float>::quiet_NaN()); }),
      kInvalid, "rms_norm.quant.scale=nan must be finite and > 0"));
  cases.push_back(Case(
      "static scale infinite",
      Edit(kRmsQ, kF32,
           [static_scale](auto& r) { static_scale(r, std::numeric_limits<float>::infinity()); }),
      kInvalid, "rms_norm.quant.scale=inf must be finite and > 0"));
  cases.push_back(Case("static scale negative",
                       Edit(kRmsQ, kF32, [static_scale](auto& r) { static_scale(r, -2.0f); }),
                       kInvalid, "rms_norm.quant.scale=-2 must be finite and > 0"));
  cases.push_back(
      Case("static scale of two bytes",
           Edit(kRmsQ, kF16,
                [static_scale](auto& r) {
                  static_scale(r, 1.0f);
                  r.mutable_rms_norm()->mutable_quant()->mutable_scale()->set_inline_data(
                      std::string(2, '\0'));
                }),
           kInvalid, "rms_norm.quant.scale.inline_data has 2 bytes, want exactly 4"));
  cases.push_back(Case(
      "group_size 96",
      [] {
        pb::RunRequest r = ValidRunRequest(kRmsQ, pb::DTYPE_FLOAT16, 4, 192);
        r.mutable_rms_norm()->mutable_quant()->set_scale_mode(pb::SCALE_MODE_PER_GROUP);
        r.mutable_rms_norm()->mutable_quant()->set_group_size(96);
        return r;
      }(),
      kInvalid, "rms_norm.quant.group_size=96 must be 64 or 128 and divide shape.cols=192"));
  cases.push_back(
      Case("group_size not dividing cols",
           Edit(kRmsQ, kF16,
                [](auto& r) {
                  r.mutable_rms_norm()->mutable_quant()->set_scale_mode(pb::SCALE_MODE_PER_GROUP);
                  r.mutable_rms_norm()->mutable_quant()->set_group_size(64);
                }),
           kInvalid, "rms_norm.quant.group_size=64 must be 64 or 128 and divide shape.cols=32"));
  cases.push_back(
      Case("group_size on per_row",
           Edit(kRmsQ, kF16,
                [](auto& r) { r.mutable_rms_norm()->mutable_quant()->set_group_size(128); }),
           kInvalid, "rms_norm.quant.group_size=128 is for SCALE_MODE_PER_GROUP"));
  cases.push_back(Case(
      "scale_ub negative",
      Edit(kRmsQ, kF16, [](auto& r) { r.mutable_rms_norm()->mutable_quant()->set_scale_ub(-1); }),
      kInvalid, "rms_norm.quant.scale_ub=-1 must be finite and >= 0"));
  cases.push_back(
      Case("scale_ub NaN",
           Edit(kLnQ, kF16,
                [kNaN](auto& r) { r.mutable_layer_norm()->mutable_quant()->set_scale_ub(kNaN); }),
           kInvalid, "layer_norm.quant.scale_ub=nan must be finite and >= 0"));
  cases.push_back(Case("dynamic scales misaligned",
                       Edit(kRmsQ, kF16,
                            [](auto& r) {
                              auto* scales =
                                  r.mutable_rms_norm()->mutable_quant()->mutable_scales();
                              scales->mutable_buffer()->set_buffer_id("0123456789abcdef");
                              scales->mutable_buffer()->set_offset_bytes(2);
                            }),
                       kInvalid, "rms_norm.quant.scales.buffer.offset_bytes=2"));
  cases.push_back(
      Case("weight_offset without weight",
           Edit(kRms, kF16, [](auto& r) { r.mutable_rms_norm()->set_weight_offset(1); }), kInvalid,
           "rms_norm.weight_offset=1 needs rms_norm.weight"));
  cases.push_back(
      Case("weight_offset NaN",
           Edit(kAddRms, kF16, [kNaN](auto& r) { r.mutable_rms_norm()->set_weight_offset(kNaN); }),
           kInvalid, "rms_norm.weight_offset=nan must be finite"));
  cases.push_back(Case("row stride below cols",
                       Edit(kRms, kF16, [](auto& r) { r.mutable_row_strides()->set_input(16); }),
                       kInvalid, "row_strides.input=16 must be >= shape.cols=32"));
  cases.push_back(Case("row stride negative",
                       Edit(kSm, kF32, [](auto& r) { r.mutable_row_strides()->set_output(-32); }),
                       kInvalid, "row_strides.output=-32 must be >= 0"));
  cases.push_back(
      Case("row stride overflows",
           Edit(kRms, kF16, [](auto& r) { r.mutable_row_strides()->set_input(int64_t{1} << 62); }),
           kInvalid,
           "row_strides.input=4611686018427387904 with shape.rows=4 puts the input's "
           "last row past a 64-bit byte offset"));
  cases.push_back(Case("row stride overflows the byte count",
                       Edit(kRms, kF32,
                            [](auto& r) {
                              r.mutable_row_strides()->set_output(int64_t{1} << 61);
                              r.mutable_output()->mutable_buffer()->set_buffer_id(
                                  "0123456789abcdef");
                            }),
                       kInvalid, "puts the output's last row past a 64-bit byte offset"));
  cases.push_back(Case("group stride overflows",
                       Edit(kRms, kF16,
                            [](auto& r) {
                              r.mutable_row_strides()->set_group_rows(2);
                              r.mutable_row_strides()->set_input_group(int64_t{1} << 62);
                            }),
                       kInvalid,
                       "row_strides.input_group=4611686018427387904 with shape.rows=4 "
                       "puts the input's last row past a 64-bit byte offset"));
  cases.push_back(Case("default group stride overflows",
                       Edit(kRms, kF16,
                            [](auto& r) {
                              r.mutable_shape()->set_rows(2);
                              r.mutable_input()->set_inline_data(std::string(128, '\0'));
                              r.mutable_row_strides()->set_group_rows(2);
                              r.mutable_row_strides()->set_input(int64_t{1} << 62);
                            }),
                       kInvalid, "puts the input's last row past a 64-bit byte offset"));
  cases.push_back(Case("group stride minimum overflows",
                       Edit(kRms, kF16,
                            [](auto& r) {
                              r.mutable_row_strides()->set_group_rows(2);
                              r.mutable_row_strides()->set_input(int64_t{1} << 62);
                              r.mutable_row_strides()->set_input_group(int64_t{1} << 62);
                            }),
                       kInvalid,
                       "row_strides.input_group=4611686018427387904 must be >= "
                       "(row_strides.group_rows - 1) * row stride + shape.cols = "
                       "4611686018427387936"));
  cases.push_back(
      Case("groups on an op other than rms_norm",
           Edit(kSm, kF16, [](auto& r) { r.mutable_row_strides()->set_group_rows(2); }), kInvalid,
           "row_strides.group_rows=2: grouped rows (per-head views, QK-norm) are for rms_norm, "
           "not op=softmax"));
  cases.push_back(
      Case("group_rows not dividing rows",
           Edit(kRms, kF16, [](auto& r) { r.mutable_row_strides()->set_group_rows(3); }), kInvalid,
           "row_strides.group_rows=3 must divide shape.rows=4"));
  cases.push_back(
      Case("group stride without group_rows",
           Edit(kRms, kF16, [](auto& r) { r.mutable_row_strides()->set_output_group(128); }),
           kInvalid, "row_strides.output_group=128 needs row_strides.group_rows"));
  cases.push_back(Case("groups overlapping",
                       Edit(kRms, kF16,
                            [](auto& r) {
                              r.mutable_row_strides()->set_group_rows(2);
                              r.mutable_row_strides()->set_input_group(40);
                            }),
                       kInvalid,
                       "row_strides.input_group=40 must be >= (row_strides.group_rows "
                       "- 1) * row stride + shape.cols = 64"));
  cases.push_back(Case("residual stride on rms_norm",
                       Edit(kRms, kF16, [](auto& r) { r.mutable_row_strides()->set_residual(64); }),
                       kInvalid,
                       "row_strides.residual=64 is set but op=rms_norm takes no "
                       "residual"));
  cases.push_back(Case("strides on a middle axis",
                       Edit(kSm, kF32,
                            [](auto& r) {
                              r.mutable_shape()->set_inner(2);
                              r.mutable_row_strides()->set_input(64);
                            }),
                       kInvalid, "row strides are for last-axis rows"));
  cases.push_back(Case("strided output returned inline",
                       Edit(kRms, kF16, [](auto& r) { r.mutable_row_strides()->set_output(64); }),
                       kInvalid,
                       "lay out the output in client memory, but it is returned "
                       "inline"));
  cases.push_back(Case("strided inline input sized contiguous",
                       Edit(kSm, kF32, [](auto& r) { r.mutable_row_strides()->set_input(64); }),
                       kInvalid, "input.inline_data has 512 bytes, want exactly 896"));
  return cases;
}

}  // namespace kt::server::testing
