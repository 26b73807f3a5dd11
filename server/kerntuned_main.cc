// kerntuned: the kerntune daemon. Flags become an Options struct; the
// server library does the rest.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "db/tuning_store.h"
#include "grpc/grpc.h"
#include "proto/shipped_configs.h"
#include "server/server.h"

ABSL_FLAG(std::string, socket, "",
          "Unix socket to listen on (default $XDG_RUNTIME_DIR/kerntune.sock, else "
          "/run/kerntune/kerntune.sock)");
ABSL_FLAG(std::string, tcp, "", "also listen on HOST:PORT (off unless given)");
ABSL_FLAG(std::string, db, "",
          "tuning store, opened read-only (default $KERNTUNE_DB, else "
          "$XDG_DATA_HOME/kerntune/tuning.db, else ~/.local/share/kerntune/tuning.db)");
ABSL_FLAG(std::string, configs, "",
          "directory of shipped tuned-config files (*.json, one per GPU SKU), served after the "
          "store's entries (default <kerntuned's directory>/../share/kerntune/configs, else the "
          "source tree's deploy/configs)");
ABSL_FLAG(bool, cpu, false, "use the CPU reference backend even when a GPU is present");
ABSL_FLAG(int64_t, max_request_bytes, kt::server::kDefaultMaxRequestBytes,
          "largest tensor (rows * cols * dtype size) a request may carry inline");
ABSL_FLAG(int64_t, buffer_ttl_s, 3600,
          "default idle lease of a registered buffer, in seconds (RegisterBuffer ttl_seconds=0)");
ABSL_FLAG(std::string, gpu_wait, "yield",
          "how request threads wait for the GPU: spin, yield (spin, giving the core up between "
          "polls), hybrid (poll for --gpu_wait_spin_us, then block) or block (sleep until the "
          "GPU's interrupt; slowest wake-up)");
ABSL_FLAG(int64_t, gpu_wait_spin_us, 2000,
          "--gpu_wait=hybrid: microseconds to poll before blocking");
ABSL_FLAG(bool, hot_launcher, false,
          "launch Runs on device memory from a thread that polls for work instead of sleeping, "
          "so the CUDA launch path stays in cache (lower latency; holds a core while Runs come)");
ABSL_FLAG(int64_t, hot_launcher_idle_ms, 100,
          "--hot_launcher: milliseconds the launcher keeps polling after the last Run before it "
          "sleeps");
ABSL_FLAG(int, busy_poll_threads, 0,
          "threads that take Run and GetConfig calls from a queue they poll without "
          "sleeping (each holds a core while it polls); 0 = gRPC's callback threads");
ABSL_FLAG(int64_t, busy_poll_idle_ms, 100,
          "a busy-polling thread blocks after this long without a call");
ABSL_FLAG(int, workers, 8,
          "threads for the calls that may wait long (Runs above 64Ki elements, "
          "RegisterBuffer); the rest are answered on gRPC's own threads");
ABSL_FLAG(int64_t, grpc_thread_run_elements, kt::server::kDefaultMaxGrpcThreadRunElements,
          "Runs of up to this many elements are answered on gRPC's own thread (no hand-off, "
          "lowest latency); larger ones go to a worker so a long kernel does not hold gRPC's "
          "threads");
ABSL_FLAG(int, grpc_min_pollers, 2,
          "gRPC sync-server threads kept waiting for requests (the reflection service)");
ABSL_FLAG(int, grpc_max_pollers, 32,
          "most gRPC sync-server threads kept waiting for requests (the reflection service; "
          "more are started under load and end once idle)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kerntuned [--socket=PATH] [--tcp=HOST:PORT] [--db=PATH] [--cpu]");
  absl::ParseCommandLine(argc, argv);
  kt::server::Options options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  if (options.socket_path.empty()) options.socket_path = kt::server::DefaultSocketPath();
  options.tcp_address = absl::GetFlag(FLAGS_tcp);
  options.db_path = absl::GetFlag(FLAGS_db);
  if (options.db_path.empty()) options.db_path = kt::db::DefaultDatabasePath().value_or("");
  options.configs_dir = absl::GetFlag(FLAGS_configs);
  if (options.configs_dir.empty()) options.configs_dir = kt::proto::DefaultShippedConfigDir();
  options.force_cpu = absl::GetFlag(FLAGS_cpu);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.buffer_ttl_s = absl::GetFlag(FLAGS_buffer_ttl_s);
  absl::StatusOr<kt::server::GpuWait> gpu_wait =
      kt::server::ParseGpuWait(absl::GetFlag(FLAGS_gpu_wait));
  if (!gpu_wait.ok()) {
    std::fprintf(stderr, "kerntuned: %s\n", gpu_wait.status().ToString().c_str());
    return 2;
  }
  options.gpu_wait = *gpu_wait;
  options.gpu_wait_spin_us = absl::GetFlag(FLAGS_gpu_wait_spin_us);
  options.hot_launcher = absl::GetFlag(FLAGS_hot_launcher);
  options.hot_launcher_idle_ms = absl::GetFlag(FLAGS_hot_launcher_idle_ms);
  options.busy_poll_threads = absl::GetFlag(FLAGS_busy_poll_threads);
  options.busy_poll_idle_ms = absl::GetFlag(FLAGS_busy_poll_idle_ms);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.grpc_thread_run_elements = absl::GetFlag(FLAGS_grpc_thread_run_elements);
  options.grpc_min_pollers = absl::GetFlag(FLAGS_grpc_min_pollers);
  options.grpc_max_pollers = absl::GetFlag(FLAGS_grpc_max_pollers);
  // Hold gRPC initialized until the process ends. Otherwise the last gRPC
  // object RunServer destroys runs the final grpc_shutdown, which joins
  // gRPC's executor thread; that thread was seen parked in a poll with a
  // 10 s timeout after a busy-polled shutdown, holding the exit back.
  grpc_init();
  const absl::Status status = kt::server::RunServer(options);
  if (!status.ok()) {
    std::fprintf(stderr, "kerntuned: %s\n", status.ToString().c_str());
    return 1;
  }
  // Everything the daemon owns is closed by now. Skip the static
  // destructors and the CUDA runtime's exit-time teardown, which was seen to
  // hang the exit on an H100 with gRPC's threads still parked; the driver
  // reclaims the context when the process ends.
  // Timed like the signal's line: the process teardown after this is the
  // kernel driver's.
  std::fprintf(stderr, "kerntuned: stopped at %s\n",
               absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()).c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(0);
}
