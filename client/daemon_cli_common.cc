// Shared pieces of the CLI's daemon verbs (daemon_cli_common.h).
#include "client/daemon_cli_common.h"

#include "client/cli_common.h"
#include "proto/convert.h"

namespace kt::client {

int ReportDaemonError(absl::string_view verb, const absl::Status& status, std::ostream& err) {
  err << "kerntune " << verb << ": " << status.message() << "\n";
  if (absl::IsUnavailable(status)) {
    err << "kerntune " << verb
        << ": is kerntuned running there? Start it, or point --server at its socket "
           "(unix:PATH) or host:port\n";
  } else if (absl::IsDeadlineExceeded(status)) {
    err << "kerntune " << verb << ": the daemon did not answer in time\n";
  } else if (absl::IsResourceExhausted(status)) {
    err << "kerntune " << verb
        << ": tensors in registered shared memory (run --via=shm) have no such limit\n";
  } else if (absl::IsUnimplemented(status)) {
    err << "kerntune " << verb << ": the daemon does not serve this call (an older kerntuned?)\n";
  }
  return kExitFailure;
}

absl::string_view ConfigSourceName(pb::ConfigSource source) {
  if (source == pb::CONFIG_SOURCE_CPU_REFERENCE) return "cpu";
  absl::StatusOr<tuner::ConfigSource> lookup = proto::ConfigSourceFromProto(source, "source");
  return lookup.ok() ? tuner::ConfigSourceName(*lookup) : "unknown";
}

}  // namespace kt::client
