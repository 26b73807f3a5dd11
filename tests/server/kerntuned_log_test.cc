// kerntuned's log as an operator keeps it: one format (timestamp, level).
#include <sys/wait.h>

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "tests/server/kerntuned_fixture.h"
#include "tests/server/malformed_requests.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::testing::HasSubstr;
using ::testing::Not;
using ::kt::server::testing::kStopDeadline;

using KerntunedLogTest = ::kt::server::testing::KerntunedFixture;

std::vector<std::string> Lines(const std::string& log) {
  return absl::StrSplit(log, '\n', absl::SkipEmpty());
}

TEST_F(KerntunedLogTest, EveryLineHasATimestampAndALevel) {
  ASSERT_NO_FATAL_FAILURE(Start());
  pb::RunResponse response;
  pb::RunRequest bad = testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 2, 8);
  bad.mutable_shape()->set_rows(0);
  ASSERT_FALSE(Call(&pb::KernTune::Stub::Run, bad, &response).ok());
  ASSERT_TRUE(daemon_->Signal(SIGTERM, kStopDeadline).has_value());
  const std::regex format(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO |WARN |ERROR) kerntuned: .+)");
  const std::vector<std::string> lines = Lines(daemon_->Log());
  ASSERT_GE(lines.size(), 4u);  // serving, the failure, the signal, stopped
  for (const std::string& line : lines) {
    EXPECT_TRUE(std::regex_match(line, format)) << line;
  }
  EXPECT_THAT(daemon_->Log(), HasSubstr("INFO  kerntuned: serving on unix:"));
  // issue 27: `kerntuned --cpu --db=...` logged "0 tuned configs" without
  // saying that the CPU backend uses none.
  EXPECT_THAT(daemon_->Log(), HasSubstr("backend cpu (--cpu given): the fp64 reference on the "
                                        "CPU; GPU tuned configs, local or shipped, are not used"));
  EXPECT_THAT(daemon_->Log(), Not(HasSubstr("tuned configs from")));
  EXPECT_THAT(daemon_->Log(), HasSubstr("INFO  kerntuned: stopped"));
}

}  // namespace
}  // namespace kt::server
