// kerntuned's life: pick a backend, listen on the Unix socket (and TCP when
// asked), serve until SIGTERM/SIGINT, then drain and clean up.
#ifndef KERNTUNE_SERVER_SERVER_H_
#define KERNTUNE_SERVER_SERVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/gpu_wait.h"
#include "server/service.h"

namespace kt::server {

inline constexpr int64_t kDefaultMaxRequestBytes = int64_t{256} << 20;

struct Options {
  // Unix domain socket to listen on; created with mode 0660.
  std::string socket_path;
  // "host:port" to listen on as well; empty = no TCP.
  std::string tcp_address;
  // Tuning store, opened read-only; a missing file = no tuned configs.
  std::string db_path;
  // Shipped config files (*.json, one per GPU SKU); those of the device's
  // SKU are served after the store's entries. Empty or missing = none.
  std::string configs_dir;
  // Use the CPU reference even when a GPU is present.
  bool force_cpu = false;
  // Largest tensor (rows * cols * dtype size) a request may carry.
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  // Streams in the GPU backend's pool.
  int streams = 4;
  // How request threads wait for the GPU, and hybrid's polling budget.
  GpuWait gpu_wait = GpuWait::kYield;
  int64_t gpu_wait_spin_us = 2000;
  // Launch Runs on device memory from a thread that polls for work (holds a
  // core), and how long it keeps polling after the last Run before it sleeps.
  bool hot_launcher = false;
  int64_t hot_launcher_idle_ms = 100;
  // Threads that take Run and GetConfig from a completion queue, polling it
  // without sleeping (0 = gRPC's callback threads serve them), and how long
  // they keep polling after the last call before they block.
  int busy_poll_threads = 0;
  int64_t busy_poll_idle_ms = 100;
  // Threads for the calls that may wait long (Runs above 64Ki elements,
  // RegisterBuffer); the rest are answered on gRPC's callback threads.
  int workers = 8;
  // Runs of up to this many elements are answered on gRPC's thread, larger
  // ones on a worker.
  int64_t grpc_thread_run_elements = kDefaultMaxGrpcThreadRunElements;
  // gRPC's sync-server threads, which serve the reflection service (the
  // KernTune service uses the callback API): at least min_pollers are kept
  // waiting (a request taking the last one makes the server start another
  // thread first), and a thread whose request is done exits when
  // max_pollers already wait. gRPC's defaults (1 and 2) create and end a
  // thread per request under concurrent clients.
  int grpc_min_pollers = 2;
  int grpc_max_pollers = 32;
  // How long in-flight requests may take to finish at shutdown.
  int shutdown_grace_ms = 5000;
  // Default idle lease of a registered buffer (RegisterBuffer ttl_seconds 0).
  int64_t buffer_ttl_s = 3600;
};

// $XDG_RUNTIME_DIR/kerntune.sock, else /run/kerntune/kerntune.sock.
std::string DefaultSocketPath();

// Prepares `path` for bind: creates its parent directory, removes a stale
// socket file that nothing listens on. FailedPrecondition when a live server
// holds it or the path is not a socket.
absl::Status PrepareSocketPath(const std::string& path);

// Serves until SIGTERM or SIGINT, then refuses new calls, lets requests in
// flight finish (up to shutdown_grace_ms), removes the socket and returns OK.
// Installs process-wide SIGTERM/SIGINT handlers (a self-pipe).
absl::Status RunServer(const Options& options);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_SERVER_H_
