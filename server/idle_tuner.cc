// The idle tuner (see idle_tuner.h).
#include "server/idle_tuner.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/types.h"
#include "server/log.h"
#include "tuner/grid.h"
#include "tuner/sweep.h"

namespace kt::server {
namespace {

// The tuner's thread gives its core to anything else that wants it: while
// it waits for its measurements it polls the GPU (the device's
// cudaDeviceScheduleYield), which must never hold up a Run's thread.
constexpr int kTunerNice = 19;

// The tuning grid of one served problem (a scaled-masked softmax gets
// CustomGrid's mask, as `kerntune tune --served` tunes it).
absl::StatusOr<tuner::GridPoint> PointOf(const ServedKey& key) {
  absl::StatusOr<std::vector<tuner::GridPoint>> grid =
      tuner::CustomGrid({key.op}, {key.dtype}, {key.shape.rows}, {key.shape.cols},
                        {key.shape.inner});
  if (!grid.ok()) return grid.status();
  if (grid->size() != 1) {
    return absl::InvalidArgumentError("the problem makes no single tuning point");
  }
  return grid->front();
}

}  // namespace

absl::StatusOr<std::unique_ptr<IdleTuner>> IdleTuner::Create(std::vector<Device> devices,
                                                             ActivityOf activity,
                                                             OpenBackend open_backend,
                                                             Options options) {
  if (devices.empty()) return absl::InvalidArgumentError("the idle tuner has no device");
  if (options.db_path.empty()) {
    return absl::InvalidArgumentError(
        "--tune_idle writes its results to the tuning store, and no --db is set");
  }
  db::OpenOptions open;
  open.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
      db::TuningStore::Open(options.db_path, open);
  // A write now: a file SQLite can only read opens without complaint.
  for (const Device& device : devices) {
    if (!store.ok()) break;
    if (absl::StatusOr<int64_t> gpu = (*store)->UpsertGpu(device.sku); !gpu.ok()) {
      store = gpu.status();
    }
  }
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("--tune_idle needs a tuning store kerntuned can write; ",
                                     options.db_path, ": ", store.status().message()));
  }
  return std::unique_ptr<IdleTuner>(new IdleTuner(std::move(devices), std::move(activity),
                                                  std::move(open_backend), std::move(options),
                                                  *std::move(store)));
}

IdleTuner::IdleTuner(std::vector<Device> devices, ActivityOf activity, OpenBackend open_backend,
                     Options options, std::unique_ptr<db::TuningStore> store)
    : devices_(std::move(devices)),
      activity_(std::move(activity)),
      open_backend_(std::move(open_backend)),
      options_(std::move(options)),
      store_(std::move(store)),
      watch_(devices_.size()) {}

IdleTuner::~IdleTuner() { Stop(); }

void IdleTuner::Start() {
  if (thread_.joinable() || stop_.load()) return;
  thread_ = std::thread([this] { Loop(); });
}

void IdleTuner::RequestStop() {
  if (stop_.exchange(true)) return;
  stop_requested_.Notify();
}

void IdleTuner::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

IdleTuner::Status IdleTuner::status() const {
  absl::MutexLock lock(&status_mu_);
  return status_;
}

void IdleTuner::SetStatus(std::string tuning, bool paused) {
  absl::MutexLock lock(&status_mu_);
  status_.tuning = std::move(tuning);
  status_.paused = paused;
}

bool IdleTuner::Sleep(absl::Duration d) {
  return !stop_requested_.WaitForNotificationWithTimeout(d);
}

bool IdleTuner::Observe(size_t index, absl::Time now) {
  const Activity activity = activity_(index);
  Watch& watch = watch_[index];
  const bool came = activity.in_flight > 0 || activity.runs != watch.last.runs;
  if (came) watch.active_at = now;
  watch.last = activity;
  return came;
}

bool IdleTuner::Idle(size_t index, absl::Time now) const {
  return now - watch_[index].active_at >= options_.idle_after;
}

std::optional<IdleTuner::Job> IdleTuner::Pick(absl::Time now) {
  absl::erase_if(left_alone_until_, [now](const auto& entry) { return entry.second <= now; });
  // Per SKU (its first device's index), its devices' records as one.
  std::vector<size_t> sku_of(devices_.size());
  for (size_t i = 0; i < devices_.size(); ++i) {
    sku_of[i] = i;
    for (size_t j = 0; j < i; ++j) {
      if (devices_[j].sku == devices_[i].sku) {
        sku_of[i] = j;
        break;
      }
    }
  }
  struct Candidate {
    int64_t runs;
    size_t sku;
    ServedKey key;
  };
  std::vector<Candidate> candidates;
  for (size_t sku = 0; sku < devices_.size(); ++sku) {
    if (sku_of[sku] != sku) continue;
    bool any_idle = false;
    std::vector<ServedShape> shapes;
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (sku_of[i] != sku) continue;
      any_idle = any_idle || Idle(i, now);
      for (ServedShape& shape : devices_[i].served->List()) shapes.push_back(std::move(shape));
    }
    if (!any_idle) continue;
    for (const ServedShape& shape : MergeServedShapes(std::move(shapes))) {
      auto alone = left_alone_until_.find(ProblemKey{sku, shape.key});
      if (alone != left_alone_until_.end() && alone->second > now) continue;
      candidates.push_back({shape.runs, sku, shape.key});
      break;  // the SKU's most-run one
    }
  }
  if (candidates.empty()) return std::nullopt;
  const Candidate& best = *std::max_element(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.runs < b.runs; });
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (sku_of[i] == best.sku && Idle(i, now)) return Job{i, best.sku, best.key};
  }
  return std::nullopt;  // unreachable: the SKU had an idle device
}

void IdleTuner::Loop() {
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kTunerNice);
  // No device counts as idle before it has been watched for idle_after.
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < devices_.size(); ++i) {
    watch_[i].last = activity_(i);
    watch_[i].active_at = start;
  }
  while (Sleep(options_.poll_interval)) {
    const absl::Time now = absl::Now();
    bool any_idle = false;
    for (size_t i = 0; i < devices_.size(); ++i) {
      Observe(i, now);
      any_idle = any_idle || Idle(i, now);
    }
    if (!any_idle) continue;  // the records are not even read
    if (std::optional<Job> job = Pick(now)) Tune(*job);
  }
}

bool IdleTuner::Yield(size_t index) {
  if (!Observe(index, absl::Now())) return false;
  {
    absl::MutexLock lock(&status_mu_);
    status_.paused = true;
  }
  // Until the device has been idle for idle_after again.
  while (Sleep(options_.poll_interval)) {
    const absl::Time now = absl::Now();
    Observe(index, now);
    if (Idle(index, now)) break;
  }
  absl::MutexLock lock(&status_mu_);
  status_.paused = false;
  return true;
}

void IdleTuner::Tune(const Job& job) {
  const Device& device = devices_[job.device];
  const ProblemKey problem{job.sku, job.key};
  const absl::Time started = absl::Now();
  absl::StatusOr<tuner::GridPoint> point = PointOf(job.key);
  const std::string where =
      absl::StrCat(point.ok() ? tuner::PointName(*point)
                              : absl::StrCat(kernels::OpName(job.key.op), " ",
                                             kernels::DTypeName(job.key.dtype)),
                   " on GPU ", device.ordinal);
  SetStatus(where, false);
  absl::Status failure = point.status();
  std::optional<tuner::PointOutcome> tuned;
  bool interrupted = false;
  if (failure.ok()) {
    absl::StatusOr<std::unique_ptr<tuner::Backend>> backend = open_backend_(device.ordinal);
    failure = backend.status();
    if (backend.ok()) {
      tuner::SweepOptions options;
      options.command_line = options_.command_line;
      options.host = options_.host;
      options.user = "kerntuned";
      options.stop = &stop_;
      options.yield = [this, &job] { return Yield(job.device); };
      absl::StatusOr<tuner::SweepSummary> summary =
          tuner::RunSweep(*store_, **backend, {*point}, options);
      failure = summary.status();
      if (summary.ok()) {
        interrupted = summary->interrupted;
        if (!interrupted && summary->points.size() == 1) tuned = summary->points.front();
      }
    }
  }
  SetStatus("", false);
  if (interrupted) return;  // stopping: the problem is dropped
  const absl::Time now = absl::Now();
  if (!failure.ok()) {
    absl::MutexLock lock(&status_mu_);
    ++status_.problems_failed;
  }
  if (absl::IsResourceExhausted(failure)) {
    // Bigger than the tuner's memory bound: it will not fit next time either.
    left_alone_until_[problem] = absl::InfiniteFuture();
    LogWarning(absl::StrCat("idle tuner: not tuning ", where, ", which does not fit in its "
                            "memory: ", failure.message(),
                            " (kerntune tune --served tunes it without the bound)"));
    return;
  }
  if (!failure.ok()) {
    left_alone_until_[problem] = now + options_.retry_failed_after;
    LogFailure(absl::StrCat("idle tuner: tuning ", where, " failed, trying it again in ",
                            absl::FormatDuration(options_.retry_failed_after), ": ",
                            failure.message()));
    return;
  }
  left_alone_until_[problem] = now + options_.recheck_tuned_after;
  if (!tuned.has_value() || tuned->already_complete) return;  // tuned before: the reload is due
  {
    absl::MutexLock lock(&status_mu_);
    ++status_.problems_tuned;
  }
  LogInfo(absl::StrFormat(
      "idle tuner: tuned %s in %.1f s: %s, %.2f us, speedup %.2fx over the heuristic; served "
      "once the store is reloaded",
      where, absl::ToDoubleSeconds(now - started), tuned->best_key, tuned->best_us,
      tuned->best_us > 0 && tuned->heuristic_us > 0 ? tuned->heuristic_us / tuned->best_us
                                                     : 0.0));
}

void IdleTuner::LogFailure(const std::string& message) {
  const absl::Time now = absl::Now();
  if (now - last_failure_log_ < options_.log_failures_every) {
    ++failures_not_logged_;
    return;
  }
  std::string line = message;
  if (failures_not_logged_ > 0) {
    absl::StrAppend(&line, " (and ", failures_not_logged_, " failures not logged before it)");
  }
  LogWarning(line);
  last_failure_log_ = now;
  failures_not_logged_ = 0;
}

}  // namespace kt::server
