// What the CLI's daemon verbs (`run`, `status`) share: the TLS and token
// files of a TCP daemon, reporting a failed call with a hint, and the names
// of config sources.
#ifndef KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_
#define KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/daemon_client.h"

namespace kt::client {

// --tls_ca, --tls_cert, --tls_key and --token_file as given: paths, empty =
// not given.
struct TcpCredentialFiles {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string token_file;
};

// The files read into DaemonClientOptions::tcp; an error names the flag and
// the file ("--tls_ca=/etc/ca.pem: cannot open it: ...").
absl::StatusOr<TcpCredentials> ReadTcpCredentials(const TcpCredentialFiles& files);

// Writes "kerntune <verb>: <message>" to `err`, adding what to check when
// the daemon could not be reached, and returns kExitFailure.
int ReportDaemonError(absl::string_view verb, const absl::Status& status, std::ostream& err);

// "tuned", "shipped", "nearest_tuned", "heuristic" (tuner::ConfigSourceName)
// or "cpu": what the daemon reports as the source of the config it launched.
absl::string_view ConfigSourceName(pb::ConfigSource source);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_DAEMON_CLI_COMMON_H_
