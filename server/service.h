// The KernTune gRPC service: thin handlers (validate -> backend -> convert
// the status), failed requests logged by caller (request_log.h). The state lives in
// its own classes: the calls in flight (drain_guard.h), the Runs answered
// (run_counters.h), registrations (buffer_registry.h) and opened CUDA IPC
// memory (client_tensors.h). gRPC's callback API:
// a call is answered on the gRPC thread that read it, without a hand-off,
// unless it may wait long (a large Run, RegisterBuffer's IPC open), which
// goes to the service's workers so gRPC's threads never block on a kernel.
// A large Run is validated, resolved and routed on a shared worker, then
// executed on the workers of its device, so a device busy with long
// kernels holds only its own threads.
// Runs through a submission queue (queue_poller.h) take the other path: the
// pollers validate and resolve them with the same code, then launch them on
// the queue's stream of their device without waiting (run_stream.h). The
// waiting mechanisms tried for gRPC before (a polling launcher thread,
// busy-polled completion queues: bench/results/2026-11-21-h200-hot-launcher,
// 2026-11-22-h100-busy-poll) left the code: gRPC itself was the floor.
#ifndef KERNTUNE_SERVER_SERVICE_H_
#define KERNTUNE_SERVER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "server/backend.h"
#include "server/buffer_registry.h"
#include "server/client_memory.h"
#include "server/client_tensors.h"
#include "server/drain_guard.h"
#include "server/idle_tuner.h"
#include "server/metrics.h"
#include "server/peer_credentials.h"
#include "server/queue_poller.h"
#include "server/request_log.h"
#include "server/request_parsing.h"
#include "server/run_counters.h"
#include "server/run_queue.h"
#include "server/stage_clock.h"
#include "server/worker_pool.h"

namespace kt::server {

// The one place an absl::Status becomes a grpc::Status.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Runs of up to this many elements are answered on gRPC's own thread: 64Ki
// elements (128 KiB of float16) run in a few microseconds on a GPU and well
// under a millisecond in the CPU reference, less than a hand-off to a worker
// costs; a larger Run would hold one of gRPC's threads through its kernel.
inline constexpr int64_t kMaxGrpcThreadRunElements = int64_t{1} << 16;

struct ServiceOptions {
  int64_t max_request_bytes = 0;
  std::string backend_reason;  // for GetStatus
  std::string database_path;
  // The shipped config files of this GPU's SKU the backend loaded.
  std::vector<std::string> shipped_config_files;
  RegistryLimits registry;
  // How long a one-off CUDA IPC mapping stays cached unused.
  absl::Duration ipc_idle = absl::Seconds(60);
  // Opened CUDA IPC allocations at once, registered or one-off: each maps
  // into the daemon's address space. With RegistryLimits::max_buffers'
  // 32768 it leaves the daemon itself a quarter of vm.max_map_count's
  // default 65530.
  int max_ipc_mappings = 16384;
  // The calling process (peer credentials of the Unix socket) from gRPC's
  // peer string; nullopt for TCP callers, which may send inline tensors only.
  std::function<std::optional<PeerProcess>(absl::string_view grpc_peer)> identify_caller;
  // Where answered Runs and the daemon's state are counted; null = nowhere.
  // Must outlive the service.
  Metrics* metrics = nullptr;
  // Threads for the calls that may wait long: this many shared, and this
  // many per device for executing large Runs.
  int workers = 8;
  // Submission queues (OpenQueue) and their poller.
  QueueLimits queues;
  PollerOptions poller;
  // kerntuned --tune_idle's tuner, for GetStatus; null = off. Must outlive
  // the service.
  const IdleTuner* idle_tuner = nullptr;
};

// Small Runs, of at most kMaxGrpcThreadRunElements, are answered on gRPC's
// thread. Larger ones (by element count, saturating; malformed shapes count
// as small and are refused fast) go to a worker.
bool RunsOnGrpcThread(const kerntune::v1::RunRequest& request);

// Runs that come through a submission queue (run_queue.h) take the same
// stages as a gRPC Run: Prepare (validation, resolution against the queue
// owner's registrations, routing), then Complete, on the poller's thread
// when small, else on the device's workers; the answer goes to the queue's
// completion ring, counted with path "queue". A descriptor that repeats the
// queue's last one reuses its validation, kept by the queue; it is
// resolved and routed anew.
class KernTuneService final : public ParsingService, public QueuedRunSink {
 public:
  // `backend` must outlive the service.
  KernTuneService(Backend& backend, ServiceOptions options);
  ~KernTuneService() override;

  // The handlers as plain calls (the gRPC methods below answer with them;
  // tests call them directly). `peer` is gRPC's peer string of the caller.
  grpc::Status HandleRun(absl::string_view peer, const kerntune::v1::RunRequest* request,
                         kerntune::v1::RunResponse* response);
  grpc::Status HandleGetConfig(absl::string_view peer,
                               const kerntune::v1::GetConfigRequest* request,
                               kerntune::v1::GetConfigResponse* response);
  grpc::Status HandleListConfigs(absl::string_view peer,
                                 const kerntune::v1::ListConfigsRequest* request,
                                 kerntune::v1::ListConfigsResponse* response);
  grpc::Status HandleListServedShapes(absl::string_view peer,
                                      const kerntune::v1::ListServedShapesRequest* request,
                                      kerntune::v1::ListServedShapesResponse* response);
  grpc::Status HandleGetStatus(absl::string_view peer,
                               const kerntune::v1::GetStatusRequest* request,
                               kerntune::v1::GetStatusResponse* response);
  grpc::Status HandleRegisterBuffer(absl::string_view peer,
                                    const kerntune::v1::RegisterBufferRequest* request,
                                    kerntune::v1::RegisterBufferResponse* response);
  grpc::Status HandleUnregisterBuffer(absl::string_view peer,
                                      const kerntune::v1::UnregisterBufferRequest* request,
                                      kerntune::v1::UnregisterBufferResponse* response);
  grpc::Status HandleListBuffers(absl::string_view peer,
                                 const kerntune::v1::ListBuffersRequest* request,
                                 kerntune::v1::ListBuffersResponse* response);
  grpc::Status HandleOpenQueue(absl::string_view peer,
                               const kerntune::v1::OpenQueueRequest* request,
                               kerntune::v1::OpenQueueResponse* response);
  grpc::Status HandleCloseQueue(absl::string_view peer,
                                const kerntune::v1::CloseQueueRequest* request,
                                kerntune::v1::CloseQueueResponse* response);

  // QueuedRunSink: a new queue's streams on the backend's devices, and one
  // descriptor of a queue.
  std::unique_ptr<QueueStreams> OpenStreams() override;
  void RunQueued(const std::shared_ptr<RunQueue>& queue, RunQueue::Taken taken,
                 QueueStreams& streams) override;

  // gRPC's callback API.
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                const kerntune::v1::RunRequest* request,
                                kerntune::v1::RunResponse* response) override;
  grpc::ServerUnaryReactor* GetConfig(grpc::CallbackServerContext* context,
                                      const kerntune::v1::GetConfigRequest* request,
                                      kerntune::v1::GetConfigResponse* response) override;
  grpc::ServerUnaryReactor* ListConfigs(grpc::CallbackServerContext* context,
                                        const kerntune::v1::ListConfigsRequest* request,
                                        kerntune::v1::ListConfigsResponse* response) override;
  grpc::ServerUnaryReactor* ListServedShapes(
      grpc::CallbackServerContext* context, const kerntune::v1::ListServedShapesRequest* request,
      kerntune::v1::ListServedShapesResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const kerntune::v1::GetStatusRequest* request,
                                      kerntune::v1::GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* RegisterBuffer(grpc::CallbackServerContext* context,
                                           const kerntune::v1::RegisterBufferRequest* request,
                                           kerntune::v1::RegisterBufferResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterBuffer(
      grpc::CallbackServerContext* context, const kerntune::v1::UnregisterBufferRequest* request,
      kerntune::v1::UnregisterBufferResponse* response) override;
  grpc::ServerUnaryReactor* ListBuffers(grpc::CallbackServerContext* context,
                                        const kerntune::v1::ListBuffersRequest* request,
                                        kerntune::v1::ListBuffersResponse* response) override;
  grpc::ServerUnaryReactor* OpenQueue(grpc::CallbackServerContext* context,
                                      const kerntune::v1::OpenQueueRequest* request,
                                      kerntune::v1::OpenQueueResponse* response) override;
  grpc::ServerUnaryReactor* CloseQueue(grpc::CallbackServerContext* context,
                                       const kerntune::v1::CloseQueueRequest* request,
                                       kerntune::v1::CloseQueueResponse* response) override;

  // Every second: ends registrations past their lease or of exited owners,
  // and queues of exited owners or closed as broken; closes idle one-off
  // IPC mappings, and lets the backend do the same.
  void Housekeep(absl::Time now);
  // Stops the queue poller, closes every queue, ends every registration and
  // closes every mapping (shutdown, after Drain).
  void CloseClientMemory();

  // Refuses new calls with UNAVAILABLE from now on and waits up to `timeout`
  // for the calls in flight to finish. True when none is left.
  bool Drain(absl::Duration timeout);

  // Where failed calls are logged; the TCP listener's token check logs the
  // calls it refuses here too, before they reach the service.
  RequestLog& request_log() { return request_log_; }

 private:
  // ParsingService: a request that did not parse, refused as any bad one.
  grpc::Status Unparsed(absl::string_view rpc, absl::string_view peer,
                        const absl::Status& status) override {
    return Fail(rpc, peer, status);
  }
  std::optional<PeerProcess> Caller(absl::string_view peer) const;
  // A failed call: logged (rate-limited, by caller) and converted.
  grpc::Status Fail(absl::string_view rpc, absl::string_view peer, const absl::Status& status);
  template <class Request, class Response>
  using Handler = grpc::Status (KernTuneService::*)(absl::string_view peer, const Request*,
                                                   Response*);
  // Answers the call with the handler's status: on this (gRPC's) thread, or
  // on a worker when `on_worker`.
  template <class Request, class Response>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, bool on_worker,
                                   Handler<Request, Response> handle, const Request* request,
                                   Response* response);
  // A Run between its two stages.
  struct PreparedRun;
  // Stage one: `validated` (ValidateRun's answer for `request`, or a
  // queue's kept copy of it) resolved and routed; the times go into
  // `timing`.
  absl::Status Prepare(const kerntune::v1::RunRequest& request,
                       absl::StatusOr<RunRequest> validated, PreparedRun& prepared,
                       kerntune::v1::RunTiming& timing);
  // How a Run's answer leaves: its status, with `response` filled on OK.
  // It may free the request and the response. A queued Run's response
  // leaves out the fields of its point (config, backend, device): they come
  // serialized in `answer_prefix`, to be written before the response's
  // (the protobuf wire format joins the two). Empty for other Runs.
  using Deliver =
      absl::FunctionRef<void(const grpc::Status&, absl::string_view answer_prefix)>;
  // Stage two: the backend on the routed device, and the response.
  void Complete(absl::string_view peer, PreparedRun& prepared,
                kerntune::v1::RunResponse* response, Deliver deliver);
  // The backend's answer into the response (stage two's end, or a stream's
  // answer); `routed` is when execution began. The metrics count a Run
  // after `deliver`: off the client's path.
  void Respond(absl::string_view peer, const PreparedRun& prepared,
               StageClock::time_point routed, absl::StatusOr<RunResult>& result,
               kerntune::v1::RunResponse* response, Deliver deliver);
  // Every Run's end: counted in the metrics; a failure logged and converted.
  grpc::Status RunAnswered(absl::string_view peer, const PreparedRun& prepared,
                           const absl::Status& status, const RunResult* result);
  // The gauges, from the registry, the IPC mappings and the backend.
  void UpdateGauges();
  // The client memory a RegisterBuffer request names, opened.
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenRegisteredMemory(
      const kerntune::v1::RegisterBufferRequest& request, const PeerProcess& caller);

  Backend& backend_;
  const ServiceOptions options_;
  const absl::Time started_;
  DrainGuard drain_;
  RunCounters run_counters_;
  BufferRegistry registry_{options_.registry};
  // Opened CUDA IPC memory by handle bytes (registrations and one-offs).
  CudaIpcMemoryCache cuda_ipc_{backend_, options_.ipc_idle, options_.max_ipc_mappings};
  // Failed calls on the log; flushed by Housekeep.
  RequestLog request_log_{&Log};
  // Failed devices whose registrations were released (Housekeep's alone).
  absl::flat_hash_set<int> released_devices_;
  RunQueues queues_{options_.queues};
  QueuePoller poller_{queues_, *this, options_.poller};
  // Each device's workers for large Runs; the shared pool below hands them
  // work, so they go after it.
  std::vector<std::unique_ptr<WorkerPool>> device_workers_;
  // Last member: destroyed first, it runs what is queued before the rest goes.
  WorkerPool workers_{options_.workers};
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_SERVICE_H_
