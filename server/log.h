// kerntuned's log: every line on stderr in one format, a UTC timestamp, a
// level and the text ("2026-11-26T03:15:01.123Z WARN  kerntuned: ..."), so
// an operator can sort, grep and rotate it; gRPC's own lines are routed
// through it too.
#ifndef KERNTUNE_SERVER_LOG_H_
#define KERNTUNE_SERVER_LOG_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kt::server {

enum class LogLevel { kInfo, kWarning, kError };

// "INFO", "WARN", "ERROR".
absl::string_view LogLevelName(LogLevel level);

// One line, without its newline: the time to the millisecond in UTC, the
// level padded to one width, "kerntuned: " and the message.
std::string FormatLogLine(absl::Time time, LogLevel level, absl::string_view message);

// Writes FormatLogLine(now, ...) and a newline to stderr in one write(2),
// so lines of concurrent threads never interleave.
void Log(LogLevel level, absl::string_view message);
inline void LogInfo(absl::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(absl::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(absl::string_view message) { Log(LogLevel::kError, message); }

// Lines of one kind that may come in a flood (a library's complaints, a
// refused connection per attempt): the first `lines` of each window are
// written, the rest counted, and the count written with the next line after
// the window ("1,204 more like this in the last 10 s"). Thread-safe.
class LogLimiter {
 public:
  explicit LogLimiter(int lines = 10, absl::Duration window = absl::Seconds(10))
      : lines_(lines), window_(window) {}
  // Writes `message` (Log) unless this window's lines are spent; true when
  // written.
  bool Log(LogLevel level, absl::string_view message, absl::Time now = absl::Now());

 private:
  const int lines_;
  const absl::Duration window_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

// From now on gRPC's own log lines (gpr_log) go through Log, as
// "grpc: <file>:<line>: <message>", at most a few every 10 s.
void RouteGrpcLogging();

// From now on protobuf's own log lines go through Log the same way, as
// "protobuf: <file>:<line>: <message>", instead of raw "[libprotobuf ...]"
// lines on stderr: a client can make protobuf complain once per request.
void RouteProtobufLogging();

// While one lives, protobuf's lines on this thread are dropped: the daemon
// is parsing a client's message, whose failure is the request's refusal,
// logged with its caller (request_log.h); protobuf's line would repeat it.
class QuietProtobufLog {
 public:
  QuietProtobufLog();
  ~QuietProtobufLog();
  QuietProtobufLog(const QuietProtobufLog&) = delete;
  QuietProtobufLog& operator=(const QuietProtobufLog&) = delete;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_LOG_H_
