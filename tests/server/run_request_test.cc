// Validation of Run requests: every malformed request gets its exact code
// and a message naming the field; valid ones pass with the right views.
#include "server/run_request.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "server/service.h"
#include "tests/server/malformed_requests.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using kernels::Operand;
using ::kt::server::testing::kTableMaxRequestBytes;
using ::kt::server::testing::MalformedRunRequests;
using ::kt::server::testing::ValidRunRequest;
using ::testing::HasSubstr;

TEST(RunRequestTest, TableHasAtLeastTwentyCases) {
  EXPECT_GE(MalformedRunRequests().size(), 20u);
}

TEST(RunRequestTest, EachMalformedRequestGetsItsCodeAndNamesTheField) {
  for (const auto& c : MalformedRunRequests()) {
    absl::StatusOr<RunRequest> got = ValidateRunRequest(c.request, kTableMaxRequestBytes);
    ASSERT_FALSE(got.ok()) << c.name;
    EXPECT_EQ(got.status().code(), c.code) << c.name << ": " << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.message)) << c.name;
  }
}

TEST(RunRequestTest, ValidRequestsPassWithTheirFields) {
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX, pb::OP_LAYER_NORM, pb::OP_RMS_NORM,
                    pb::OP_REDUCE_SCALE, pb::OP_SCALED_MASKED_SOFTMAX}) {
    for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
      const pb::RunRequest request = ValidRunRequest(op, dtype, 3, 5);
      absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->shape.rows, 3);
      EXPECT_EQ(got->shape.cols, 5);
      EXPECT_EQ(got->shape.inner, 1);
      EXPECT_EQ(got->tensor(Operand::kInput).bytes,
                static_cast<int64_t>(request.input().inline_data().size()));
      EXPECT_EQ(got->tensor(Operand::kInput).where, TensorView::Where::kInline);
      EXPECT_EQ(got->tensor(Operand::kOutput).where, TensorView::Where::kInline);
      EXPECT_EQ(proto::OpToProto(got->op), op);
      EXPECT_EQ(proto::DTypeToProto(got->dtype), dtype);
    }
  }
}

TEST(RunRequestTest, OutputMayBeLeftUnsetAndLayerNormTakesAffineAndStats) {
  pb::RunRequest request = ValidRunRequest(pb::OP_LAYER_NORM, pb::DTYPE_FLOAT16, 2, 8);
  request.clear_output();
  request.mutable_layer_norm()->mutable_gamma()->set_inline_data(std::string(16, '\1'));
  request.mutable_layer_norm()->mutable_beta()->set_inline_data(std::string(16, '\2'));
  request.mutable_layer_norm()->set_want_mean_inv_std(true);
  request.mutable_layer_norm()->set_epsilon(0.25);
  absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tensor(Operand::kGamma).bytes, 16);
  EXPECT_EQ(got->tensor(Operand::kBeta).bytes, 16);
  EXPECT_EQ(got->tensor(Operand::kMean).where, TensorView::Where::kInline);
  EXPECT_EQ(got->tensor(Operand::kMean).bytes, 2 * 4);
  EXPECT_EQ(got->params.epsilon, 0.25);
}

TEST(RunRequestTest, MiddleAxisShapesSizeTheInputAndOutput) {
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX}) {
    pb::RunRequest request = ValidRunRequest(op, pb::DTYPE_BFLOAT16, 3, 5);
    request.mutable_shape()->set_inner(7);
    request.mutable_input()->set_inline_data(std::string(3 * 5 * 7 * 2, '\0'));
    absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->shape, (kernels::Shape{3, 5, 7}));
    EXPECT_EQ(got->tensor(Operand::kInput).bytes, 3 * 5 * 7 * 2);
    EXPECT_EQ(got->tensor(Operand::kOutput).bytes, 3 * 5 * 7 * 2);
    // inner 1 is the last axis, like inner unset.
    request.mutable_shape()->set_inner(1);
    request.mutable_input()->set_inline_data(std::string(3 * 5 * 2, '\0'));
    got = ValidateRunRequest(request, kTableMaxRequestBytes);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->shape.inner, 1);
  }
}

TEST(RunRequestTest, RmsNormTakesItsWeightEpsilonAndInvRms) {
  pb::RunRequest request = ValidRunRequest(pb::OP_RMS_NORM, pb::DTYPE_FLOAT16, 6, 8);
  request.mutable_rms_norm()->set_epsilon(0.5);
  request.mutable_rms_norm()->mutable_weight()->set_inline_data(std::string(16, '\1'));
  request.mutable_rms_norm()->set_want_inv_rms(true);
  absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->params.epsilon, 0.5);
  EXPECT_EQ(got->tensor(Operand::kGamma).where, TensorView::Where::kInline);
  EXPECT_EQ(got->tensor(Operand::kGamma).bytes, 16);
  EXPECT_FALSE(got->tensor(Operand::kBeta).present());
  EXPECT_FALSE(got->tensor(Operand::kMean).present());
  EXPECT_EQ(got->tensor(Operand::kInvStd).where, TensorView::Where::kInline);
  EXPECT_EQ(got->tensor(Operand::kInvStd).bytes, 6 * 4);
  EXPECT_FALSE(got->tensor(Operand::kRowScale).present());
  // Without want_inv_rms there is no per-row output.
  request.mutable_rms_norm()->set_want_inv_rms(false);
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->tensor(Operand::kInvStd).present());
  // Or it goes to client memory.
  request.mutable_rms_norm()->mutable_inv_rms()->mutable_buffer()->set_buffer_id("abcd");
  request.mutable_rms_norm()->mutable_inv_rms()->mutable_buffer()->set_offset_bytes(64);
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tensor(Operand::kInvStd).where, TensorView::Where::kAbsent);  // until resolved
  EXPECT_EQ(got->tensor(Operand::kInvStd).bytes, 6 * 4);
}

TEST(RunRequestTest, ReduceScaleAlwaysReturnsItsScales) {
  pb::RunRequest request = ValidRunRequest(pb::OP_REDUCE_SCALE, pb::DTYPE_FLOAT32, 9, 4);
  absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tensor(Operand::kRowScale).where, TensorView::Where::kInline);
  EXPECT_EQ(got->tensor(Operand::kRowScale).bytes, 9 * 4);
  EXPECT_FALSE(got->tensor(Operand::kInvStd).present());
  request.mutable_reduce_scale()->mutable_row_scale()->set_return_inline(true);
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tensor(Operand::kRowScale).where, TensorView::Where::kInline);
}

TEST(RunRequestTest, ScaledMaskedSoftmaxTakesScaleMaskAndCausal) {
  // (batch 2, heads 2, q 3, k 8): rows 12.
  pb::RunRequest request = ValidRunRequest(pb::OP_SCALED_MASKED_SOFTMAX, pb::DTYPE_FLOAT16, 12, 8);
  absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->params.scale, 1.0);  // absent: 1
  EXPECT_FALSE(got->tensor(Operand::kMask).present());
  EXPECT_EQ(got->params.mask_rows, 0);
  EXPECT_FALSE(got->params.causal);
  auto* params = request.mutable_scaled_masked_softmax();
  params->set_scale(0.125);
  params->set_mask_rows(3);
  params->set_causal(true);
  params->mutable_mask()->set_inline_data(std::string(3 * 8 * 2, '\0'));
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->params.scale, 0.125);
  EXPECT_EQ(got->params.mask_rows, 3);
  EXPECT_TRUE(got->params.causal);
  EXPECT_EQ(got->tensor(Operand::kMask).where, TensorView::Where::kInline);
  EXPECT_EQ(got->tensor(Operand::kMask).bytes, 3 * 8 * 2);
  // A scale of 0 is a scale (softmax of the mask), not "absent".
  params->set_scale(0);
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->params.scale, 0.0);
}

TEST(RunRequestTest, TheLlmOpsPassWithTheirOperandsSized) {
  for (pb::Op op :
       {pb::OP_ADD_RMS_NORM, pb::OP_ADD_LAYER_NORM, pb::OP_RMS_NORM_QUANT, pb::OP_LAYER_NORM_QUANT,
        pb::OP_ADD_RMS_NORM_QUANT, pb::OP_ADD_LAYER_NORM_QUANT}) {
    for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
      SCOPED_TRACE(pb::Op_Name(op) + " " + pb::DType_Name(dtype));
      const pb::RunRequest request = ValidRunRequest(op, dtype, 3, 5);
      absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(proto::OpToProto(got->op), op);
      const int64_t element = dtype == pb::DTYPE_FLOAT32 ? 4 : 2;
      const bool quant = kernels::QuantizesOutput(got->op);
      EXPECT_EQ(got->tensor(Operand::kOutput).bytes, 3 * 5 * (quant ? 1 : element));
      // The residual is a buffer, resolved in stage 2; sized now.
      EXPECT_EQ(got->tensor(Operand::kResidual).bytes,
                kernels::AddsResidual(got->op) ? 3 * 5 * element : 0);
      EXPECT_FALSE(got->tensor(Operand::kResidual).present());
      // Dynamic scales (per_row) come back inline; no static scale is read.
      EXPECT_EQ(got->tensor(Operand::kRowScale).where,
                quant ? TensorView::Where::kInline : TensorView::Where::kAbsent);
      if (quant) {
        EXPECT_EQ(got->tensor(Operand::kRowScale).bytes, 3 * 4);
      }
      EXPECT_FALSE(got->tensor(Operand::kQuantScale).present());
    }
  }
}

TEST(RunRequestTest, QuantizationParamsAndScalesFollowTheScaleMode) {
  pb::RunRequest request = ValidRunRequest(pb::OP_LAYER_NORM_QUANT, pb::DTYPE_BFLOAT16, 4, 256);
  pb::Quantization* quant = request.mutable_layer_norm()->mutable_quant();
  quant->set_dtype(pb::QUANT_DTYPE_INT8);
  quant->set_scale_mode(pb::SCALE_MODE_PER_GROUP);
  quant->set_group_size(128);
  quant->set_scale_ub(30);
  absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->params.quant_dtype, kernels::QuantDType::kInt8);
  EXPECT_EQ(got->params.scale_mode, kernels::ScaleMode::kPerGroup);
  EXPECT_EQ(got->params.group_size, 128);
  EXPECT_EQ(got->params.scale_ub, 30);
  EXPECT_EQ(got->tensor(Operand::kRowScale).where, TensorView::Where::kInline);
  EXPECT_EQ(got->tensor(Operand::kRowScale).bytes, 4 * 2 * 4);  // rows x groups floats
  EXPECT_EQ(got->tensor(Operand::kOutput).bytes, 4 * 256);      // one-byte codes

  // Static: one float32 scale read, none written.
  quant->set_scale_mode(pb::SCALE_MODE_STATIC);
  quant->set_group_size(0);
  quant->set_scale_ub(0);
  const float scale = 0.25f;
  quant->mutable_scale()->set_inline_data(
      std::string(reinterpret_cast<const char*>(&scale), sizeof(scale)));
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tensor(Operand::kQuantScale).where, TensorView::Where::kInline);
  EXPECT_EQ(got->tensor(Operand::kQuantScale).bytes, 4);
  EXPECT_FALSE(got->tensor(Operand::kRowScale).present());

  // Dynamic scales to client memory.
  quant->set_scale_mode(pb::SCALE_MODE_PER_ROW);
  quant->clear_scale();
  quant->mutable_scales()->mutable_buffer()->set_buffer_id("scales");
  quant->mutable_scales()->mutable_buffer()->set_offset_bytes(12);
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tensor(Operand::kRowScale).bytes, 4 * 4);
  EXPECT_FALSE(got->tensor(Operand::kRowScale).present());  // until resolved
}

TEST(RunRequestTest, RmsNormTakesAWeightOffsetWithItsWeight) {
  pb::RunRequest request = ValidRunRequest(pb::OP_ADD_RMS_NORM, pb::DTYPE_FLOAT16, 2, 8);
  request.mutable_rms_norm()->mutable_weight()->set_inline_data(std::string(16, '\0'));
  request.mutable_rms_norm()->set_weight_offset(1);
  absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->params.weight_offset, 1);
}

TEST(RunRequestTest, RowStridesReachTheParamsAndSizeTheTensors) {
  // QK-norm of q in a fused [tokens 3, 3, heads 4, head_dim 64] bf16 qkv
  // tensor, in place: rows = tokens x heads.
  constexpr int64_t kTokens = 3, kHeads = 4, kHeadDim = 64;
  pb::RunRequest request =
      ValidRunRequest(pb::OP_RMS_NORM, pb::DTYPE_BFLOAT16, kTokens * kHeads, kHeadDim);
  request.mutable_input()->mutable_buffer()->set_buffer_id("qkv");
  request.mutable_output()->mutable_buffer()->set_buffer_id("qkv");
  pb::RowStrides* strides = request.mutable_row_strides();
  strides->set_input(kHeadDim);
  strides->set_output(kHeadDim);
  strides->set_group_rows(kHeads);
  strides->set_input_group(3 * kHeads * kHeadDim);
  strides->set_output_group(3 * kHeads * kHeadDim);
  absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->params.x_row_stride, kHeadDim);
  EXPECT_EQ(got->params.y_group_stride, 3 * kHeads * kHeadDim);
  EXPECT_EQ(got->params.group_rows, kHeads);
  // The last token's last head ends (2 * 768 + 3 * 64 + 64) elements in.
  const int64_t extent = (2 * 3 * kHeads * kHeadDim + (kHeads - 1) * kHeadDim + kHeadDim) * 2;
  EXPECT_EQ(got->tensor(Operand::kInput).bytes, extent);
  EXPECT_EQ(got->tensor(Operand::kOutput).bytes, extent);
  EXPECT_EQ(got->layout(Operand::kInput).Offset(kHeads), 3 * kHeads * kHeadDim);

  // An inline input carries its extent, gaps included.
  request.mutable_input()->set_inline_data(std::string(extent, '\0'));
  got = ValidateRunRequest(request, kTableMaxRequestBytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->tensor(Operand::kInput).where, TensorView::Where::kInline);
}

TEST(RunRequestTest, HostileStridesAreRefusedNeverOverflowed) {
  for (int64_t stride : {int64_t{1} << 62, std::numeric_limits<int64_t>::max(),
                         std::numeric_limits<int64_t>::max() / 2 + 1}) {
    for (int field = 0; field < 5; ++field) {
      pb::RunRequest request = ValidRunRequest(pb::OP_ADD_RMS_NORM, pb::DTYPE_FLOAT32, 8, 32);
      request.mutable_output()->mutable_buffer()->set_buffer_id("out");
      pb::RowStrides* strides = request.mutable_row_strides();
      strides->set_group_rows(4);
      switch (field) {
        case 0:
          strides->set_input(stride);
          break;
        case 1:
          strides->set_output(stride);
          break;
        case 2:
          strides->set_residual(stride);
          break;
        case 3:
          strides->set_input_group(stride);
          break;
        case 4:
          strides->set_output_group(stride);
          break;
      }
      absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
      ASSERT_FALSE(got.ok()) << stride << " in field " << field;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(got.status().message()), HasSubstr("row_strides."));
    }
  }
}

TEST(RunRequestTest, ExactlyTheLimitIsAccepted) {
  const pb::RunRequest request = ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 256, 1024);
  EXPECT_TRUE(ValidateRunRequest(request, kTableMaxRequestBytes).ok());
  EXPECT_EQ(ValidateRunRequest(request, kTableMaxRequestBytes - 1).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ToGrpcStatusTest, MapsEveryCodeItsOwnWay) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const struct {
    absl::Status in;
    grpc::StatusCode out;
  } cases[] = {
      {absl::InvalidArgumentError("x"), grpc::StatusCode::INVALID_ARGUMENT},
      {absl::NotFoundError("x"), grpc::StatusCode::NOT_FOUND},
      {absl::FailedPreconditionError("x"), grpc::StatusCode::FAILED_PRECONDITION},
      {absl::ResourceExhaustedError("x"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::InternalError("x"), grpc::StatusCode::INTERNAL},
      {absl::UnavailableError("x"), grpc::StatusCode::UNAVAILABLE},
      {absl::DataLossError("x"), grpc::StatusCode::DATA_LOSS},
      {absl::PermissionDeniedError("x"), grpc::StatusCode::PERMISSION_DENIED},
  };
  for (const auto& c : cases) {
    const grpc::Status got = ToGrpcStatus(c.in);
    EXPECT_EQ(got.error_code(), c.out) << c.in;
    EXPECT_EQ(got.error_message(), "x");
  }
}

}  // namespace
}  // namespace kt::server
