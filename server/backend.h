// Backend: where a validated Run executes. The CPU fallback runs the fp64
// reference; the GPU backend launches the tuned kernel.
#ifndef KERNTUNE_SERVER_BACKEND_H_
#define KERNTUNE_SERVER_BACKEND_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/device_info.h"
#include "server/config_cache.h"
#include "server/run_request.h"

namespace kt::server {

struct RunResult {
  std::string output;  // rows * cols elements of the request's dtype
  std::vector<float> mean;
  std::vector<float> inv_std;
  // Empty on the CPU backend (no launch config there).
  std::optional<ConfigChoice> config;
  double kernel_time_us = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "gpu" or "cpu".
  virtual std::string name() const = 0;
  // Runs a request that ValidateRunRequest accepted. Thread-safe.
  virtual absl::StatusOr<RunResult> Execute(const RunRequest& request) = 0;
  // The config cache when this backend launches configs, else null.
  virtual const ConfigCache* config_cache() const { return nullptr; }
  // The devices this backend can see (empty on the CPU).
  virtual std::vector<kernels::DeviceInfo> devices() const { return {}; }
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_BACKEND_H_
