// Name <-> enum conversions of the stored status strings, and derived values
// of the records.
#include "db/records.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kt::db {
namespace {

constexpr struct {
  RunStatus status;
  absl::string_view name;
} kRunStatusNames[] = {
    {RunStatus::kRunning, "running"},
    {RunStatus::kFinished, "finished"},
    {RunStatus::kInterrupted, "interrupted"},
};

constexpr struct {
  CandidateStatus status;
  absl::string_view name;
} kCandidateStatusNames[] = {
    {CandidateStatus::kMeasured, "measured"},
    {CandidateStatus::kSkippedOccupancy, "skipped_occupancy"},
    {CandidateStatus::kFailedCheck, "failed_check"},
    {CandidateStatus::kPruned, "pruned"},
    {CandidateStatus::kLaunchError, "launch_error"},
};

}  // namespace

absl::string_view RunStatusName(RunStatus status) {
  for (const auto& entry : kRunStatusNames) {
    if (entry.status == status) return entry.name;
  }
  return "unknown";
}

absl::StatusOr<RunStatus> ParseRunStatus(absl::string_view name) {
  for (const auto& entry : kRunStatusNames) {
    if (entry.name == name) return entry.status;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "run status \"", name, "\" must be running, finished or interrupted"));
}

absl::string_view CandidateStatusName(CandidateStatus status) {
  for (const auto& entry : kCandidateStatusNames) {
    if (entry.status == status) return entry.name;
  }
  return "unknown";
}

absl::StatusOr<CandidateStatus> ParseCandidateStatus(absl::string_view name) {
  for (const auto& entry : kCandidateStatusNames) {
    if (entry.name == name) return entry.status;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "candidate status \"", name,
      "\" must be measured, skipped_occupancy, failed_check, pruned or "
      "launch_error"));
}

std::string DescribePoint(absl::string_view op, absl::string_view dtype, int64_t rows,
                          int64_t cols, int64_t inner) {
  std::string point = absl::StrCat(op, " ", dtype, " ", rows, "x", cols);
  if (inner > 1) absl::StrAppend(&point, "x", inner);
  return point;
}

std::optional<double> BestConfig::Speedup() const {
  if (!heuristic_us.has_value() || median_us <= 0) return std::nullopt;
  return *heuristic_us / median_us;
}

}  // namespace kt::db
