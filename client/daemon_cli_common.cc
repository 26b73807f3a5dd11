// Shared pieces of the CLI's daemon verbs (daemon_cli_common.h).
#include "client/daemon_cli_common.h"

#include <algorithm>

#include "client/cli_common.h"

namespace kt::client {

int ReportDaemonError(absl::string_view verb, const absl::Status& status, std::ostream& err) {
  err << "kerntune " << verb << ": " << status.message() << "\n";
  if (absl::IsUnavailable(status)) {
    err << "kerntune " << verb
        << ": is kerntuned running there? Start it, or point --server at its socket "
           "(unix:PATH) or host:port\n";
  } else if (absl::IsDeadlineExceeded(status)) {
    err << "kerntune " << verb << ": the daemon did not answer in time\n";
  } else if (absl::IsUnimplemented(status)) {
    err << "kerntune " << verb << ": the daemon does not serve this call (an older kerntuned?)\n";
  }
  return kExitFailure;
}

void WriteLabelledLines(const LabelledLines& lines, std::ostream& out) {
  size_t width = 0;
  for (const auto& line : lines) width = std::max(width, line.first.size());
  for (const auto& [label, value] : lines) {
    out << label << std::string(width - label.size() + 2, ' ') << value << "\n";
  }
}

absl::string_view ConfigSourceName(pb::ConfigSource source) {
  switch (source) {
    case pb::CONFIG_SOURCE_TUNED:
      return "tuned";
    case pb::CONFIG_SOURCE_NEAREST_TUNED:
      return "nearest";
    case pb::CONFIG_SOURCE_HEURISTIC:
      return "heuristic";
    case pb::CONFIG_SOURCE_CPU_REFERENCE:
      return "cpu";
    default:
      return "unknown";
  }
}

}  // namespace kt::client
