// Naming the field that failed a parse: a string that is not UTF-8 by its
// path, anything else as bytes that are not the message.
#include "proto/parse_failure.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kerntune/v1/kerntune.pb.h"

namespace kt::proto {
namespace {

namespace pb = ::kerntune::v1;
using ::testing::HasSubstr;

absl::Status Describe(const std::string& bytes) {
  return DescribeParseFailure(*pb::RunRequest::descriptor(), bytes);
}

TEST(ParseFailureTest, NamesAStringThatIsNotUtf8ByItsPath) {
  pb::RunRequest request;
  request.set_op(pb::OP_LAYER_NORM);
  request.mutable_input()->set_inline_data(std::string("\xff\xfe", 2));  // bytes: fine
  request.mutable_layer_norm()->mutable_gamma()->mutable_buffer()->set_buffer_id("g\xc3");
  std::string bytes = request.SerializeAsString();
  pb::RunRequest parsed;
  ASSERT_FALSE(parsed.ParseFromString(bytes));
  absl::Status why = Describe(bytes);
  EXPECT_EQ(why.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(why.message(), HasSubstr("layer_norm.gamma.buffer.buffer_id is not UTF-8 (2 bytes)"));

  request.Clear();
  request.set_device("\x80");
  bytes = request.SerializeAsString();
  ASSERT_FALSE(parsed.ParseFromString(bytes));
  EXPECT_THAT(Describe(bytes).message(), HasSubstr("device is not UTF-8"));
}

TEST(ParseFailureTest, OtherBytesAreNotTheMessage) {
  const absl::Status why = Describe(std::string(16, '\xff'));
  EXPECT_EQ(why.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(why.message(), HasSubstr("not a kerntune.v1.RunRequest in protobuf's wire format"));
}

}  // namespace
}  // namespace kt::proto
