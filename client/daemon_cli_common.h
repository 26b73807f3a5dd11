// What the CLI's daemon verbs (`run`, `status`) share: reporting a failed
// call with a hint, and the names of config sources.
#ifndef KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_
#define KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/daemon_client.h"

namespace kt::client {

// Writes "kerntune <verb>: <message>" to `err`, adding what to check when
// the daemon could not be reached, and returns kExitFailure.
int ReportDaemonError(absl::string_view verb, const absl::Status& status, std::ostream& err);

// "tuned", "shipped", "nearest_tuned", "heuristic" (tuner::ConfigSourceName)
// or "cpu": what the daemon reports as the source of the config it launched.
absl::string_view ConfigSourceName(pb::ConfigSource source);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_
