// The problems a tuning run (or the benchmark) covers: the standard grid of
// PERF.md, or rows x cols chosen on the command line.
#ifndef KERNTUNE_TUNER_GRID_H_
#define KERNTUNE_TUNER_GRID_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/types.h"

namespace kt::tuner {

struct GridPoint {
  std::string group;  // "main", "few_rows", "attention" or "custom"
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;
};

inline constexpr const char* kStandardGroups[] = {"main", "few_rows", "attention"};

// PERF.md's grid: "main" rows = 49152 x cols 32..32768; "few_rows" rows
// {1, 8, 64} x cols {4096, 32768, 131072}; "attention" (32*64*s, s) for s in
// {16, 32, 64, 128, 512}; for every op and dtype given. Unknown group names
// are an error.
absl::StatusOr<std::vector<GridPoint>> StandardGrid(const std::vector<std::string>& groups,
                                                    const std::vector<kernels::Op>& ops,
                                                    const std::vector<kernels::DType>& dtypes);

// Every (op, dtype, rows, cols) combination, group "custom".
absl::StatusOr<std::vector<GridPoint>> CustomGrid(const std::vector<kernels::Op>& ops,
                                                  const std::vector<kernels::DType>& dtypes,
                                                  const std::vector<int64_t>& rows,
                                                  const std::vector<int64_t>& cols);

// "ops=softmax,layer_norm dtypes=float16 points=22 groups=main": recorded
// with a tuning run.
std::string DescribeGrid(const std::vector<GridPoint>& points);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_GRID_H_
