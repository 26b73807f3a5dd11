// kerntuned's main loop (see server.h).
#include "server/server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/device_identity.h"
#include "kernels/device_info.h"
#include "kernels/version.h"
#include "proto/shipped_configs.h"
#include "server/config_cache.h"
#include "server/cpu_backend.h"
#include "server/gpu_backend.h"
#include "server/idle_tuner.h"
#include "server/log.h"
#include "server/memory_trim.h"
#include "server/service.h"
#include "server/unix_listener.h"
#include "tuner/backend.h"
#include "tuner/gpu_backend.h"

namespace kt::server {
namespace {

constexpr char kServiceName[] = "kerntune.v1.KernTune";
// How often the tuning store is checked for new data (one cheap PRAGMA).
constexpr absl::Duration kReloadInterval = absl::Seconds(2);
// Streams of each GPU: Runs of this many clients overlap on the GPU;
// a lone client keeps one stream, so its Runs stay in order.
constexpr int kGpuStreams = 4;
// gRPC's sync-server threads, which serve only the reflection and health
// services (KernTune uses the callback API): at least the minimum are kept
// waiting (a request taking the last one makes the server start another
// first), and a thread whose request is done exits when the maximum
// already wait. gRPC's defaults (1 and 2) create and end a thread per
// request under concurrent clients.
constexpr int kGrpcMinPollers = 2;
constexpr int kGrpcMaxPollers = 32;
// The idle tuner's device memory: the L2 flush buffer (4 x L2: 200 MB on
// an H100 or H200, 504 MB on a B200) and a problem with its rotation sets
// (4 x L2 for small problems). 1 GiB is about 1% of those GPUs' memory;
// larger problems are left to `kerntune tune --served`.
constexpr int64_t kIdleTunerMemoryBytes = int64_t{1} << 30;
// How long the calls in flight at SIGTERM may take to finish: a large Run's
// kernel is milliseconds; a client that still waits after this is cut off.
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);
// A client that stops reading (a hung or stopped process) leaves its
// answers unsent in the daemon, which holds an inline output about twice
// (tests/client/daemon_faults_test.cc: 64 unread 8 MiB answers took 1.2 GB)
// until the connection ends. With calls in flight on a connection that has
// been silent this long the daemon pings it, and ends it when no answer
// comes within the timeout. A live client answers pings in gRPC's own I/O,
// whatever its application does (an otherwise idle one within gRPC's 5 s
// backup poll).
constexpr int kKeepaliveTimeMs = 5 * 1000;
constexpr int kKeepaliveTimeoutMs = 10 * 1000;

// Self-pipe: the handler only writes the signal number; the serve loop
// reads it. Whichever thread the kernel picks runs the handler, so no
// thread's signal mask matters.
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int signal_number) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] ssize_t written = write(g_signal_pipe[1], &byte, 1);
  errno = saved_errno;
}

absl::Status InstallSignalHandlers() {
  if (g_signal_pipe[0] < 0 && pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &action, nullptr) != 0 || sigaction(SIGINT, &action, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("sigaction: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Blocks until SIGTERM or SIGINT arrives; returns its number.
int WaitForStopSignal() {
  unsigned char byte = 0;
  while (true) {
    const ssize_t got = read(g_signal_pipe[0], &byte, 1);
    if (got == 1) return byte;
    if (got < 0 && errno == EINTR) continue;
    return SIGTERM;  // the pipe broke: stop rather than spin
  }
}

absl::Status ErrnoError(absl::string_view what, const std::string& path, int error) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

// True when a server accepts connections on the socket at `path`.
bool SomethingListens(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const bool connected =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return connected;
}

struct Backends {
  std::unique_ptr<Backend> backend;
  std::string reason;
  // The shipped config files of the device's SKU it serves.
  std::vector<std::string> shipped_config_files;
};

// The shipped entries of `sku` from `dir`. Unusable files and entries are
// logged by name and left out: a bad shipped file must not stop a daemon.
proto::ShippedEntries LoadShippedConfigs(const std::string& dir, const db::GpuSku& sku) {
  if (dir.empty()) return {};
  const std::vector<proto::ShippedConfigFile> files = proto::ReadShippedConfigs(dir);
  for (const std::string& problem : proto::DescribeProblems(files)) {
    LogWarning(absl::StrCat("shipped config file ", problem));
  }
  return proto::ShippedEntriesFor(files, sku);
}

Backends CpuBecause(std::string reason) {
  Backends cpu;
  cpu.backend = std::make_unique<CpuBackend>();
  cpu.reason = std::move(reason);
  return cpu;
}

// The GPU backend on the devices --devices selects, each with the config
// cache of its SKU; else the CPU reference with the reason. Naming a device
// that does not exist is an error, not a fallback.
absl::StatusOr<Backends> MakeBackend(const Options& options) {
  if (options.execution.force_cpu) return CpuBecause("--cpu given");
  const std::vector<kernels::VisibleDevice> visible = kernels::VisibleDevices();
  absl::StatusOr<std::vector<int>> selected =
      kernels::SelectDevices(options.execution.devices, visible);
  if (!selected.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices=", options.execution.devices, ": ", selected.status().message()));
  }
  if (selected->empty()) return CpuBecause("no CUDA device found");
  std::vector<std::string> shipped_files;
  const ConfigCacheFactory make_cache =
      [&](const kernels::DeviceInfo& device) -> absl::StatusOr<std::unique_ptr<ConfigCache>> {
    proto::ShippedEntries shipped =
        LoadShippedConfigs(options.configs.shipped_dir, tuner::SkuOf(device));
    for (std::string& file : shipped.files) {
      if (std::find(shipped_files.begin(), shipped_files.end(), file) == shipped_files.end()) {
        shipped_files.push_back(std::move(file));
      }
    }
    absl::StatusOr<std::unique_ptr<ConfigCache>> cache =
        ConfigCache::Create(options.configs.db_path, device, std::move(shipped.entries));
    if (cache.ok()) (*cache)->StartPolling(kReloadInterval);
    return cache;
  };
  std::vector<GpuBackend::Unusable> unusable;
  absl::StatusOr<std::unique_ptr<GpuBackend>> gpu =
      GpuBackend::Create(*selected, kGpuStreams, make_cache, &unusable);
  for (const GpuBackend::Unusable& device : unusable) {
    LogWarning(absl::StrFormat("CUDA device %d is not served: %s", device.ordinal, device.reason));
  }
  if (!gpu.ok()) return CpuBecause(absl::StrCat("no CUDA device usable: ", gpu.status().message()));
  std::vector<std::string> names;
  for (const BackendDevice& device : (*gpu)->devices()) {
    names.push_back(absl::StrCat(device.info.ordinal, " ", device.info.name));
  }
  std::string reason = absl::StrCat(names.size() == 1 ? "CUDA device " : "CUDA devices ",
                                    absl::StrJoin(names, ", "));
  return Backends{*std::move(gpu), std::move(reason), std::move(shipped_files)};
}

// --tune_idle's tuner over the GPU backend's devices: each device's Runs
// and record of problems served untuned, and a low-priority,
// memory-bounded tuner backend.
absl::StatusOr<std::unique_ptr<IdleTuner>> MakeIdleTuner(const Options& options,
                                                         Backend& backend,
                                                         const std::string& reason) {
  if (backend.name() != "gpu") {
    return absl::FailedPreconditionError(absl::StrCat(
        "--tune_idle tunes GPU kernels, and this daemon runs the ", backend.name(),
        " backend (", reason, "): start it on a GPU, or without --tune_idle"));
  }
  std::vector<IdleTuner::Device> devices;
  for (const BackendDevice& device : backend.devices()) {
    devices.push_back({device.info.ordinal, tuner::SkuOf(device.info),
                       &device.config_cache->served_untuned()});
  }
  const IdleTuner::ActivityOf activity = [&backend](size_t index) {
    const std::vector<BackendDevice> devices = backend.devices();
    return IdleTuner::Activity{devices[index].runs, devices[index].runs_in_flight};
  };
  const IdleTuner::OpenBackend open_backend =
      [](int ordinal) -> absl::StatusOr<std::unique_ptr<tuner::Backend>> {
    tuner::GpuBackendOptions gpu;
    gpu.low_priority = true;
    gpu.memory_limit_bytes = kIdleTunerMemoryBytes;
    absl::StatusOr<std::unique_ptr<tuner::GpuBackend>> made =
        tuner::GpuBackend::Create(ordinal, gpu);
    if (!made.ok()) return made.status();
    return std::unique_ptr<tuner::Backend>(*std::move(made));
  };
  IdleTuner::Options tuner_options;
  tuner_options.db_path = options.configs.db_path;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  tuner_options.host = host;
  return IdleTuner::Create(std::move(devices), activity, open_backend, tuner_options);
}

// The health service per device: "kerntune.v1.KernTune/<uuid>" (or
// "/<ordinal>" when the UUID is unknown) is SERVING until the device fails.
// The service as a whole serves while any device does.
void UpdateDeviceHealth(const Backend& backend, grpc::HealthCheckServiceInterface& health) {
  const std::vector<BackendDevice> devices = backend.devices();
  bool any_serving = false;
  for (const BackendDevice& device : devices) {
    const std::string name =
        absl::StrCat(kServiceName, "/",
                     device.identity.uuid.empty() ? absl::StrCat(device.info.ordinal)
                                                  : device.identity.uuid);
    health.SetServingStatus(name, device.failure.empty());
    any_serving = any_serving || device.failure.empty();
  }
  if (!devices.empty() && !any_serving) health.SetServingStatus(kServiceName, false);
}

int MessageLimit(int64_t max_request_bytes) {
  // The most one legal Run carries inline: its input plus LayerNorm's gamma
  // and beta, each up to --max_request_bytes (one row of that size), plus
  // room for the envelope. Refused only once received whole: gRPC checks
  // the size of a message it holds; the quota below bounds how many.
  const int64_t limit = max_request_bytes <= (INT_MAX - (1 << 20)) / 3
                            ? 3 * max_request_bytes + (1 << 20)
                            : INT_MAX;
  return static_cast<int>(limit);
}

// The memory gRPC may hold in received messages at once, over every
// connection: one largest request and as much again. Without it each
// concurrent call received its message whole before any was refused: four
// of 760 MiB took the daemon to 3.14 GB (issue 43). Past it gRPC stops
// reading (flow control) and, under pressure, ends the connections with
// the most in flight.
size_t ReceiveQuota(int64_t max_request_bytes) {
  return 2 * static_cast<size_t>(MessageLimit(max_request_bytes));
}

// A usage error: RunServer's caller exits 2 on it (IsUsageError).
constexpr char kUsageErrorUrl[] = "kerntune.dev/usage-error";

absl::Status UsageError(absl::Status status) {
  status.SetPayload(kUsageErrorUrl, absl::Cord("1"));
  return status;
}

// Descriptors: raised to the hard limit, which is what the operator (or
// systemd's LimitNOFILE) allows; the soft limit is often 1024, fewer than
// kMaxConnectionsPerProcess x a few clients.
void RaiseDescriptorLimit() {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t was = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    LogWarning(absl::StrCat("cannot raise the descriptor limit from ", was, " to ",
                            limit.rlim_max, ": ", std::strerror(errno)));
  }
}

// The gRPC server: TCP when asked, with `tcp_credentials` (the Unix socket
// is the daemon's own listener), message limits, the service and
// reflection. Null when it cannot listen.
std::unique_ptr<grpc::Server> BuildGrpcServer(
    const Options& options, KernTuneService& service,
    const std::shared_ptr<grpc::ServerCredentials>& tcp_credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int tcp_port = 0;
  const std::string& tcp = options.listen.tcp_address;
  if (!tcp.empty()) builder.AddListeningPort(tcp, tcp_credentials, &tcp_port);
  builder.SetMaxReceiveMessageSize(MessageLimit(options.limits.max_request_bytes));
  builder.SetMaxSendMessageSize(MessageLimit(options.limits.max_request_bytes));
  grpc::ResourceQuota quota("kerntuned");
  quota.Resize(ReceiveQuota(options.limits.max_request_bytes));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.SetSyncServerOption(grpc::ServerBuilder::MIN_POLLERS, kGrpcMinPollers);
  builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, kGrpcMaxPollers);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server != nullptr && !tcp.empty() && tcp_port == 0) {
    server->Shutdown();
    return nullptr;
  }
  return server;
}

// The line that says the daemon is up: where, who may pass memory
// references, which backend and why, and the configs it serves.
void LogServing(const Options& options, const Backend& backend, const std::string& reason,
                const std::string& metrics_url, const MemoryAccessPolicy& memory_access) {
  std::string configs = "no tuned configs";
  // Per SKU: the first device of each.
  std::vector<std::string> per_sku;
  std::vector<std::string> skus;
  for (const BackendDevice& device : backend.devices()) {
    const ConfigCache* cache = device.config_cache;
    if (cache == nullptr ||
        std::find(skus.begin(), skus.end(), cache->sku().name) != skus.end()) {
      continue;
    }
    skus.push_back(cache->sku().name);
    per_sku.push_back(absl::StrCat(cache->sku().name, ": ", cache->local_entries(), " tuned, ",
                                   cache->shipped_entries(), " shipped"));
  }
  if (!per_sku.empty()) {
    configs = absl::StrCat(absl::StrJoin(per_sku, "; "), " (store ",
                           options.configs.db_path.empty() ? "(none)" : options.configs.db_path,
                           ")");
  }
  const std::string note = backend.note();
  const std::string tcp =
      options.listen.tcp_address.empty()
          ? ""
          : absl::StrCat(" and ", options.listen.tcp_address, " (",
                         DescribeTcpSecurity(options.listen.tcp_security), ")");
  LogInfo(absl::StrCat("serving on unix:", options.listen.socket_path,
                       " (memory references from ", memory_access.Describe(), ")", tcp,
                       metrics_url.empty() ? "" : ", metrics on ",
                       metrics_url, ", backend ", backend.name(), " (", reason, ")",
                       note.empty() ? ", " : ": ", note.empty() ? configs : note));
}

}  // namespace

std::string DefaultSocketPath() {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && runtime_dir[0] != '\0') {
    return absl::StrCat(runtime_dir, "/kerntune.sock");
  }
  return "/run/kerntune/kerntune.sock";
}

absl::Status PrepareSocketPath(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("creating ", parent.string(), ": ", error.message()));
    }
  }
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError("inspecting", path, errno);
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; remove it or pick another --socket"));
  }
  if (SomethingListens(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("another server is listening on ", path));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("removing the stale socket", path, errno);
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const Options& options) {
  if (options.listen.socket_path.empty()) {
    return absl::InvalidArgumentError("--socket must not be empty");
  }
  if (options.listen.socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--socket=", options.listen.socket_path, " is longer than ",
        sizeof(sockaddr_un{}.sun_path) - 1, " bytes, the Unix socket path limit"));
  }
  if (options.limits.max_request_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_request_bytes=", options.limits.max_request_bytes, " must be >= 1"));
  }
  if (options.limits.buffer_ttl_s < 1 || options.limits.buffer_ttl_s > 7 * 24 * 3600) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--buffer_ttl_s=", options.limits.buffer_ttl_s, " must be in [1, 604800] (a week)"));
  }
  if (options.limits.max_buffers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_buffers=", options.limits.max_buffers, " must be >= 1"));
  }
  if (options.execution.force_cpu && options.execution.devices != "all") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cpu and --devices=", options.execution.devices, " exclude each other: the CPU "
        "backend serves no GPU"));
  }
  if (options.tuning.tune_idle && options.execution.force_cpu) {
    return absl::InvalidArgumentError(
        "--tune_idle and --cpu exclude each other: the CPU backend launches no tuned configs, "
        "so there is nothing to tune");
  }
  if (options.tuning.tune_idle && options.configs.db_path.empty()) {
    return absl::InvalidArgumentError(
        "--tune_idle writes what it tunes to the tuning store, and there is none: give --db");
  }
  if (options.execution.workers < 1 || options.execution.workers > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers=", options.execution.workers, " must be in [1, 1024]"));
  }
  return ValidateTcpSecurity(options.listen.tcp_address, options.listen.tcp_security);
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsageErrorUrl).has_value();
}

absl::Status RunServer(const Options& options) {
  if (absl::Status s = InstallSignalHandlers(); !s.ok()) return s;
  RouteProtobufLogging();
  RaiseDescriptorLimit();
  if (absl::Status s = PrepareSocketPath(options.listen.socket_path); !s.ok()) return s;
  absl::StatusOr<Backends> backends = MakeBackend(options);
  if (!backends.ok()) {
    return backends.status().code() == absl::StatusCode::kInvalidArgument
               ? UsageError(backends.status())  // --devices
               : backends.status();
  }
  Backend& backend = *backends->backend;
  std::unique_ptr<IdleTuner> idle_tuner;
  if (options.tuning.tune_idle) {
    absl::StatusOr<std::unique_ptr<IdleTuner>> made =
        MakeIdleTuner(options, backend, backends->reason);
    if (!made.ok()) return made.status();
    idle_tuner = *std::move(made);
  }

  PeerTable peers;
  ServiceOptions service_options;
  service_options.max_request_bytes = options.limits.max_request_bytes;
  service_options.backend_reason = backends->reason;
  service_options.database_path = options.configs.db_path;
  service_options.shipped_config_files = backends->shipped_config_files;
  service_options.registry.default_ttl = absl::Seconds(options.limits.buffer_ttl_s);
  service_options.registry.max_buffers = options.limits.max_buffers;
  service_options.identify_caller = [&peers](absl::string_view grpc_peer) {
    return peers.Lookup(grpc_peer);
  };
  service_options.workers = options.execution.workers;
  service_options.idle_tuner = idle_tuner.get();
  std::unique_ptr<Metrics> metrics;
  if (!options.listen.metrics_address.empty()) {
    metrics = std::make_unique<Metrics>(KT_PROJECT_VERSION, kernels::kKernelLibraryVersion);
    if (absl::Status s = metrics->Serve(options.listen.metrics_address); s.ok()) {
      service_options.metrics = metrics.get();
    } else if (options.listen.metrics_address_given) {
      return UsageError(s);
    } else {
      LogWarning(absl::StrCat("no metrics: ", s.message()));
      metrics.reset();
    }
  }
  KernTuneService service(backend, std::move(service_options));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tcp_credentials =
      MakeTcpCredentials(options.listen.tcp_security, service.request_log());
  // Each names the flag and the file it gave.
  if (!tcp_credentials.ok()) return UsageError(tcp_credentials.status());

  // The Unix socket is accepted by the daemon (peer credentials), TCP by gRPC.
  absl::StatusOr<std::unique_ptr<UnixListener>> listener =
      UnixListener::Listen(options.listen.socket_path);
  if (!listener.ok()) return listener.status();
  std::unique_ptr<grpc::Server> server = BuildGrpcServer(options, service, *tcp_credentials);
  if (server == nullptr) {
    unlink(options.listen.socket_path.c_str());
    return UsageError(absl::UnavailableError(absl::StrCat(
        "cannot listen on --tcp=", options.listen.tcp_address,
        " (is the port in use? pick another)",
        options.listen.tcp_security.tls()
            ? " (or gRPC refused the TLS files: does --tls_key belong to --tls_cert?)"
            : "")));
  }
  if (const std::optional<std::string> warning = TcpSecurityWarning(
          options.listen.tcp_address, options.listen.tcp_security)) {
    LogWarning(*warning);
  }
  (*listener)->Start(server.get(), &peers);

  // Leases, exited clients and idle IPC mappings, once a second.
  absl::Notification stop_housekeeping;
  std::thread housekeeper([&] {
    while (!stop_housekeeping.WaitForNotificationWithTimeout(absl::Seconds(1))) {
      service.Housekeep(absl::Now());
      TrimAfterLargeMessages();
      UpdateDeviceHealth(backend, *server->GetHealthCheckService());
    }
  });
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
  UpdateDeviceHealth(backend, *health);
  LogServing(options, backend, backends->reason,
             metrics ? absl::StrCat("http://", metrics->address(), "/metrics") : "",
             (*listener)->memory_access());
  if (idle_tuner != nullptr) {
    idle_tuner->Start();
    LogInfo(absl::StrCat("idle tuner on: tunes the problems served untuned while their GPU has "
                         "no Runs, into ",
                         options.configs.db_path, ", in at most ",
                         kIdleTunerMemoryBytes >> 20, " MiB of device memory"));
  }

  const int signal_number = WaitForStopSignal();
  const absl::Time stop_started = absl::Now();
  LogInfo(absl::StrCat(strsignal(signal_number), " received, draining requests in flight"));
  // Stops within a measurement, while the Runs in flight drain.
  if (idle_tuner != nullptr) idle_tuner->RequestStop();
  server->GetHealthCheckService()->SetServingStatus(false);
  // Refuse new calls and let the ones in flight finish; then shut down at
  // once, so idle client connections do not hold the exit back.
  if (!service.Drain(kShutdownGrace)) {
    LogWarning(absl::StrCat("requests still running after ",
                            absl::FormatDuration(kShutdownGrace), ", cancelling them"));
  }
  (*listener)->Stop();
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  stop_housekeeping.Notify();
  housekeeper.join();
  if (idle_tuner != nullptr) idle_tuner->Stop();
  service.CloseClientMemory();
  unlink(options.listen.socket_path.c_str());
  LogInfo(absl::StrFormat(
      "requests drained, client memory closed, socket removed (%.0f ms after the signal)",
      absl::ToDoubleMilliseconds(absl::Now() - stop_started)));
  return absl::OkStatus();
}

}  // namespace kt::server
