// Validation of Run requests: every malformed request gets its exact code
// and a message naming the field; valid ones pass with the right views.
#include "server/run_request.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service.h"
#include "tests/server/malformed_requests.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
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
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX, pb::OP_LAYER_NORM}) {
    for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
      const pb::RunRequest request = ValidRunRequest(op, dtype, 3, 5);
      absl::StatusOr<RunRequest> got = ValidateRunRequest(request, kTableMaxRequestBytes);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->shape.rows, 3);
      EXPECT_EQ(got->shape.cols, 5);
      EXPECT_EQ(got->input.bytes, static_cast<int64_t>(request.input().inline_data().size()));
      EXPECT_EQ(got->input.where, TensorView::Where::kInline);
      EXPECT_EQ(got->output.where, TensorView::Where::kInline);
      EXPECT_EQ(OpToProto(got->op), op);
      EXPECT_EQ(DTypeToProto(got->dtype), dtype);
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
  EXPECT_EQ(got->gamma.bytes, 16);
  EXPECT_EQ(got->beta.bytes, 16);
  EXPECT_EQ(got->mean.where, TensorView::Where::kInline);
  EXPECT_EQ(got->mean.bytes, 2 * 4);
  EXPECT_EQ(got->epsilon, 0.25);
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
