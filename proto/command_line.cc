// VersionLine and the nearest-flag suggestion (command_line.h).
#include "proto/command_line.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/version.h"

namespace kt::proto {
namespace {

// proto/CMakeLists.txt passes the project's version.
#ifdef KT_PROJECT_VERSION
constexpr char kProjectVersion[] = KT_PROJECT_VERSION;
#else
constexpr char kProjectVersion[] = "unknown";
#endif

char Fold(char c) { return c == '-' ? '_' : c; }

// Levenshtein distance, one row at a time.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (Fold(a[i - 1]) == Fold(b[j - 1]) ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", kProjectVersion, " (kernels ",
                      kernels::kKernelLibraryVersion, ")");
}

std::string NearestName(absl::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(name, candidate);
    const size_t allowed = std::max<size_t>(1, std::max(name.size(), candidate.size()) / 3);
    if (distance > allowed) continue;
    if (best.empty() || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string UnknownFlagMessage(absl::string_view name,
                               const std::vector<std::string>& candidates) {
  const std::string nearest = NearestName(name, candidates);
  return absl::StrCat("unknown flag --", name,
                      nearest.empty() ? "" : absl::StrCat("; did you mean --", nearest, "?"));
}

}  // namespace kt::proto
