// RequestLog: full lines up to the limits, the rest counted and summed up
// per caller and code when their window ends.
#include "server/request_log.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kt::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

struct Line {
  LogLevel level;
  std::string text;
};

class RequestLogTest : public ::testing::Test {
 protected:
  RequestLog::Sink Sink() {
    return [this](LogLevel level, absl::string_view text) {
      lines_.push_back({level, std::string(text)});
    };
  }
  std::vector<std::string> Texts() const {
    std::vector<std::string> texts;
    for (const Line& line : lines_) texts.push_back(line.text);
    return texts;
  }

  const absl::Time t0_ = absl::FromUnixSeconds(1'800'000'000);
  std::vector<Line> lines_;
};

RequestLogOptions Limits(int per_caller, int in_total, int max_keys = 256) {
  RequestLogOptions options;
  options.lines_per_caller = per_caller;
  options.lines_in_total = in_total;
  options.max_keys = max_keys;
  return options;
}

const absl::Status kBadRows = absl::InvalidArgumentError("shape.rows=0 must be >= 1");

TEST_F(RequestLogTest, LogsTheFirstFailuresOfACallerThenSumsUpTheRest) {
  RequestLog log(Sink(), Limits(3, 50));
  for (int i = 0; i < 1240 + 3; ++i) {
    log.Failed("Run", "pid 4242 (uid 1000)", kBadRows, t0_ + absl::Milliseconds(i));
  }
  ASSERT_THAT(lines_, SizeIs(3));
  EXPECT_EQ(lines_[0].text,
            "Run from pid 4242 (uid 1000) failed: INVALID_ARGUMENT: shape.rows=0 must be >= 1");
  EXPECT_EQ(lines_[0].level, LogLevel::kWarning);
  EXPECT_THAT(lines_[2].text, HasSubstr("[3 of this in 10 s: more are counted and summed up]"));

  log.Flush(t0_ + absl::Seconds(9));  // the window has not ended
  EXPECT_THAT(lines_, SizeIs(3));
  log.Flush(t0_ + absl::Seconds(10));
  ASSERT_THAT(lines_, SizeIs(4));
  EXPECT_EQ(lines_[3].text,
            "1,240 more INVALID_ARGUMENT from pid 4242 (uid 1000) in the last 10 s; the last: "
            "Run: shape.rows=0 must be >= 1");
  // The next window starts afresh.
  log.Failed("Run", "pid 4242 (uid 1000)", kBadRows, t0_ + absl::Seconds(11));
  EXPECT_THAT(lines_, SizeIs(5));
}

TEST_F(RequestLogTest, CountsEachCallerAndCodeApart) {
  RequestLog log(Sink(), Limits(1, 50));
  const absl::Status unknown_buffer = absl::NotFoundError("buffer_id 7 is not registered");
  for (int i = 0; i < 10; ++i) {
    log.Failed("Run", "pid 1 (uid 0)", kBadRows, t0_);
    log.Failed("Run", "pid 2 (uid 0)", kBadRows, t0_);
    log.Failed("UnregisterBuffer", "pid 1 (uid 0)", unknown_buffer, t0_);
  }
  EXPECT_THAT(lines_, SizeIs(3));
  log.FlushAll(t0_ + absl::Seconds(2));
  const std::vector<std::string> texts = Texts();
  std::vector<std::string> summaries(texts.begin() + 3, texts.end());
  std::sort(summaries.begin(), summaries.end());
  EXPECT_THAT(summaries,
              ElementsAre("9 more INVALID_ARGUMENT from pid 1 (uid 0) in the last 2.0 s; the "
                          "last: Run: shape.rows=0 must be >= 1",
                          "9 more INVALID_ARGUMENT from pid 2 (uid 0) in the last 2.0 s; the "
                          "last: Run: shape.rows=0 must be >= 1",
                          "9 more NOT_FOUND from pid 1 (uid 0) in the last 2.0 s; the last: "
                          "UnregisterBuffer: buffer_id 7 is not registered"));
}

TEST_F(RequestLogTest, TheTotalBudgetBoundsManyCallers) {
  RequestLog log(Sink(), Limits(5, 4, 3));
  for (int pid = 0; pid < 100; ++pid) {
    log.Failed("Run", "pid " + std::to_string(pid), kBadRows, t0_);
  }
  ASSERT_THAT(lines_, SizeIs(4));
  EXPECT_THAT(lines_[3].text, HasSubstr("[4 failed-request lines in 10 s: more are counted"));
  log.FlushAll(t0_ + absl::Seconds(1));
  // pids 0-2 hold the three keys; every later pid counts as "other callers".
  int64_t summed = 0;
  for (size_t i = 4; i < lines_.size(); ++i) {
    const std::string& text = lines_[i].text;
    summed += std::stoll(text.substr(0, text.find(' ')));
  }
  EXPECT_EQ(summed, 96);
  EXPECT_THAT(Texts(), ::testing::Contains(HasSubstr("96 more INVALID_ARGUMENT from other "
                                                     "callers")));
}

TEST_F(RequestLogTest, InternalErrorsAreErrorsAndMessagesStayOneLine) {
  RequestLog log(Sink());
  log.Failed("RegisterBuffer", "pid 9 (uid 9)",
             absl::InternalError("host_shm.name=\"a\nb\" is bad"), t0_);
  ASSERT_THAT(lines_, SizeIs(1));
  EXPECT_EQ(lines_[0].level, LogLevel::kError);
  EXPECT_THAT(lines_[0].text, HasSubstr("host_shm.name=\"a\\x0ab\" is bad"));
}

TEST_F(RequestLogTest, DestructionSumsUpWhatIsCounted) {
  {
    RequestLog log(Sink(), Limits(1, 50));
    log.Failed("Run", "pid 1 (uid 0)", kBadRows, absl::Now());
    log.Failed("Run", "pid 1 (uid 0)", kBadRows, absl::Now());
  }
  ASSERT_THAT(lines_, SizeIs(2));
  EXPECT_THAT(lines_[1].text, HasSubstr("1 more INVALID_ARGUMENT from pid 1 (uid 0)"));
}

TEST(DescribeCallerTest, NamesProcessesByPidAndTcpClientsWithoutTheirPort) {
  PeerProcess process;
  process.pid = 4242;
  process.uid = 1000;
  EXPECT_EQ(DescribeCaller("fd:13", process), "pid 4242 (uid 1000)");
  EXPECT_EQ(DescribeCaller("ipv4:10.0.0.7:51234", std::nullopt), "TCP client ipv4:10.0.0.7");
  EXPECT_EQ(DescribeCaller("ipv6:[::1]:51234", std::nullopt), "TCP client ipv6:[::1]");
  EXPECT_EQ(DescribeCaller("fd:13", std::nullopt), "fd:13");
}

TEST(WithThousandsTest, GroupsDigits) {
  EXPECT_EQ(WithThousands(0), "0");
  EXPECT_EQ(WithThousands(999), "999");
  EXPECT_EQ(WithThousands(1240), "1,240");
  EXPECT_EQ(WithThousands(1234567), "1,234,567");
}

}  // namespace
}  // namespace kt::server
