// kerntuned's log lines (see log.h).
#include "server/log.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
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

namespace {

void LogFromGrpc(gpr_log_func_args* args) {
  const LogLevel level = args->severity == GPR_LOG_SEVERITY_ERROR ? LogLevel::kError
                                                                  : LogLevel::kInfo;
  // gRPC names its source files by the path they were built from.
  absl::string_view file = args->file != nullptr ? args->file : "?";
  file = file.substr(file.rfind('/') + 1);
  Log(level, absl::StrCat("grpc: ", file, ":", args->line, ": ",
                          args->message != nullptr ? args->message : ""));
}

}  // namespace

void RouteGrpcLogging() { gpr_set_log_function(&LogFromGrpc); }

}  // namespace kt::server
