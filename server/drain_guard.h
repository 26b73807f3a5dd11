// The calls in flight, counted so that shutdown can let them finish: each
// handler is admitted first, and once draining has begun new calls are
// refused (UNAVAILABLE).
#ifndef KERNTUNE_SERVER_DRAIN_GUARD_H_
#define KERNTUNE_SERVER_DRAIN_GUARD_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kt::server {

class DrainGuard {
 public:
  // One call's admission; the call counts as in flight while it lives.
  class Admission {
   public:
    Admission(const Admission&) = delete;
    Admission& operator=(const Admission&) = delete;
    ~Admission();
    // False once draining began: refuse the call.
    explicit operator bool() const { return guard_ != nullptr; }

   private:
    friend class DrainGuard;
    explicit Admission(DrainGuard* guard) : guard_(guard) {}
    DrainGuard* guard_;  // null when refused
  };

  Admission Admit();
  // Refuses new calls from now on and waits up to `timeout` for the calls
  // in flight to finish. True when none is left.
  bool Drain(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_DRAIN_GUARD_H_
