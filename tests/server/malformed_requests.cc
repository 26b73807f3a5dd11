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
  if (op == pb::OP_LAYER_NORM) request.mutable_layer_norm()->set_epsilon(1e-5);
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
                       kInvalid, "op=99"));
  cases.push_back(Case("dtype unspecified", Edit(kSm, kF32, [](auto& r) { r.clear_dtype(); }),
                       kInvalid, "dtype=0 (DTYPE_UNSPECIFIED)"));
  cases.push_back(Case("dtype unknown number",
                       Edit(kSm, kF32, [](auto& r) { r.set_dtype(static_cast<pb::DType>(42)); }),
                       kInvalid, "dtype=42"));
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
  return cases;
}

}  // namespace kt::server::testing
