// Runs that return before their kernels end: the submission queues' data
// path. A RunStream is one in-order GPU stream of one device, owned by the
// queue poller that feeds it; Submit launches and returns, Poll answers the
// Runs the GPU has finished. No thread waits on the GPU per Run, so one
// poller keeps many Runs of many queues in flight and a long kernel holds
// nobody else (issue 23).
//
// Backends that cannot run a Run asynchronously (the CPU backend, test
// fakes) open no streams; their queued Runs execute as gRPC Runs do.
#ifndef KERNTUNE_SERVER_RUN_STREAM_H_
#define KERNTUNE_SERVER_RUN_STREAM_H_

#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "server/run_request.h"
#include "server/run_result.h"

namespace kt::server {

class Backend;

// The GPU priority of a stream. A queue's small Runs go on a high-priority
// stream of their device and its large ones on a normal one: the GPU then
// starts a small kernel's blocks before the waiting blocks of a large grid,
// so a client flooding the GPU with large Runs holds another client's small
// Run for one thread block, not a whole kernel (issue 25, fair sharing).
// Runs of one queue are therefore not ordered among themselves (nor are
// concurrent gRPC Runs): a client orders dependent Runs by waiting for the
// first's answer, or with wait_event/done_event.
enum class RunPriority { kNormal = 0, kHigh = 1 };

class RunStream {
 public:
  // Called once per Run with its result: from Submit for a Run refused or
  // answered at launch, else from the Poll that sees it finished.
  using Done = absl::AnyInvocable<void(absl::StatusOr<RunResult>)>;

  // Finishes what is in flight first (answering it).
  virtual ~RunStream() = default;

  // Launches a validated, resolved request routed to this stream's device.
  // `request` must stay alive until `done` has been called.
  virtual void Submit(const RunRequest& request, Done done) = 0;
  // Marks the end of the Runs submitted since the last Flush, so that Poll
  // can tell when they are done; one mark serves a whole batch.
  virtual void Flush() = 0;
  // Answers the Runs the device has finished; returns how many are still
  // in flight.
  virtual int Poll() = 0;
};

// Runs one queue may have in flight on its streams; a stream holds that
// many (timing events included) without waiting.
inline constexpr int kMaxQueueRunsInFlight = 64;

// The streams of one submission queue, one per device it has sent Runs to,
// opened on first use. Only the queue's poller touches them.
class QueueStreams {
 public:
  explicit QueueStreams(Backend& backend) : backend_(backend) {}
  // Answers everything in flight (the streams' destructors wait).
  ~QueueStreams() = default;
  QueueStreams(const QueueStreams&) = delete;
  QueueStreams& operator=(const QueueStreams&) = delete;

  // Submits on device `device_index`'s stream of `priority`. False, and
  // `done` not called, when the backend runs Runs synchronously only.
  bool Submit(int device_index, RunPriority priority, const RunRequest& request,
              RunStream::Done& done);
  // Flush() of every stream that got Runs since the last call.
  void Flush();
  // Poll() of every stream; returns the Runs still in flight.
  int Poll();
  // How many more Runs may be submitted before the next Poll.
  int room() const { return kMaxQueueRunsInFlight - in_flight_; }
  bool idle() const { return in_flight_ == 0; }
  int in_flight() const { return in_flight_; }

 private:
  struct Slot {
    bool opened = false;
    std::unique_ptr<RunStream> stream;  // null: the device has none
    bool unflushed = false;             // Runs since the last Flush
  };
  Backend& backend_;
  std::vector<Slot> slots_;  // by device index, then priority
  int in_flight_ = 0;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_RUN_STREAM_H_
