// The soak client's report line (soak_counts.h).
#include "tests/soak/soak_counts.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kt::soak {

int64_t Counts::valid_runs() const {
  int64_t runs = 0;
  for (Counter path :
       {kInline, kShmGrpc, kShmQueue, kIpcGrpc, kIpcQueue, kOneOffGrpc, kOneOffQueue, kWrong}) {
    runs += value[path];
  }
  return runs;
}

Counts& Counts::operator+=(const Counts& other) {
  for (int i = 0; i < kCounterCount; ++i) value[i] += other.value[i];
  return *this;
}

std::string Counts::Line() const {
  std::string line = "stats";
  for (int i = 0; i < kCounterCount; ++i)
    absl::StrAppend(&line, " ", kCounterNames[i], "=", value[i]);
  return line;
}

std::optional<Counts> Counts::Parse(absl::string_view line) {
  if (!absl::ConsumePrefix(&line, "stats ")) return std::nullopt;
  const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
  if (fields.size() != kCounterCount) return std::nullopt;
  Counts counts;
  for (int i = 0; i < kCounterCount; ++i) {
    absl::string_view field = fields[i];
    if (!absl::ConsumePrefix(&field, kCounterNames[i]) || !absl::ConsumePrefix(&field, "=") ||
        !absl::SimpleAtoi(field, &counts.value[i])) {
      return std::nullopt;
    }
  }
  return counts;
}

}  // namespace kt::soak
