// `kerntune status` (status_cli.h).
#include "client/status_cli.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli_common.h"
#include "client/daemon_cli_common.h"
#include "client/daemon_client.h"
#include "db/records.h"
#include "proto/convert.h"

namespace kt::client {
namespace {

constexpr absl::string_view kStatusVerb = "status";

// "3d 04h 05m 06s", "2m 03s", "7s".
std::string FormatUptime(int64_t seconds) {
  const int64_t days = seconds / 86400, hours = seconds / 3600 % 24,
                minutes = seconds / 60 % 60, secs = seconds % 60;
  if (days > 0) return absl::StrFormat("%dd %02dh %02dm %02ds", days, hours, minutes, secs);
  if (hours > 0) return absl::StrFormat("%dh %02dm %02ds", hours, minutes, secs);
  if (minutes > 0) return absl::StrFormat("%dm %02ds", minutes, secs);
  return absl::StrCat(secs, "s");
}

// "0 B", "512 B", "1.5 MiB", "2.0 GiB".
std::string HumanBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, units[unit]);
}

std::string Plural(int64_t count, absl::string_view one, absl::string_view many) {
  return absl::StrCat(count, " ", count == 1 ? one : many);
}

// One device's health, configs, buffers and Runs: "serving; 12 tuned + 300
// shipped entries; 2 buffers, 1.5 MiB; 10 runs, 0 in flight".
std::string DeviceHealthAndCounts(const pb::Device& device) {
  const std::string health =
      device.available()
          ? std::string("serving")
          : absl::StrCat("UNAVAILABLE (", device.unavailable_reason().empty()
                                              ? std::string("no reason given")
                                              : device.unavailable_reason(),
                         ")");
  std::string configs = absl::StrCat(device.tuned_entries(), " tuned + ",
                                     Plural(device.shipped_entries(), "shipped entry",
                                            "shipped entries"));
  if (device.stale_entries_skipped() > 0) {
    absl::StrAppend(&configs, ", ", device.stale_entries_skipped(), " stale skipped");
  }
  return absl::StrCat(health, "; ", configs, "; ",
                      Plural(device.registered_buffers(), "buffer", "buffers"), ", ",
                      HumanBytes(device.registered_bytes()), "; ",
                      Plural(device.runs(), "run", "runs"), ", ", device.runs_in_flight(),
                      " in flight");
}

void WriteText(const std::string& target, const pb::GetStatusResponse& s, std::ostream& out) {
  LabelledLines lines;
  lines.push_back({"kerntuned", absl::StrCat(s.version(), " (kernels ",
                                             s.kernel_library_version(), ") at ", target)});
  lines.push_back({"backend", absl::StrCat(s.backend(), ": ", s.backend_reason(),
                                           s.backend_note().empty()
                                               ? ""
                                               : absl::StrCat(" (", s.backend_note(), ")"))});
  if (s.devices().empty()) lines.push_back({"devices", "none"});
  for (int i = 0; i < s.devices_size(); ++i) {
    const pb::Device& device = s.devices(i);
    lines.push_back({i == 0 ? "devices" : "",
                     absl::StrCat(device.ordinal(), ": ",
                                  SkuDescription(proto::SkuFromProto(device.sku())),
                                  device.uuid().empty() ? "" : absl::StrCat(", ", device.uuid()),
                                  device.pci_bus_id().empty()
                                      ? ""
                                      : absl::StrCat(" at ", device.pci_bus_id()))});
    lines.push_back({"", absl::StrCat("   ", DeviceHealthAndCounts(device))});
  }
  // The CPU backend loads no configs: say why, rather than "not loaded".
  const bool cpu = s.backend() == "cpu";
  lines.push_back(
      {"tuned", cpu ? absl::StrCat("not used: the CPU backend runs the fp64 reference (store ",
                                   s.database_path().empty() ? "none" : s.database_path(), ")")
                    : absl::StrCat(Plural(s.tuned_entries(), "entry", "entries"), " from ",
                             s.database_path().empty() ? "(no store)" : s.database_path(),
                             s.database_data_version() == 0
                                 ? " (not loaded)"
                                 : absl::StrCat(" (data version ", s.database_data_version(),
                                                ")"))});
  lines.push_back(
      {"shipped", cpu ? std::string("not used by the CPU backend")
                  : s.shipped_config_files().empty()
                      ? std::string("none loaded")
                      : absl::StrCat(Plural(s.shipped_entries(), "entry", "entries"), " from ",
                                     absl::StrJoin(s.shipped_config_files(), ", "))});
  if (!s.database_problem().empty()) lines.push_back({"store", s.database_problem()});
  if (s.stale_entries_skipped() > 0) {
    lines.push_back({"stale", absl::StrCat(Plural(s.stale_entries_skipped(), "entry", "entries"),
                                           " measured with another kernel library, not "
                                           "served; re-tune or import current configs")});
  }
  lines.push_back(
      {"buffers", absl::StrCat(s.registered_buffers(), " registered, ",
                               HumanBytes(s.registered_bytes()), ", owned by ",
                               Plural(s.buffer_owners(), "process", "processes"),
                               "; default lease ", s.default_buffer_ttl_seconds(), " s")});
  lines.push_back({"cuda ipc", s.cuda_ipc_supported()
                                   ? absl::StrCat("supported; ",
                                                  Plural(s.open_ipc_mappings(), "mapping",
                                                         "mappings"),
                                                  " open")
                                   : "not supported by this backend"});
  lines.push_back({"inline", absl::StrCat("tensors up to ", HumanBytes(s.max_request_bytes()),
                                          " (--max_request_bytes); larger ones in registered "
                                          "memory")});
  lines.push_back({"metrics", s.metrics_address().empty()
                                  ? std::string("not served")
                                  : absl::StrCat("http://", s.metrics_address(), "/metrics")});
  // What it has served.
  const pb::DaemonStats& stats = s.stats();
  lines.push_back(
      {"runs", absl::StrCat(stats.runs(), " answered, ", stats.runs_answered_early(),
                            " of them before the GPU finished",
                            stats.runs() > 0 ? absl::StrFormat("; handler mean %.1f us",
                                                               stats.handler_us() / stats.runs())
                                             : "")});
  if (const pb::IdleTuning& idle = s.idle_tuning(); idle.enabled()) {
    lines.push_back(
        {"idle tuner", absl::StrCat(Plural(idle.problems_tuned(), "problem", "problems"),
                                    " tuned, ", idle.problems_failed(), " failed; ",
                                    idle.tuning().empty() ? "waiting for an idle GPU and a "
                                                            "problem served untuned"
                                                          : absl::StrCat("tuning ", idle.tuning()),
                                    idle.paused() ? " (paused: Runs came)" : "")});
  }
  lines.push_back({"uptime", FormatUptime(s.uptime_seconds())});
  WriteLabelledLines(lines, out);
}

// ["a", "b"]
std::string JsonList(const google::protobuf::RepeatedPtrField<std::string>& values) {
  std::vector<std::string> quoted;
  for (const std::string& value : values) quoted.push_back(JsonQuote(value));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

std::string DeviceJson(const pb::Device& device) {
  const pb::GpuSku& sku = device.sku();
  return absl::StrCat("{\"ordinal\": ", device.ordinal(), ", \"name\": ", JsonQuote(sku.name()),
                      ", \"cc_major\": ", sku.cc_major(), ", \"cc_minor\": ", sku.cc_minor(),
                      ", \"sm_count\": ", sku.sm_count(),
                      ", \"total_memory_bytes\": ", sku.total_memory_bytes(),
                      ", \"uuid\": ", JsonQuote(device.uuid()),
                      ", \"pci_bus_id\": ", JsonQuote(device.pci_bus_id()),
                      ", \"available\": ", device.available() ? "true" : "false",
                      ", \"unavailable_reason\": ", JsonQuote(device.unavailable_reason()),
                      ", \"tuned_entries\": ", device.tuned_entries(),
                      ", \"shipped_entries\": ", device.shipped_entries(),
                      ", \"stale_entries_skipped\": ", device.stale_entries_skipped(),
                      ", \"registered_buffers\": ", device.registered_buffers(),
                      ", \"registered_bytes\": ", device.registered_bytes(),
                      ", \"runs\": ", device.runs(),
                      ", \"runs_in_flight\": ", device.runs_in_flight(), "}");
}

void WriteJson(const std::string& target, const pb::GetStatusResponse& s, std::ostream& out) {
  std::vector<std::string> devices;
  for (const pb::Device& device : s.devices()) devices.push_back(DeviceJson(device));
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"server", JsonQuote(target)},
      {"version", JsonQuote(s.version())},
      {"kernel_library_version", JsonQuote(s.kernel_library_version())},
      {"backend", JsonQuote(s.backend())},
      {"backend_reason", JsonQuote(s.backend_reason())},
      {"backend_note", JsonQuote(s.backend_note())},
      {"devices", absl::StrCat("[", absl::StrJoin(devices, ", "), "]")},
      {"tuned_entries", absl::StrCat(s.tuned_entries())},
      {"database_path", JsonQuote(s.database_path())},
      {"database_data_version", absl::StrCat(s.database_data_version())},
      {"database_problem", JsonQuote(s.database_problem())},
      {"shipped_entries", absl::StrCat(s.shipped_entries())},
      {"shipped_config_files", JsonList(s.shipped_config_files())},
      {"stale_entries_skipped", absl::StrCat(s.stale_entries_skipped())},
      {"registered_buffers", absl::StrCat(s.registered_buffers())},
      {"registered_bytes", absl::StrCat(s.registered_bytes())},
      {"buffer_owners", absl::StrCat(s.buffer_owners())},
      {"open_ipc_mappings", absl::StrCat(s.open_ipc_mappings())},
      {"default_buffer_ttl_seconds", absl::StrCat(s.default_buffer_ttl_seconds())},
      {"max_request_bytes", absl::StrCat(s.max_request_bytes())},
      {"cuda_ipc_supported", s.cuda_ipc_supported() ? "true" : "false"},
      {"metrics_address", JsonQuote(s.metrics_address())},
      {"idle_tuning",
       absl::StrCat("{\"enabled\": ", s.idle_tuning().enabled() ? "true" : "false",
                    ", \"tuning\": ", JsonQuote(s.idle_tuning().tuning()),
                    ", \"paused\": ", s.idle_tuning().paused() ? "true" : "false",
                    ", \"problems_tuned\": ", s.idle_tuning().problems_tuned(),
                    ", \"problems_failed\": ", s.idle_tuning().problems_failed(), "}")},
      {"uptime_seconds", absl::StrCat(s.uptime_seconds())},
      {"runs", absl::StrCat(s.stats().runs())},
      {"runs_answered_early", absl::StrCat(s.stats().runs_answered_early())},
      {"handler_us", absl::StrFormat("%.3f", s.stats().handler_us())},
  };
  std::vector<std::string> members;
  for (const auto& [key, value] : fields) members.push_back(absl::StrCat(JsonQuote(key), ": ", value));
  out << "{" << absl::StrJoin(members, ",\n ") << "}\n";
}

}  // namespace

int RunStatusCommand(const StatusCliOptions& options, std::ostream& out, std::ostream& err) {
  if (options.format == OutputFormat::kCsv) {
    return ReportError(kStatusVerb,
                       absl::InvalidArgumentError(
                           "--format=csv does not fit the status (devices nest); use table or json"),
                       err, kExitUsage);
  }
  DaemonClientOptions client_options;
  client_options.target = options.server;
  client_options.deadline = options.deadline;
  absl::StatusOr<TcpCredentials> tcp = ReadTcpCredentials(options.tcp);
  if (!tcp.ok()) return ReportError(kStatusVerb, tcp.status(), err, kExitUsage);
  client_options.tcp = *std::move(tcp);
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect(client_options);
  if (!client.ok()) return ReportError(kStatusVerb, client.status(), err, kExitUsage);
  absl::StatusOr<pb::GetStatusResponse> status = client->GetStatus();
  if (!status.ok()) return ReportDaemonError(kStatusVerb, status.status(), err);
  if (options.format == OutputFormat::kJson) {
    WriteJson(client->target(), *status, out);
  } else {
    WriteText(client->target(), *status, out);
  }
  return kExitOk;
}

}  // namespace kt::client
