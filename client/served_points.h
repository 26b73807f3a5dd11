// What `kerntune tune --served` tunes: the problems a running kerntuned
// served without a tuned entry for exactly them (ListServedShapes), those
// of one GPU SKU, as tuning grid points; and how `--dry_run` lists them.
#ifndef KERNTUNE_CLIENT_SERVED_POINTS_H_
#define KERNTUNE_CLIENT_SERVED_POINTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "db/records.h"
#include "kernels/types.h"
#include "kerntune/v1/kerntune.pb.h"
#include "tuner/grid.h"

namespace kt::client {

namespace pb = ::kerntune::v1;

// One problem to tune, with what the daemon said of it.
struct ServedPoint {
  tuner::GridPoint point;  // group "served"
  int64_t runs = 0;
  absl::Time last_seen;
  pb::ConfigSource source = pb::CONFIG_SOURCE_UNSPECIFIED;
};

// The SKUs the daemon served problems untuned on, in its order, each once.
std::vector<db::GpuSku> ServedSkus(const pb::ListServedShapesResponse& served);

// The problems of `sku` whose op is in `ops` and dtype in `dtypes`, in the
// daemon's order (most Runs first), as the grid points a custom grid makes
// of them (a scaled_masked_softmax gets tuner::CustomGrid's mask). An error
// names a problem this kerntune cannot read (a newer daemon's op).
absl::StatusOr<std::vector<ServedPoint>> ServedPointsOf(
    const pb::ListServedShapesResponse& served, const db::GpuSku& sku,
    const std::vector<kernels::Op>& ops, const std::vector<kernels::DType>& dtypes);

// The grid of those points, to sweep.
std::vector<tuner::GridPoint> GridOf(const std::vector<ServedPoint>& points);

// `--dry_run`'s list: a heading naming the SKU, then a line per point:
// "  softmax float16 4096x1000  120 runs, last 2024-05-01 12:00:00 UTC,
// served heuristic".
std::string FormatServedPoints(const db::GpuSku& sku, const std::vector<ServedPoint>& points);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_SERVED_POINTS_H_
