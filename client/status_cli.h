// `kerntune status`: what a running kerntuned reports about itself
// (GetStatus): version, backend and why, every device with its health,
// configs, buffers and Runs, the store, registered buffers and their
// owners, CUDA IPC mappings, uptime.
#ifndef KERNTUNE_CLIENT_STATUS_CLI_H_
#define KERNTUNE_CLIENT_STATUS_CLI_H_

#include <ostream>
#include <string>

#include "absl/time/time.h"
#include "client/daemon_cli_common.h"
#include "client/output_format.h"

namespace kt::client {

struct StatusCliOptions {
  std::string server;  // client::ResolveTarget; empty = the default socket
  // table or json (one object); csv is a usage error (the devices nest).
  OutputFormat format = OutputFormat::kTable;
  absl::Duration deadline = absl::Seconds(10);
  TcpCredentialFiles tcp;  // TLS and the token, for a TCP server
};

// kExitOk, kExitFailure when the daemon cannot be asked, kExitUsage.
int RunStatusCommand(const StatusCliOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_STATUS_CLI_H_
