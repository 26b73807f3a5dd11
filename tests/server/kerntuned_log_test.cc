// kerntuned's log as an operator keeps it: one format (timestamp, level),
// failed requests named by the caller's pid and uid, and a flood of
// malformed requests bounded to a few lines with the right summary counts.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
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

constexpr int kFlood = 10000;
constexpr char kName[] = "kerntuned: ";

std::vector<std::string> Lines(const std::string& log) {
  return absl::StrSplit(log, '\n', absl::SkipEmpty());
}

// The status code's name as the log writes it (gRPC's and Abseil's agree).
std::string CodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

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

// 10,000 malformed Runs of several kinds from this process: a few lines per
// status code name it, the rest are summed up, and the sums add up to what
// was sent.
TEST_F(KerntunedLogTest, AFloodOfMalformedRequestsStaysAFewLinesWithRightCounts) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // Small requests only: the flood is about the log, not the bandwidth.
  std::vector<testing::MalformedCase> cases;
  for (testing::MalformedCase& c : testing::MalformedRunRequests()) {
    if (c.request.ByteSizeLong() < 4096) cases.push_back(std::move(c));
  }
  ASSERT_GE(cases.size(), 10u);
  std::map<std::string, int64_t> sent;  // by code name
  for (int i = 0; i < kFlood; ++i) {
    if (i % 7 == 0) {  // another RPC and another code among them
      pb::UnregisterBufferRequest request;
      request.set_buffer_id("no-such-buffer");
      pb::UnregisterBufferResponse response;
      const grpc::Status status =
          Call(&pb::KernTune::Stub::UnregisterBuffer, request, &response);
      ASSERT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
      ++sent[CodeName(absl::StatusCode::kNotFound)];
      continue;
    }
    const testing::MalformedCase& c = cases[i % cases.size()];
    pb::RunResponse response;
    const grpc::Status status = Call(&pb::KernTune::Stub::Run, c.request, &response);
    ASSERT_EQ(static_cast<int>(status.error_code()), static_cast<int>(c.code)) << c.name;
    ++sent[CodeName(c.code)];
  }
  ASSERT_GE(sent.size(), 3u);
  ASSERT_TRUE(daemon_->Signal(SIGTERM, kStopDeadline).has_value());
  const std::string log = daemon_->Log();
  const std::vector<std::string> lines = Lines(log);
  std::cout << "kerntuned wrote " << lines.size() << " lines (" << log.size() << " bytes) for "
            << kFlood << " malformed requests:\n"
            << log;
  EXPECT_LE(lines.size(), 200u);

  const std::string caller = absl::StrCat("pid ", getpid(), " (uid ", getuid(), ")");
  std::map<std::string, int64_t> logged;
  for (const std::string& line : lines) {
    EXPECT_THAT(line, Not(HasSubstr("fd:"))) << "a caller named by its descriptor";
    for (const auto& [code, count] : sent) {
      if (absl::StrContains(line, absl::StrCat(" from ", caller, " failed: ", code, ": "))) {
        ++logged[code];
      }
      const std::string more = absl::StrCat(" more ", code, " from ", caller, " in the last ");
      // "<time> WARN  kerntuned: 1,240 more INVALID_ARGUMENT from pid ..."
      if (const size_t at = line.find(more); at != std::string::npos) {
        const size_t start = line.find(kName) + sizeof(kName) - 1;
        int64_t summed = 0;
        ASSERT_TRUE(absl::SimpleAtoi(
            absl::StrReplaceAll(line.substr(start, at - start), {{",", ""}}), &summed))
            << line;
        logged[code] += summed;
      }
    }
  }
  EXPECT_EQ(logged, sent) << log;
}

}  // namespace
}  // namespace kt::server
