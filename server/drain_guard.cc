// The drain guard of the service (drain_guard.h).
#include "server/drain_guard.h"

namespace kt::server {

DrainGuard::Admission::~Admission() {
  if (guard_ == nullptr) return;
  absl::MutexLock lock(&guard_->mu_);
  --guard_->in_flight_;
}

DrainGuard::Admission DrainGuard::Admit() {
  absl::MutexLock lock(&mu_);
  if (draining_) return Admission(nullptr);
  ++in_flight_;
  return Admission(this);
}

bool DrainGuard::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

}  // namespace kt::server
