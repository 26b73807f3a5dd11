// kerntuned's log line: UTC time to the millisecond, the level, the name.
#include "server/log.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kt::server {
namespace {

TEST(FormatLogLineTest, TimestampLevelAndName) {
  const absl::Time time = absl::FromUnixMillis(1'795'000'000'123);
  EXPECT_EQ(FormatLogLine(time, LogLevel::kWarning, "hello"),
            "2026-11-18T11:06:40.123Z WARN  kerntuned: hello");
  EXPECT_EQ(FormatLogLine(time, LogLevel::kInfo, "x"),
            "2026-11-18T11:06:40.123Z INFO  kerntuned: x");
  EXPECT_EQ(FormatLogLine(time, LogLevel::kError, "x"),
            "2026-11-18T11:06:40.123Z ERROR kerntuned: x");
}

}  // namespace
}  // namespace kt::server
