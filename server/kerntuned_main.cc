// kerntuned: the kerntune daemon. Its flags become an Options struct,
// checked once (ValidateOptions); the server library does the rest.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "db/tuning_store.h"
#include "grpc/grpc.h"
#include "proto/command_line.h"
#include "proto/shipped_configs.h"
#include "server/log.h"
#include "server/server.h"

ABSL_FLAG(std::string, socket, "",
          "Unix socket to listen on (default $XDG_RUNTIME_DIR/kerntune.sock, else "
          "/run/kerntune/kerntune.sock)");
ABSL_FLAG(std::string, tcp, "",
          "also listen on HOST:PORT, for inline tensors only (off unless given); an address "
          "other than loopback needs --tls_cert and --tls_key, or --insecure_tcp");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of the --tcp listener, which then speaks TLS only; with "
          "--tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM file of the CAs that sign client certificates: --tcp clients without one are "
          "refused at the TLS handshake");
ABSL_FLAG(std::string, token_file, "",
          "a file holding the bearer token every --tcp call must carry (\"authorization: "
          "Bearer <token>\", over TLS only). The Unix socket takes no token: its file mode "
          "decides who connects and the daemon knows each caller's process");
ABSL_FLAG(int, tls_reload_s, 60,
          "read --tls_cert, --tls_key, --tls_client_ca and --token_file again this often, so "
          "rotated files serve new connections and calls without a restart; 0: once, at the "
          "start");
ABSL_FLAG(bool, insecure_tcp, false,
          "serve --tcp in plaintext on an address other than loopback: anyone who reaches "
          "the port can call it and read its traffic");
ABSL_FLAG(std::string, metrics_address, kt::server::kDefaultMetricsAddress,
          "HOST:PORT of the Prometheus endpoint (/metrics, plain HTTP: counts and build "
          "info, no tensors; loopback unless told otherwise); empty turns it off");
ABSL_FLAG(std::string, db, "",
          "tuning store, opened read-only and reloaded when it changes or is replaced; while it "
          "cannot be read the configs loaded last serve (default $KERNTUNE_DB, "
          "else $XDG_DATA_HOME/kerntune/tuning.db, else ~/.local/share/kerntune/tuning.db)");
ABSL_FLAG(std::string, configs, "",
          "directory of shipped tuned-config files (*.json, one per GPU SKU), served after the "
          "store's entries (default <kerntuned's directory>/../share/kerntune/configs, else the "
          "source tree's deploy/configs)");
ABSL_FLAG(std::string, devices, "all",
          "GPUs to serve: all, or a comma list of CUDA ordinals and GPU UUIDs (or UUID prefixes, "
          "as nvidia-smi -L prints them); with no GPU, the CPU reference");
ABSL_FLAG(bool, cpu, false,
          "use the CPU reference backend even when a GPU is present (it uses no tuned configs)");
ABSL_FLAG(bool, tune_idle, false,
          "tune the problems Runs were served untuned (kerntune tune --served --dry_run lists "
          "them) while their GPU has had no Runs for a while, pausing when Runs come, into --db; "
          "the results are served once the store is reloaded. GPU backend only");
ABSL_FLAG(int64_t, max_request_bytes, kt::server::kDefaultMaxRequestBytes,
          "largest tensor (rows * cols * inner * dtype size) a request may carry inline");
ABSL_FLAG(int64_t, buffer_ttl_s, 3600,
          "default idle lease of a registered buffer, in seconds (RegisterBuffer ttl_seconds=0)");
ABSL_FLAG(int, max_buffers, kt::server::RegistryLimits{}.max_buffers,
          "registered buffers of every client together, each registration counted (each one of "
          "shared memory is a memory map of the daemon's own); beyond it RegisterBuffer is "
          "RESOURCE_EXHAUSTED. Keep it under half of vm.max_map_count (65530 by default): the "
          "daemon's threads, gRPC and the CUDA driver need maps too");
ABSL_FLAG(int, workers, 8,
          "threads for the calls that may wait long (RegisterBuffer, preparing Runs above 64Ki "
          "elements), and as many per device executing those Runs; the rest are answered on "
          "gRPC's own threads");

namespace {

// --help lists this file's flags under the program's name: absl would name
// the source file by the path it was compiled from, a build machine's.
void ConfigureUsage() {
  absl::FlagsUsageConfig config;
  config.normalize_filename = [](absl::string_view path) {
    if (absl::EndsWith(path, "kerntuned_main.cc")) return std::string("kerntuned");
    return std::string(path.substr(path.rfind('/') + 1));  // absl's own flags: no directory
  };
  config.contains_help_flags = [](absl::string_view file) { return file == "kerntuned"; };
  config.contains_helpshort_flags = config.contains_help_flags;
  // absl's own says "Debug build (NDEBUG not #defined)" and no version.
  config.version_string = [] { return kt::proto::VersionLine("kerntuned") + "\n"; };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(
      "the kerntune daemon: serves tuned row-wise GPU kernels over gRPC.\n"
      "usage: kerntuned [--socket=PATH] [--metrics_address=HOST:PORT]\n"
      "                 [--tcp=HOST:PORT [--tls_cert=PEM --tls_key=PEM [--tls_client_ca=PEM]\n"
      "                  [--token_file=PATH] [--tls_reload_s=N] | --insecure_tcp]]\n"
      "                 [--db=PATH] [--configs=DIR]\n"
      "                 [--devices=all|LIST [--tune_idle] | --cpu] [--max_request_bytes=N]\n"
      "                 [--buffer_ttl_s=N] [--workers=N]");
}

kt::server::Options OptionsFromFlags(bool metrics_address_given) {
  kt::server::Options options;
  options.listen.socket_path = absl::GetFlag(FLAGS_socket);
  if (options.listen.socket_path.empty()) {
    options.listen.socket_path = kt::server::DefaultSocketPath();
  }
  options.listen.tcp_address = absl::GetFlag(FLAGS_tcp);
  options.listen.tcp_security.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.listen.tcp_security.key_file = absl::GetFlag(FLAGS_tls_key);
  options.listen.tcp_security.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.listen.tcp_security.token_file = absl::GetFlag(FLAGS_token_file);
  options.listen.tcp_security.insecure = absl::GetFlag(FLAGS_insecure_tcp);
  options.listen.tcp_security.reload_seconds = absl::GetFlag(FLAGS_tls_reload_s);
  options.listen.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.listen.metrics_address_given = metrics_address_given;
  options.configs.db_path = absl::GetFlag(FLAGS_db);
  if (options.configs.db_path.empty()) {
    options.configs.db_path = kt::db::DefaultDatabasePath().value_or("");
  }
  options.configs.shipped_dir = absl::GetFlag(FLAGS_configs);
  if (options.configs.shipped_dir.empty()) {
    options.configs.shipped_dir = kt::proto::DefaultShippedConfigDir();
  }
  options.execution.force_cpu = absl::GetFlag(FLAGS_cpu);
  options.execution.devices = absl::GetFlag(FLAGS_devices);
  options.execution.workers = absl::GetFlag(FLAGS_workers);
  options.tuning.tune_idle = absl::GetFlag(FLAGS_tune_idle);
  options.limits.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.limits.buffer_ttl_s = absl::GetFlag(FLAGS_buffer_ttl_s);
  options.limits.max_buffers = absl::GetFlag(FLAGS_max_buffers);
  return options;
}

// Whether `flag` is one of this file's flags (its file name as
// ConfigureUsage normalizes it).
bool IsOwnFlag(const absl::CommandLineFlag& flag) { return flag.Filename() == "kerntuned"; }

// absl's usage flags, which it handles itself and keeps out of the flag
// registry.
constexpr absl::string_view kUsageFlags[] = {"help",      "helpfull",  "helpshort", "helppackage",
                                             "helpon",    "helpmatch", "version",
                                             "only_check_args"};

// The flags to suggest for a mistyped one: this file's and absl's usage
// flags, none of absl's internals (--flagfile ...).
std::vector<std::string> SuggestableFlags() {
  std::vector<std::string> names(std::begin(kUsageFlags), std::end(kUsageFlags));
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsOwnFlag(*flag)) names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());  // the same suggestion on every run
  return names;
}

// The command line checked before absl parses it: absl prints every problem
// with its own usage hint and exits 1, where a bad command line exits 2
// with one line that names the flag (and the flag meant, for a typo).
// Checks each flag's name and parses this file's flags' values; what only
// absl knows (--flagfile's contents) is left to it.
absl::Status CheckCommandLine(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\": kerntuned takes flags only"));
    }
    absl::string_view body = absl::StripPrefix(absl::StripPrefix(arg, "-"), "-");
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    if (std::find(std::begin(kUsageFlags), std::end(kUsageFlags), name) != std::end(kUsageFlags)) {
      continue;  // absl's to parse (--helpon=kerntuned)
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && equals == absl::string_view::npos && absl::ConsumePrefix(&body, "no")) {
      // --nocpu: a boolean's negation.
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(body);
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          kt::proto::UnknownFlagMessage(name, SuggestableFlags()));
    }
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(body.substr(equals + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];  // --workers 4
    } else {
      return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value (", arg, "=VALUE)"));
    }
    if (!IsOwnFlag(*flag)) continue;
    // Parsed into the flag now and again by absl: the same value.
    if (std::string error; !flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Whether the command line sets --metrics_address (absl does not say).
bool GivesMetricsAddress(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (absl::StartsWith(arg, "--metrics_address") || absl::StartsWith(arg, "-metrics_address")) {
      return true;
    }
  }
  return false;
}

int main(int argc, char** argv) {
#ifdef NDEBUG
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles
  // (about 22 ns a lock, and a Run takes several); debug builds and the
  // thread sanitizer keep finding those.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  ConfigureUsage();
  if (absl::Status checked = CheckCommandLine(argc, argv); !checked.ok()) {
    std::fprintf(stderr, "kerntuned: %s (kerntuned --help)\n",
                 std::string(checked.message()).c_str());
    return 2;
  }
  const bool metrics_address_given = GivesMetricsAddress(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const kt::server::Options options = OptionsFromFlags(metrics_address_given);
  if (absl::Status valid = kt::server::ValidateOptions(options); !valid.ok()) {
    kt::server::LogError(valid.message());
    return 2;
  }
  kt::server::RouteGrpcLogging();
  // Hold gRPC initialized until the process ends. Otherwise the last gRPC
  // object RunServer destroys runs the final grpc_shutdown, which joins
  // gRPC's executor thread; that thread was seen parked in a poll with a
  // 10 s timeout after a shutdown, holding the exit back.
  grpc_init();
  const absl::Status status = kt::server::RunServer(options);
  if (!status.ok()) {
    kt::server::LogError(status.ToString());
    return kt::server::IsUsageError(status) ? 2 : 1;  // a flag value it could not use: 2
  }
  // Everything the daemon owns is closed by now. Skip the static
  // destructors and the CUDA runtime's exit-time teardown, which was seen to
  // hang the exit on an H100 with gRPC's threads still parked; the driver
  // reclaims the context when the process ends.
  // Timed like every line: the process teardown after this is the kernel
  // driver's.
  kt::server::LogInfo("stopped");
  std::fflush(stdout);
  std::_Exit(0);
}
