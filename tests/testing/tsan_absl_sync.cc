// ThreadSanitizer builds only (-DKT_SANITIZE=thread): tells TSan what
// Abseil's Mutex, CondVar and Notification do. Debian's libabsl is not built
// with TSan, so its annotations are compiled out and every access guarded
// by an absl::Mutex would read as a race. Each function here takes the
// place of the library's (the test programs export it, so the library's own
// calls and gRPC's land here too), calls the library's with dlsym(RTLD_NEXT)
// and adds the happens-before edge: unlock releases, lock acquires.
// Deadlock detection, which TSan would also do for an annotated mutex, is
// not covered; Abseil's own is turned off (below).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/config.h"
#include "absl/base/macros.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

// The library's definition of `name`: "Mutex4LockEv" stands for
// absl::<inline namespace>::Mutex::Lock().
template <typename Function>
Function Real(const char* name, bool is_const = false) {
  const std::string ns = ABSL_INTERNAL_TOKEN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string mangled = std::string(is_const ? "_ZNK4absl" : "_ZN4absl") +
                              std::to_string(ns.size()) + ns + name;
  void* real = dlsym(RTLD_NEXT, mangled.c_str());
  if (real == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: no %s in Abseil\n", mangled.c_str());
    std::abort();
  }
  return reinterpret_cast<Function>(real);
}

// Abseil's deadlock detector keeps its lock graph under an internal spin
// lock TSan cannot see either: every Mutex that gRPC or the tests lock
// would race in it.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

// Each REAL(...) resolves once per function (a static local).
#define KT_REAL(type, name, ...) \
  static const auto real = Real<type>(name, ##__VA_ARGS__)

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  KT_REAL(void (*)(Mutex*), "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  KT_REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
bool Mutex::TryLock() {
  KT_REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  KT_REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::Unlock() {
  KT_REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  KT_REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

// The When forms return holding the lock, whatever the condition.
void Mutex::LockWhen(const Condition& cond) {
  KT_REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  KT_REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
          "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  KT_REAL(bool (*)(Mutex*, const Condition&, absl::Time),
          "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

// Await lets the lock go while it waits and takes it back.
void Mutex::Await(const Condition& cond) {
  KT_REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  KT_REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
          "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  KT_REAL(bool (*)(Mutex*, const Condition&, absl::Time),
          "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  KT_REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  KT_REAL(bool (*)(CondVar*, Mutex*, absl::Duration),
          "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  KT_REAL(bool (*)(CondVar*, Mutex*, absl::Time),
          "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  KT_REAL(void (*)(Notification*), "12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}
void Notification::WaitForNotification() const {
  KT_REAL(void (*)(const Notification*), "12Notification19WaitForNotificationEv", true);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}
bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  KT_REAL(bool (*)(const Notification*, absl::Duration),
          "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  KT_REAL(bool (*)(const Notification*, absl::Time),
          "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", true);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
