// Tuning grids (grid.h).
#include "tuner/grid.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kt::tuner {
namespace {

template <typename T>
void AddUnique(std::vector<T>& values, const T& value) {
  if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
}

}  // namespace

absl::StatusOr<std::vector<GridPoint>> StandardGrid(const std::vector<std::string>& groups,
                                                    const std::vector<kernels::Op>& ops,
                                                    const std::vector<kernels::DType>& dtypes) {
  for (const std::string& g : groups) {
    if (std::find(std::begin(kStandardGroups), std::end(kStandardGroups), g) ==
        std::end(kStandardGroups)) {
      return absl::InvalidArgumentError(
          absl::StrCat("group=\"", g, "\" is not one of main, few_rows, attention"));
    }
  }
  const auto wants = [&](const char* g) {
    return std::find(groups.begin(), groups.end(), g) != groups.end();
  };
  std::vector<GridPoint> points;
  for (kernels::Op op : ops) {
    for (kernels::DType dtype : dtypes) {
      if (wants("main")) {
        for (int64_t cols : {32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}) {
          points.push_back({"main", op, dtype, {49152, cols}});
        }
      }
      if (wants("few_rows")) {
        for (int64_t rows : {1, 8, 64}) {
          for (int64_t cols : {4096, 32768, 131072}) {
            points.push_back({"few_rows", op, dtype, {rows, cols}});
          }
        }
      }
      if (wants("attention")) {
        for (int64_t s : {16, 32, 64, 128, 512}) {
          points.push_back({"attention", op, dtype, {32 * 64 * s, s}});
        }
      }
    }
  }
  return points;
}

absl::StatusOr<std::vector<GridPoint>> CustomGrid(const std::vector<kernels::Op>& ops,
                                                  const std::vector<kernels::DType>& dtypes,
                                                  const std::vector<int64_t>& rows,
                                                  const std::vector<int64_t>& cols) {
  for (int64_t r : rows) {
    if (r < 1) return absl::InvalidArgumentError(absl::StrCat("rows=", r, " must be >= 1"));
  }
  for (int64_t c : cols) {
    if (c < 1) return absl::InvalidArgumentError(absl::StrCat("cols=", c, " must be >= 1"));
  }
  std::vector<GridPoint> points;
  for (kernels::Op op : ops) {
    for (kernels::DType dtype : dtypes) {
      for (int64_t r : rows) {
        for (int64_t c : cols) points.push_back({"custom", op, dtype, {r, c}});
      }
    }
  }
  return points;
}

std::string DescribeGrid(const std::vector<GridPoint>& points) {
  std::vector<std::string> ops, dtypes, groups;
  for (const GridPoint& p : points) {
    AddUnique(ops, std::string(kernels::OpName(p.op)));
    AddUnique(dtypes, std::string(kernels::DTypeName(p.dtype)));
    AddUnique(groups, p.group);
  }
  return absl::StrCat("ops=", absl::StrJoin(ops, ","), " dtypes=", absl::StrJoin(dtypes, ","),
                      " groups=", absl::StrJoin(groups, ","), " points=", points.size());
}

}  // namespace kt::tuner
