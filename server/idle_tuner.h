// The idle tuner (kerntuned --tune_idle): while a GPU has had no Runs for a
// while, it tunes the problem Runs were served untuned most often
// (served_shapes.h) with the sweep `kerntune tune` uses, into the store the
// daemon reads; the store's reload then serves the problem its exact tuned
// entry and drops it from the record, as after `kerntune tune --served`.
//
// Sharing the GPU with Runs: it starts only on a device idle for
// `idle_after`; after each measurement it asks whether a Run came to that
// device meanwhile, and if one did it waits until the device is idle again
// and takes the measurement again (tuner::SweepOptions::yield), so a Run
// waits at most for the measurement in flight (milliseconds) and no timing
// disturbed by Runs is stored. Its stream has the lowest priority, one
// level below every Run's (lane_pool.h), and its thread the lowest CPU
// priority. Its device memory is bounded by the backend it is given.
//
// One thread for all devices, taking turns: the daemon's extra memory and
// CPU stay one tuning's worth however many GPUs it serves, a problem of a
// busy GPU is tuned on an idle GPU of its SKU, and no two GPUs tune one
// problem. A node of idle GPUs tunes one problem at a time; it is
// background work, and the problems served untuned are few.
//
// Failures never touch serving: a problem whose tuning fails is logged
// (at most a line a minute) and left alone for a while; one that does not
// fit the memory bound is logged once and never tried again.
#ifndef KERNTUNE_SERVER_IDLE_TUNER_H_
#define KERNTUNE_SERVER_IDLE_TUNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "server/served_shapes.h"
#include "tuner/backend.h"

namespace kt::server {

class IdleTuner {
 public:
  // A device the daemon serves.
  struct Device {
    int ordinal = 0;  // its CUDA ordinal, as OpenBackend takes it
    db::GpuSku sku;
    const ServedShapes* served = nullptr;  // its config cache's record
  };
  // A device's Runs as counters: a change of `runs`, or any in flight,
  // means a Run came.
  struct Activity {
    int64_t runs = 0;       // answered since the start
    int64_t in_flight = 0;  // executing now
  };
  // The activity of devices[index]; called on the tuner's thread.
  using ActivityOf = std::function<Activity(size_t index)>;
  // A tuner backend on the CUDA device `ordinal`, for the calling thread
  // (kerntuned's: a low-priority, memory-bounded tuner::GpuBackend). Made
  // for each problem and released after it: nothing is held between.
  using OpenBackend =
      std::function<absl::StatusOr<std::unique_ptr<tuner::Backend>>(int ordinal)>;

  struct Options {
    // The tuning store the daemon reads; the tuner writes it.
    std::string db_path;
    // How long a device must have had no Run before tuning starts or
    // resumes on it: longer than the gaps inside a client's burst of Runs.
    absl::Duration idle_after = absl::Milliseconds(1500);
    // How often devices are looked at, idle or paused.
    absl::Duration poll_interval = absl::Milliseconds(50);
    // A problem whose tuning failed is tried again after this.
    absl::Duration retry_failed_after = absl::Minutes(10);
    // A tuned problem stays listed until the daemon reloads the store (a
    // few seconds); it is not looked at again before this.
    absl::Duration recheck_tuned_after = absl::Minutes(1);
    // At most one failure line per this; the others are counted in it.
    absl::Duration log_failures_every = absl::Minutes(1);
    // Recorded with each tuning run.
    std::string command_line = "kerntuned --tune_idle";
    std::string host;
  };

  // Opens the store read-write (creating it when missing) and records the
  // devices' SKUs in it, so a store the daemon cannot write is refused
  // here, at startup, naming the path. Starts nothing.
  static absl::StatusOr<std::unique_ptr<IdleTuner>> Create(std::vector<Device> devices,
                                                           ActivityOf activity,
                                                           OpenBackend open_backend,
                                                           Options options);
  ~IdleTuner();  // Stop()
  IdleTuner(const IdleTuner&) = delete;
  IdleTuner& operator=(const IdleTuner&) = delete;

  // Starts the tuner's thread; once.
  void Start();
  // Asks the thread to stop: it does within a measurement (milliseconds),
  // dropping the problem in flight. Does not wait.
  void RequestStop();
  // RequestStop, then waits for the thread; idempotent.
  void Stop();

  struct Status {
    // The problem being tuned and where: "softmax float16 64x1000 on GPU 0";
    // empty when none.
    std::string tuning;
    // Tuning waits for the device's Runs to stop.
    bool paused = false;
    int64_t problems_tuned = 0;
    // Problems whose tuning failed, or that did not fit in memory.
    int64_t problems_failed = 0;
  };
  Status status() const;

 private:
  IdleTuner(std::vector<Device> devices, ActivityOf activity, OpenBackend open_backend,
            Options options, std::unique_ptr<db::TuningStore> store);

  // The tuner's view of a device.
  struct Watch {
    Activity last;
    absl::Time active_at;  // when it was last seen with a Run
  };
  // A problem of a SKU (the index of its first device).
  using ProblemKey = std::pair<size_t, ServedKey>;
  struct Job {
    size_t device = 0;  // the idle device to tune on
    size_t sku = 0;     // index of the SKU's first device
    ServedKey key;
  };

  void Loop();
  // Reads devices[index]'s activity into its watch; true when a Run came
  // since the last look.
  bool Observe(size_t index, absl::Time now);
  bool Idle(size_t index, absl::Time now) const;
  // The most-run problem not left alone, of a SKU with an idle device.
  std::optional<Job> Pick(absl::Time now);
  void Tune(const Job& job);
  // SweepOptions::yield for devices[index].
  bool Yield(size_t index);
  // Sleeps `d` unless asked to stop; false when asked.
  bool Sleep(absl::Duration d);
  void SetStatus(std::string tuning, bool paused);
  // Logs a failure unless one was logged within log_failures_every.
  void LogFailure(const std::string& message);

  const std::vector<Device> devices_;
  const ActivityOf activity_;
  const OpenBackend open_backend_;
  const Options options_;
  // Used on the tuner's thread only (once started).
  const std::unique_ptr<db::TuningStore> store_;

  std::vector<Watch> watch_;  // the tuner's thread only
  absl::flat_hash_map<ProblemKey, absl::Time> left_alone_until_;  // idem
  absl::Time last_failure_log_ = absl::InfinitePast();              // idem
  int64_t failures_not_logged_ = 0;                                 // idem

  std::atomic<bool> stop_{false};
  absl::Notification stop_requested_;
  std::thread thread_;

  mutable absl::Mutex status_mu_;
  Status status_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_IDLE_TUNER_H_
