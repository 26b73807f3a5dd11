// Busy polling of Run and GetConfig (see ServiceOptions::busy_poll_threads).
//
// Why: on a small Run most of the daemon's time is not work but waking up.
// A callback thread of gRPC sleeps between calls; it wakes for the request,
// runs the handler with cold caches (validation and the launch took 3-5x
// their hot-loop time, bench/results/2026-11-21-h200-*), and the reply
// waits for it. Here the service's own threads take Run and GetConfig from a
// completion queue they poll without sleeping, and answer on the spot.
// Measured on an H100 host (bench/results/2026-11-22-h100-busy-poll/): the
// handler halved and 10-69% more small Runs/s were served, but gRPC's own
// threads still read the request and write the reply, so one small Run's
// round trip got only 0-26 us shorter.
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "google/protobuf/descriptor.h"
#include "grpc/support/time.h"
#include "server/service.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

// gRPC numbers a service's methods in the order the .proto declares them,
// which is the descriptor's.
int MethodIndex(const char* method) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          pb::KernTune::service_full_name());
  const google::protobuf::MethodDescriptor* found =
      service == nullptr ? nullptr : service->FindMethodByName(method);
  if (found == nullptr) {
    std::fprintf(stderr, "kerntuned: no method %s in %s\n", method,
                 pb::KernTune::service_full_name());
    std::abort();  // the generated code and this file disagree: a build error
  }
  return found->index();
}

bool RunGoesToWorker(const pb::RunRequest& request, int64_t max_grpc_thread_run_elements) {
  return !RunsOnGrpcThread(request, max_grpc_thread_run_elements);
}

bool NeverToWorker(const pb::GetConfigRequest&, int64_t) { return false; }

}  // namespace

// One call on the polled queue, from its request to its reply.
class KernTuneService::PolledCallBase {
 public:
  virtual ~PolledCallBase() = default;
  // The completion queue delivered this call's tag; `ok` as it said.
  virtual void Proceed(bool ok) = 0;
};

template <class Request, class Response>
class KernTuneService::PolledCall final : public PolledCallBase {
 public:
  // Whether a call's handler runs on a worker rather than the polling thread.
  using ToWorker = bool (*)(const Request&, int64_t max_grpc_thread_run_elements);

  // Asks the queue for the next call of `method`.
  static void Await(KernTuneService& service, int method, Handler<Request, Response> handle,
                    ToWorker to_worker) {
    {
      absl::MutexLock lock(&service.polled_mu_);
      ++service.polled_calls_;
    }
    auto* call = new PolledCall(service, method, handle, to_worker);
    service.RequestAsyncUnary(method, &call->context_, &call->request_, &call->responder_,
                              service.poll_queue_.get(), service.poll_queue_.get(), call);
  }

  void Proceed(bool ok) override {
    // A call arrived: wait for the next one first, so that calls can overlap.
    if (ok && !answering_) {
      answering_ = true;
      Await(service_, method_, handle_, to_worker_);
      if (to_worker_(request_, service_.options_.max_grpc_thread_run_elements)) {
        service_.workers_.Submit([this] { Answer(); });
      } else {
        Answer();
      }
      return;
    }
    // The reply went out, or the server shut down before a call came.
    service_.PolledCallEnded();
    delete this;
  }

 private:
  PolledCall(KernTuneService& service, int method, Handler<Request, Response> handle,
             ToWorker to_worker)
      : service_(service), method_(method), handle_(handle), to_worker_(to_worker) {}

  void Answer() {
    const grpc::Status status = (service_.*handle_)(context_.peer(), &request_, &response_);
    responder_.Finish(response_, status, this);  // a failed status sends no message
  }

  KernTuneService& service_;
  const int method_;
  const Handler<Request, Response> handle_;
  const ToWorker to_worker_;
  bool answering_ = false;
  grpc::ServerContext context_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> responder_{&context_};
};

void KernTuneService::MarkPolledMethodsAsync() {
  for (const char* method : {"Run", "GetConfig"}) {
    const int index = MethodIndex(method);
    // CallbackService registered a callback handler; an async method must
    // have none, and MarkMethodAsync drops it only from a sync method.
    MarkMethodCallback(index, nullptr);
    MarkMethodAsync(index);
  }
}

void KernTuneService::StartBusyPolling(std::unique_ptr<grpc::ServerCompletionQueue> queue) {
  poll_queue_ = std::move(queue);
  // One outstanding request per thread and method: as many calls of each can
  // be taken at once as there are threads.
  const int run = MethodIndex("Run"), get_config = MethodIndex("GetConfig");
  for (int i = 0; i < options_.busy_poll_threads; ++i) {
    PolledCall<pb::RunRequest, pb::RunResponse>::Await(*this, run, &KernTuneService::HandleRun,
                                                        &RunGoesToWorker);
    PolledCall<pb::GetConfigRequest, pb::GetConfigResponse>::Await(
        *this, get_config, &KernTuneService::HandleGetConfig, &NeverToWorker);
  }
  for (int i = 0; i < options_.busy_poll_threads; ++i) {
    pollers_.emplace_back([this] { PollCalls(); });
  }
}

void KernTuneService::PollCalls() {
  const gpr_timespec immediately = gpr_time_0(GPR_CLOCK_MONOTONIC);  // poll, never wait
  absl::Time last_call = absl::Now();
  void* tag = nullptr;
  bool ok = false;
  while (true) {
    grpc::CompletionQueue::NextStatus next;
    if (absl::Now() - last_call < options_.busy_poll_idle) {
      next = poll_queue_->AsyncNext(&tag, &ok, immediately);
    } else {
      // Idle: block until the next call (which then pays one wake-up).
      next = poll_queue_->Next(&tag, &ok) ? grpc::CompletionQueue::GOT_EVENT
                                          : grpc::CompletionQueue::SHUTDOWN;
    }
    if (next == grpc::CompletionQueue::SHUTDOWN) return;
    if (next == grpc::CompletionQueue::TIMEOUT) continue;
    static_cast<PolledCallBase*>(tag)->Proceed(ok);
    last_call = absl::Now();
  }
}

void KernTuneService::PolledCallEnded() {
  absl::MutexLock lock(&polled_mu_);
  --polled_calls_;
}

void KernTuneService::StopBusyPolling() {
  if (poll_queue_ == nullptr) return;
  {
    // After the server's Shutdown every awaited call ends with ok=false and
    // every answered one once its reply is out; the threads deliver both.
    absl::MutexLock lock(&polled_mu_);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(polled_mu_) { return polled_calls_ == 0; };
    polled_mu_.Await(absl::Condition(&ended));
  }
  poll_queue_->Shutdown();
  for (std::thread& poller : pollers_) poller.join();
  pollers_.clear();
  // The queue itself stays until the service goes, after the server: the
  // server's destructor still unregisters from it.
}

}  // namespace kt::server
