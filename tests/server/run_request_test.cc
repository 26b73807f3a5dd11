// Validation of Run requests: every malformed request gets its exact code
// and a message naming the field; valid ones pass with the right views.
#include "server/run_request.h"

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
