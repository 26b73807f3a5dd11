// kerntuned's life: pick a backend, listen on the Unix socket (and TCP when
// asked), serve until SIGTERM/SIGINT, then drain and clean up.
#ifndef KERNTUNE_SERVER_SERVER_H_
#define KERNTUNE_SERVER_SERVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/metrics.h"
#include "server/service.h"
#include "server/tcp_security.h"

namespace kt::server {

inline constexpr int64_t kDefaultMaxRequestBytes = int64_t{256} << 20;

// What kerntuned's flags set, by component; ValidateOptions checks it.
struct Options {
  // Where clients reach the daemon.
  struct Listen {
    // --socket: the Unix socket, created with mode 0660.
    std::string socket_path;
    // --tcp: "host:port" to listen on as well; empty = no TCP.
    std::string tcp_address;
    // --tls_cert, --tls_key, --tls_client_ca, --token_file, --insecure_tcp:
    // how the TCP listener is secured (tcp_security.h).
    TcpSecurity tcp_security;
    // --metrics_address: "host:port" of the Prometheus endpoint (/metrics);
    // empty = none.
    std::string metrics_address = kDefaultMetricsAddress;
    // Whether --metrics_address was given: then an address that cannot be
    // served stops the daemon; the default only warns (another daemon, a
    // test's, may hold it).
    bool metrics_address_given = false;
  } listen;
  // Where the tuned configs come from (the GPU backend only).
  struct Configs {
    // --db: the tuning store, opened read-only; a missing file = no local
    // entries until it appears; one that cannot be read = the entries
    // loaded last until it can (config_cache.h).
    std::string db_path;
    // --configs: shipped tuned-config files; those of the device's SKU are
    // served after the store's entries. Empty or missing = none.
    std::string shipped_dir;
  } configs;
  // How Runs execute.
  struct Execution {
    // --cpu: the CPU reference even when a GPU is present.
    bool force_cpu = false;
    // --devices: the GPUs served, as kernels::SelectDevices reads it
    // ("all", or ordinals and UUIDs); with no GPU at all, the CPU.
    std::string devices = "all";
    // --workers: threads for the calls that may wait long (RegisterBuffer,
    // preparing Runs above kMaxGrpcThreadRunElements), and as many per
    // device executing those Runs; the rest are answered on gRPC's
    // callback threads.
    int workers = 8;
  } execution;
  // Tuning by the daemon itself.
  struct Tuning {
    // --tune_idle: tune the problems Runs were served untuned while their
    // GPU has no Runs, into --db (idle_tuner.h). GPU backend only.
    bool tune_idle = false;
  } tuning;
  // What one client may ask of the daemon.
  struct Limits {
    // --max_request_bytes: the largest tensor (rows * cols * inner * dtype
    // size) a request may carry inline.
    int64_t max_request_bytes = kDefaultMaxRequestBytes;
    // --buffer_ttl_s: the default idle lease of a registered buffer
    // (RegisterBuffer ttl_seconds 0).
    int64_t buffer_ttl_s = 3600;
    // --max_buffers: registered buffers of every client together
    // (RegistryLimits::max_buffers says why).
    int max_buffers = RegistryLimits{}.max_buffers;
  } limits;
};

// OK when every option is usable; InvalidArgument naming the flag and its
// allowed range otherwise ("--workers=0 must be in [1, 1024]").
absl::Status ValidateOptions(const Options& options);

// $XDG_RUNTIME_DIR/kerntune.sock, else /run/kerntune/kerntune.sock.
std::string DefaultSocketPath();

// Prepares `path` (a --socket that ValidateOptions accepted) for bind:
// creates its parent directory, removes a stale socket file that nothing
// listens on. FailedPrecondition when a live server holds it or the path is
// not a socket.
absl::Status PrepareSocketPath(const std::string& path);

// Whether RunServer's error is a flag value it could not use (an unknown
// --devices entry, unusable TLS files, a --tcp or --metrics_address port
// in use): a usage error, exit 2 as for ValidateOptions.
bool IsUsageError(const absl::Status& status);

// Serves until SIGTERM or SIGINT, then refuses new calls, lets requests in
// flight finish (up to kShutdownGrace), removes the socket and returns OK.
// Installs process-wide SIGTERM/SIGINT handlers (a self-pipe). `options`
// must have passed ValidateOptions.
absl::Status RunServer(const Options& options);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_SERVER_H_
