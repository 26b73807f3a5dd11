// The Runs the service has answered, for GetStatus.stats: a benchmark reads
// them before and after a series and takes the difference.
#ifndef KERNTUNE_SERVER_RUN_COUNTERS_H_
#define KERNTUNE_SERVER_RUN_COUNTERS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kt::server {

class RunCounters {
 public:
  struct Totals {
    int64_t runs = 0;
    // Of them, answered before the GPU finished (done_event).
    int64_t answered_early = 0;
    // Sum of their handlers' times.
    double handler_us = 0;
  };

  // One Run answered OK.
  void Count(double handler_us, bool answered_early) {
    absl::MutexLock lock(&mu_);
    ++totals_.runs;
    totals_.answered_early += answered_early ? 1 : 0;
    totals_.handler_us += handler_us;
  }
  Totals totals() const {
    absl::MutexLock lock(&mu_);
    return totals_;
  }

 private:
  mutable absl::Mutex mu_;
  Totals totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_RUN_COUNTERS_H_
