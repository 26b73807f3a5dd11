// What the CLI's daemon verbs (`run`, `status`) share: reporting a failed
// call with a hint, key/value text output and the names of config sources.
#ifndef KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_
#define KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/daemon_client.h"

namespace kt::client {

// Writes "kerntune <verb>: <message>" to `err`, adding what to check when
// the daemon could not be reached, and returns kExitFailure.
int ReportDaemonError(absl::string_view verb, const absl::Status& status, std::ostream& err);

// "label  value" lines with the values aligned.
using LabelledLines = std::vector<std::pair<std::string, std::string>>;
void WriteLabelledLines(const LabelledLines& lines, std::ostream& out);

// "tuned", "nearest", "heuristic", "cpu" (what the daemon reports as the
// source of the config it launched).
absl::string_view ConfigSourceName(pb::ConfigSource source);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_
