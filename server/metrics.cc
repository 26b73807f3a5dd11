// kerntuned's Prometheus metrics (see metrics.h).
#include "server/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace kt::server {
namespace {

// Seconds from 10 us to ~42 s, doubling: a small Run's handler is tens of
// microseconds, a large Run's kernel milliseconds. Made once: every Run
// passes them to Family::Add, which uses them only for a new series.
const prometheus::Histogram::BucketBoundaries& TimeBuckets() {
  static const auto* buckets = [] {
    auto* made = new prometheus::Histogram::BucketBoundaries();
    for (double bound = 10e-6; bound < 60; bound *= 2) made->push_back(bound);
    return made;
  }();
  return *buckets;
}

// "127.0.0.1:9464" -> {"127.0.0.1", "9464"}; "[::1]:9464" -> {"::1", ...};
// "9464" -> {"", "9464"} (civetweb: every interface).
std::pair<std::string, std::string> SplitAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {"", address};
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return {host, address.substr(colon + 1)};
}

// Why nothing can listen on `address`, as bind(2) says it (civetweb's
// exception only says that it could not): 0 when bind succeeds or the
// address does not resolve.
int BindError(const std::string& address) {
  const auto [host, port] = SplitAddress(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return 0;
  }
  int error = 0;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    const int on = 1;  // as civetweb: a port left in TIME_WAIT is free
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) error = errno;
    close(fd);
  }
  freeaddrinfo(found);
  return error;
}

uint64_t NextInstance() {
  static std::atomic<uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

Metrics::Metrics(absl::string_view version, absl::string_view kernel_version)
    : instance_(NextInstance()),
      registry_(std::make_shared<prometheus::Registry>()),
      runs_(prometheus::BuildCounter()
                .Name("kerntune_runs_total")
                .Help("Runs answered, by op, dtype, device, path and gRPC status code")
                .Register(*registry_)),
      handler_seconds_(prometheus::BuildHistogram()
                           .Name("kerntune_run_handler_seconds")
                           .Help("Time from a Run's arrival in the daemon to its answer "
                                 "(Runs answered OK)")
                           .Register(*registry_)),
      kernel_seconds_(prometheus::BuildHistogram()
                          .Name("kerntune_run_kernel_seconds")
                          .Help("A Run's kernel time where measured: CUDA events when the "
                                "request asked time_kernel, the reference's time on the CPU")
                          .Register(*registry_)),
      lookups_(prometheus::BuildCounter()
                   .Name("kerntune_config_lookups_total")
                   .Help("Configs of Runs by where they came from: tuned, shipped, "
                         "nearest_tuned, heuristic")
                   .Register(*registry_)),
      reaped_(prometheus::BuildCounter()
                  .Name("kerntune_registrations_reaped_total")
                  .Help("Registrations the daemon ended: lease expired, owner exited, "
                        "device failed")
                  .Register(*registry_)),
      device_up_(prometheus::BuildGauge()
                     .Name("kerntune_device_up")
                     .Help("1 while the device serves, 0 once it failed")
                     .Register(*registry_)),
      buffers_(prometheus::BuildGauge()
                   .Name("kerntune_registered_buffers")
                   .Help("Registered buffers by device (\"host\": shared memory)")
                   .Register(*registry_)),
      buffer_bytes_(prometheus::BuildGauge()
                        .Name("kerntune_registered_bytes")
                        .Help("Bytes of the registered buffers by device")
                        .Register(*registry_)),
      ipc_mappings_(prometheus::BuildGauge()
                        .Name("kerntune_ipc_mappings")
                        .Help("CUDA IPC mappings open (registered and cached one-off)")
                        .Register(*registry_)),
      owners_(prometheus::BuildGauge()
                  .Name("kerntune_buffer_owners")
                  .Help("Processes that own registrations")
                  .Register(*registry_)),
      config_entries_(prometheus::BuildGauge()
                          .Name("kerntune_config_entries")
                          .Help("Tuned-config entries of each device's SKU: local and shipped "
                                "ones served, stale ones skipped")
                          .Register(*registry_)) {
  prometheus::BuildGauge()
      .Name("kerntune_build_info")
      .Help("The daemon's version and its kernel library's version")
      .Register(*registry_)
      .Add({{"version", std::string(version)}, {"kernel_version", std::string(kernel_version)}})
      .Set(1);
}

Metrics::~Metrics() = default;

absl::Status Metrics::Serve(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& error) {
    const int bind_error = BindError(address);
    const std::string why =
        bind_error == EADDRINUSE ? "the port is in use (another kerntuned's metrics?)"
        : bind_error != 0        ? std::strerror(bind_error)
                                 : absl::StrCat("cannot listen: ", error.what());
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_address=", address, ": ", why,
        "; give another HOST:PORT (port 0 picks a free one), or --metrics_address= to serve "
        "no metrics"));
  }
  exposer_->RegisterCollectable(registry_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  const std::string host = SplitAddress(address).first;
  const std::string shown_host = host.find(':') != std::string::npos ? absl::StrCat("[", host, "]")
                                 : host.empty()                      ? "0.0.0.0"
                                                                     : host;
  address_ = ports.empty() ? address : absl::StrCat(shown_host, ":", ports.front());
  return absl::OkStatus();
}

Metrics::RunSeries& Metrics::SeriesFor(const RunLabels& labels, absl::StatusCode code) {
  thread_local absl::flat_hash_map<std::string, RunSeries> cache;
  thread_local std::string key;
  key.clear();
  absl::StrAppend(&key, instance_, "|", labels.op, "|", labels.dtype, "|", labels.device, "|",
                  labels.path, "|", static_cast<int>(code));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  RunSeries series;
  series.runs = &runs_.Add({{"op", labels.op},
                            {"dtype", labels.dtype},
                            {"device", labels.device},
                            {"path", labels.path},
                            {"code", absl::StatusCodeToString(code)}});
  return cache.emplace(key, series).first->second;
}

void Metrics::CountRun(const RunLabels& labels, absl::StatusCode code, double handler_seconds,
                       double kernel_seconds) {
  RunSeries& series = SeriesFor(labels, code);
  series.runs->Increment();
  if (code != absl::StatusCode::kOk) return;
  if (series.handler == nullptr) {
    series.handler =
        &handler_seconds_.Add({{"op", labels.op}, {"device", labels.device}}, TimeBuckets());
  }
  series.handler->Observe(handler_seconds);
  if (kernel_seconds >= 0) {
    if (series.kernel == nullptr) {
      series.kernel =
          &kernel_seconds_.Add({{"op", labels.op}, {"device", labels.device}}, TimeBuckets());
    }
    series.kernel->Observe(kernel_seconds);
  }
}

void Metrics::CountLookup(absl::string_view device, absl::string_view source) {
  thread_local absl::flat_hash_map<std::string, prometheus::Counter*> cache;
  thread_local std::string key;
  key.clear();
  absl::StrAppend(&key, instance_, "|", device, "|", source);
  prometheus::Counter*& counter = cache[key];
  if (counter == nullptr) {
    counter = &lookups_.Add({{"device", std::string(device)}, {"source", std::string(source)}});
  }
  counter->Increment();
}

void Metrics::CountReaped(absl::string_view reason, int count) {
  if (count <= 0) return;
  reaped_.Add({{"reason", std::string(reason)}}).Increment(count);
}

void Metrics::SetState(const std::vector<DeviceGauges>& devices, int64_t host_buffers,
                       int64_t host_bytes, int64_t buffer_owners) {
  for (const DeviceGauges& device : devices) {
    device_up_.Add({{"device", device.device}, {"uuid", device.uuid}, {"sku", device.sku}})
        .Set(device.up ? 1 : 0);
    buffers_.Add({{"device", device.device}}).Set(static_cast<double>(device.registered_buffers));
    buffer_bytes_.Add({{"device", device.device}})
        .Set(static_cast<double>(device.registered_bytes));
    ipc_mappings_.Add({{"device", device.device}}).Set(static_cast<double>(device.ipc_mappings));
    for (const auto& [origin, count] : {std::pair{"local", device.tuned_entries},
                                        std::pair{"shipped", device.shipped_entries},
                                        std::pair{"stale", device.stale_entries}}) {
      config_entries_.Add({{"device", device.device}, {"sku", device.sku}, {"origin", origin}})
          .Set(static_cast<double>(count));
    }
  }
  buffers_.Add({{"device", "host"}}).Set(static_cast<double>(host_buffers));
  buffer_bytes_.Add({{"device", "host"}}).Set(static_cast<double>(host_bytes));
  owners_.Add({}).Set(static_cast<double>(buffer_owners));
}

}  // namespace kt::server
