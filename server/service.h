// The KernTune gRPC service: thin handlers (validate -> backend -> convert
// the status), one line on stderr per failed request.
#ifndef KERNTUNE_SERVER_SERVICE_H_
#define KERNTUNE_SERVER_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "server/backend.h"

namespace kt::server {

// The one place an absl::Status becomes a grpc::Status.
grpc::Status ToGrpcStatus(const absl::Status& status);

struct ServiceOptions {
  int64_t max_request_bytes = 0;
  std::string backend_reason;  // for GetStatus
  std::string database_path;
};

class KernTuneService final : public kerntune::v1::KernTune::Service {
 public:
  // `backend` must outlive the service.
  KernTuneService(Backend& backend, ServiceOptions options)
      : backend_(backend), options_(std::move(options)), started_(absl::Now()) {}

  grpc::Status Run(grpc::ServerContext* context, const kerntune::v1::RunRequest* request,
                   kerntune::v1::RunResponse* response) override;
  grpc::Status GetConfig(grpc::ServerContext* context,
                         const kerntune::v1::GetConfigRequest* request,
                         kerntune::v1::GetConfigResponse* response) override;
  grpc::Status ListConfigs(grpc::ServerContext* context,
                           const kerntune::v1::ListConfigsRequest* request,
                           kerntune::v1::ListConfigsResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context,
                         const kerntune::v1::GetStatusRequest* request,
                         kerntune::v1::GetStatusResponse* response) override;

  // Refuses new calls with UNAVAILABLE from now on and waits up to `timeout`
  // for the calls in flight to finish. True when none is left.
  bool Drain(absl::Duration timeout);

 private:
  class CallGuard;

  Backend& backend_;
  const ServiceOptions options_;
  const absl::Time started_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_SERVICE_H_
