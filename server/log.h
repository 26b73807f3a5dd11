// kerntuned's log: every line on stderr in one format, a UTC timestamp, a
// level and the text ("2026-11-26T03:15:01.123Z WARN  kerntuned: ..."), so
// an operator can sort, grep and rotate it; gRPC's own lines are routed
// through it too.
#ifndef KERNTUNE_SERVER_LOG_H_
#define KERNTUNE_SERVER_LOG_H_

#include <string>

#include "absl/strings/string_view.h"
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

// From now on gRPC's own log lines (gpr_log) go through Log, as
// "grpc: <file>:<line>: <message>".
void RouteGrpcLogging();

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_LOG_H_
