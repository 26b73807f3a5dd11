// kerntuned's log lines (see log.h).
#include "server/log.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"

namespace kt::server {

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

std::string FormatLogLine(absl::Time time, LogLevel level, absl::string_view message) {
  return absl::StrFormat("%s %-5s kerntuned: %s",
                         absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone()),
                         LogLevelName(level), message);
}

void Log(LogLevel level, absl::string_view message) {
  const std::string line = absl::StrCat(FormatLogLine(absl::Now(), level, message), "\n");
  // One write per line; a short write (a full pipe) continues where it
  // stopped. stderr is unbuffered, so nothing else holds part of a line.
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report it
    written += static_cast<size_t>(n);
  }
}

bool LogLimiter::Log(LogLevel level, absl::string_view message, absl::Time now) {
  std::string summary;
  {
    absl::MutexLock lock(&mu_);
    if (now - window_start_ >= window_) {
      if (suppressed_ > 0) {
        const double seconds = absl::ToDoubleSeconds(now - window_start_);
        summary = absl::StrFormat("%d more like this in the last %.0f s", suppressed_, seconds);
      }
      window_start_ = now;
      written_ = 0;
      suppressed_ = 0;
    }
    if (written_ >= lines_) {
      ++suppressed_;
      return false;
    }
    ++written_;
  }
  if (!summary.empty()) kt::server::Log(level, summary);
  kt::server::Log(level, message);
  return true;
}

namespace {

// Library lines: a few per window from each library.
LogLimiter& GrpcLines() {
  static LogLimiter* limiter = new LogLimiter();
  return *limiter;
}
LogLimiter& ProtobufLines() {
  static LogLimiter* limiter = new LogLimiter();
  return *limiter;
}

thread_local int quiet_protobuf = 0;

// Libraries name their source files by the path they were built from.
absl::string_view BaseName(const char* file) {
  absl::string_view name = file != nullptr ? file : "?";
  return name.substr(name.rfind('/') + 1);
}

void LogFromGrpc(gpr_log_func_args* args) {
  const LogLevel level = args->severity == GPR_LOG_SEVERITY_ERROR ? LogLevel::kError
                                                                  : LogLevel::kInfo;
  GrpcLines().Log(level, absl::StrCat("grpc: ", BaseName(args->file), ":", args->line, ": ",
                                      args->message != nullptr ? args->message : ""));
}

void LogFromProtobuf(google::protobuf::LogLevel severity, const char* file, int line,
                     const std::string& message) {
  if (quiet_protobuf > 0) return;
  LogLevel level = LogLevel::kInfo;
  if (severity == google::protobuf::LOGLEVEL_WARNING) level = LogLevel::kWarning;
  if (severity >= google::protobuf::LOGLEVEL_ERROR) level = LogLevel::kError;
  ProtobufLines().Log(level, absl::StrCat("protobuf: ", BaseName(file), ":", line, ": ", message));
}

}  // namespace

void RouteGrpcLogging() { gpr_set_log_function(&LogFromGrpc); }

void RouteProtobufLogging() { google::protobuf::SetLogHandler(&LogFromProtobuf); }

QuietProtobufLog::QuietProtobufLog() { ++quiet_protobuf; }
QuietProtobufLog::~QuietProtobufLog() { --quiet_protobuf; }

}  // namespace kt::server
