// The points `kerntune tune --served` tunes (served_points.h).
#include "client/served_points.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli_common.h"
#include "client/daemon_cli_common.h"
#include "proto/convert.h"

namespace kt::client {
namespace {

template <typename T>
bool Contains(const std::vector<T>& values, const T& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

}  // namespace

std::vector<db::GpuSku> ServedSkus(const pb::ListServedShapesResponse& served) {
  std::vector<db::GpuSku> skus;
  for (const pb::ServedShape& shape : served.shapes()) {
    const db::GpuSku sku = proto::SkuFromProto(shape.sku());
    if (!Contains(skus, sku)) skus.push_back(sku);
  }
  return skus;
}

absl::StatusOr<std::vector<ServedPoint>> ServedPointsOf(
    const pb::ListServedShapesResponse& served, const db::GpuSku& sku,
    const std::vector<kernels::Op>& ops, const std::vector<kernels::DType>& dtypes) {
  std::vector<ServedPoint> points;
  for (const pb::ServedShape& shape : served.shapes()) {
    if (!(proto::SkuFromProto(shape.sku()) == sku)) continue;
    absl::StatusOr<kernels::Op> op = proto::OpFromProto(shape.op(), "op");
    absl::StatusOr<kernels::DType> dtype = proto::DTypeFromProto(shape.dtype(), "dtype");
    absl::StatusOr<kernels::Shape> extent =
        op.ok() && dtype.ok() ? proto::ShapeFromProto(shape.shape(), *op, *dtype)
                              : absl::StatusOr<kernels::Shape>(absl::InvalidArgumentError(""));
    for (const absl::Status& s : {op.status(), dtype.status(), extent.status()}) {
      if (!s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the daemon served a problem this kerntune cannot read (", s.message(),
            "): use the kerntune of the daemon's version"));
      }
    }
    if (!Contains(ops, *op) || !Contains(dtypes, *dtype)) continue;
    // The custom grid's point for it: the mask a scaled_masked_softmax is
    // tuned with is CustomGrid's (the store's key has none).
    absl::StatusOr<std::vector<tuner::GridPoint>> grid = tuner::CustomGrid(
        {*op}, {*dtype}, {extent->rows}, {extent->cols}, {extent->inner});
    if (!grid.ok()) return grid.status();
    if (grid->size() != 1) {
      return absl::InternalError(absl::StrCat("the served problem ", kernels::OpName(*op),
                                              " makes ", grid->size(), " grid points"));
    }
    ServedPoint point;
    point.point = std::move(grid->front());
    point.point.group = "served";
    point.runs = shape.runs();
    point.last_seen = absl::FromUnixMillis(shape.last_seen_unix_ms());
    point.source = shape.source();
    points.push_back(std::move(point));
  }
  return points;
}

std::vector<tuner::GridPoint> GridOf(const std::vector<ServedPoint>& points) {
  std::vector<tuner::GridPoint> grid;
  grid.reserve(points.size());
  for (const ServedPoint& p : points) grid.push_back(p.point);
  return grid;
}

std::string FormatServedPoints(const db::GpuSku& sku, const std::vector<ServedPoint>& points) {
  std::string out = absl::StrCat(SkuDescription(sku), ": ", points.size(),
                                 points.size() == 1 ? " problem" : " problems",
                                 " served untuned\n");
  for (const ServedPoint& p : points) {
    absl::StrAppend(&out, absl::StrFormat("  %-36s %8d %s, last %s, served %s\n",
                                          tuner::PointName(p.point), p.runs,
                                          p.runs == 1 ? "run " : "runs",
                                          FormatUnixTime(absl::ToUnixSeconds(p.last_seen)),
                                          ConfigSourceName(p.source)));
  }
  return out;
}

}  // namespace kt::client
