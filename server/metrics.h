// kerntuned's Prometheus metrics (prometheus-cpp), served on
// --metrics_address at /metrics. Every name starts with kerntune_; labels
// have bounded values only (op, dtype, device ordinal, path, status code,
// config source, SKU), never a pid, a buffer or a shape.
//
// Counters and histograms move as Runs are answered; the gauges (devices,
// buffers, config entries) are set from the daemon's state once a second
// by the housekeeper.
#ifndef KERNTUNE_SERVER_METRICS_H_
#define KERNTUNE_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace kt::server {

// The default --metrics_address: loopback only (a node's scraper runs
// there or is pointed at a port the operator opens).
inline constexpr char kDefaultMetricsAddress[] = "127.0.0.1:9464";

// What one answered Run is counted under.
struct RunLabels {
  std::string op = "invalid";     // kernels::OpName, or "invalid"
  std::string dtype = "invalid";  // kernels::DTypeName, or "invalid"
  std::string device = "none";    // the CUDA ordinal, "cpu", or "none" (not routed)
  std::string path = "grpc";      // how it came: "grpc" or "queue" (a submission queue)
};

// One device's state for the gauges.
struct DeviceGauges {
  std::string device;  // ordinal, or "cpu"
  std::string uuid;
  std::string sku;
  bool up = true;
  int64_t registered_buffers = 0;
  int64_t registered_bytes = 0;
  int64_t ipc_mappings = 0;
  int64_t tuned_entries = 0;    // local store, current
  int64_t shipped_entries = 0;  // shipped files, current
  int64_t stale_entries = 0;    // skipped for their kernel version
};

class Metrics {
 public:
  // The families, registered; nothing served yet.
  Metrics(absl::string_view version, absl::string_view kernel_version);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serves /metrics on `address` ("host:port"; port 0: one the system
  // picks). InvalidArgument naming --metrics_address when it cannot listen
  // there: why (the port in use, say) and the ways out.
  absl::Status Serve(const std::string& address);
  // Where Serve listens, with the port it bound ("127.0.0.1:40123").
  const std::string& address() const { return address_; }

  // A Run answered with `code`; `handler_seconds` from its handler's start;
  // `kernel_seconds` when its kernel was timed (< 0: not).
  void CountRun(const RunLabels& labels, absl::StatusCode code, double handler_seconds,
                double kernel_seconds);
  // A Run's config came from `source` (tuner::ConfigSourceName).
  void CountLookup(absl::string_view device, absl::string_view source);
  // Registrations ended by the reaper: "expired", "owner_exited" or
  // "device_failed".
  void CountReaped(absl::string_view reason, int count);
  // The gauges: every device's state; registrations of host shared memory
  // (device "host") and the processes that own registrations.
  void SetState(const std::vector<DeviceGauges>& devices, int64_t host_buffers,
                int64_t host_bytes, int64_t buffer_owners);

  prometheus::Registry& registry() { return *registry_; }

 private:
  // The series of one label set. Found through Family::Add the first time
  // a thread counts that set, then from the thread's own cache: Add builds
  // a label map and takes the family's lock, microseconds on every Run.
  struct RunSeries {
    prometheus::Counter* runs = nullptr;
    prometheus::Histogram* handler = nullptr;  // made at the first OK Run
    prometheus::Histogram* kernel = nullptr;   // at the first timed one
  };
  RunSeries& SeriesFor(const RunLabels& labels, absl::StatusCode code);

  // Tells this instance's entries in the threads' caches from those of an
  // earlier one at the same address.
  const uint64_t instance_;
  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& runs_;
  prometheus::Family<prometheus::Histogram>& handler_seconds_;
  prometheus::Family<prometheus::Histogram>& kernel_seconds_;
  prometheus::Family<prometheus::Counter>& lookups_;
  prometheus::Family<prometheus::Counter>& reaped_;
  prometheus::Family<prometheus::Gauge>& device_up_;
  prometheus::Family<prometheus::Gauge>& buffers_;
  prometheus::Family<prometheus::Gauge>& buffer_bytes_;
  prometheus::Family<prometheus::Gauge>& ipc_mappings_;
  prometheus::Family<prometheus::Gauge>& owners_;
  prometheus::Family<prometheus::Gauge>& config_entries_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_METRICS_H_
