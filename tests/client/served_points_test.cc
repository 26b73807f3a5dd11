// What `kerntune tune --served` selects from a ListServedShapes answer:
// exactly the problems of one SKU, in the daemon's order, filtered by op and
// dtype, as grid points; a problem this build cannot read is an error; the
// --dry_run listing.
#include "client/served_points.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"

namespace kt::client {
namespace {

using ::testing::HasSubstr;
using kernels::DType;
using kernels::Op;

db::GpuSku Sku(const std::string& name) { return {name, 9, 0, 132, int64_t{80} << 30}; }

void Add(pb::ListServedShapesResponse& response, const db::GpuSku& sku, pb::Op op,
         pb::DType dtype, int64_t rows, int64_t cols, int64_t inner, int64_t runs) {
  pb::ServedShape* shape = response.add_shapes();
  *shape->mutable_sku() = proto::SkuToProto(sku);
  shape->set_op(op);
  shape->set_dtype(dtype);
  shape->mutable_shape()->set_rows(rows);
  shape->mutable_shape()->set_cols(cols);
  if (inner != 1) shape->mutable_shape()->set_inner(inner);
  shape->set_runs(runs);
  shape->set_first_seen_unix_ms(1714564800000);
  shape->set_last_seen_unix_ms(1714564860000);
  shape->set_source(pb::CONFIG_SOURCE_HEURISTIC);
}

const std::vector<Op> kOps(std::begin(kernels::kAllOps), std::end(kernels::kAllOps));
const std::vector<DType> kDTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

class ServedPointsTest : public ::testing::Test {
 protected:
  ServedPointsTest() {
    Add(served_, h100_, pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 4096, 1000, 1, 50);
    Add(served_, h200_, pb::OP_LAYER_NORM, pb::DTYPE_FLOAT32, 8, 768, 1, 40);
    Add(served_, h100_, pb::OP_LOG_SOFTMAX, pb::DTYPE_BFLOAT16, 2, 96, 4096, 30);
    Add(served_, h100_, pb::OP_SCALED_MASKED_SOFTMAX, pb::DTYPE_FLOAT16, 2048, 128, 1, 20);
    Add(served_, h100_, pb::OP_LAYER_NORM, pb::DTYPE_FLOAT32, 8, 768, 1, 10);
  }
  const db::GpuSku h100_ = Sku("NVIDIA H100 80GB HBM3");
  const db::GpuSku h200_ = Sku("NVIDIA H200");
  pb::ListServedShapesResponse served_;
};

TEST_F(ServedPointsTest, SkusAreListedOnceInTheDaemonsOrder) {
  EXPECT_THAT(ServedSkus(served_), ::testing::ElementsAre(h100_, h200_));
  EXPECT_TRUE(ServedSkus(pb::ListServedShapesResponse()).empty());
}

TEST_F(ServedPointsTest, ExactlyTheProblemsOfTheSkuBecomeGridPoints) {
  absl::StatusOr<std::vector<ServedPoint>> points = ServedPointsOf(served_, h100_, kOps, kDTypes);
  ASSERT_TRUE(points.ok()) << points.status();
  std::vector<std::string> names;
  for (const ServedPoint& p : *points) names.push_back(tuner::PointName(p.point));
  EXPECT_THAT(names, ::testing::ElementsAre("softmax float16 4096x1000",
                                            "log_softmax bfloat16 2x96x4096",
                                            "scaled_masked_softmax float16 2048x128",
                                            "layer_norm float32 8x768"));
  for (const ServedPoint& p : *points) EXPECT_EQ(p.point.group, "served");
  EXPECT_EQ((*points)[0].runs, 50);
  EXPECT_EQ((*points)[0].last_seen, absl::FromUnixMillis(1714564860000));
  EXPECT_EQ((*points)[0].source, pb::CONFIG_SOURCE_HEURISTIC);
  // The masked softmax is tuned as a custom grid tunes it: an additive mask
  // whose query length divides rows.
  const tuner::GridPoint& masked = (*points)[2].point;
  EXPECT_TRUE(masked.with_mask);
  EXPECT_EQ(masked.mask_rows, 128);
  EXPECT_EQ(GridOf(*points).size(), 4u);
  EXPECT_EQ(GridOf(*points)[1].shape, (kernels::Shape{2, 96, 4096}));

  points = ServedPointsOf(served_, h200_, kOps, kDTypes);
  ASSERT_TRUE(points.ok());
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ(tuner::PointName((*points)[0].point), "layer_norm float32 8x768");
  EXPECT_EQ((*points)[0].runs, 40);
  // A SKU differing in one field only is another SKU.
  db::GpuSku fewer_sms = h100_;
  fewer_sms.sm_count = 114;
  EXPECT_TRUE(ServedPointsOf(served_, fewer_sms, kOps, kDTypes)->empty());
}

TEST_F(ServedPointsTest, OpsAndDtypesFilter) {
  absl::StatusOr<std::vector<ServedPoint>> points =
      ServedPointsOf(served_, h100_, {Op::kSoftmax, Op::kLayerNorm}, {DType::kFloat32});
  ASSERT_TRUE(points.ok());
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ(tuner::PointName((*points)[0].point), "layer_norm float32 8x768");
}

TEST_F(ServedPointsTest, AProblemThisBuildCannotReadIsAnError) {
  Add(served_, h100_, static_cast<pb::Op>(99), pb::DTYPE_FLOAT16, 8, 8, 1, 1);
  absl::StatusOr<std::vector<ServedPoint>> points = ServedPointsOf(served_, h100_, kOps, kDTypes);
  ASSERT_FALSE(points.ok());
  EXPECT_THAT(points.status().message(), HasSubstr("op=99"));
  EXPECT_THAT(points.status().message(), HasSubstr("the kerntune of the daemon's version"));
}

TEST_F(ServedPointsTest, TheDryRunListsEveryPointWithItsRuns) {
  const std::string listed =
      FormatServedPoints(h100_, *ServedPointsOf(served_, h100_, kOps, kDTypes));
  EXPECT_THAT(listed, HasSubstr("NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs"));
  EXPECT_THAT(listed, HasSubstr("4 problems served untuned\n"));
  EXPECT_THAT(listed, HasSubstr("softmax float16 4096x1000"));
  EXPECT_THAT(listed, HasSubstr("50 runs, last 2024-05-01 12:01:00 UTC, served heuristic\n"));
  EXPECT_THAT(listed, HasSubstr("log_softmax bfloat16 2x96x4096"));
  EXPECT_EQ(std::count(listed.begin(), listed.end(), '\n'), 5);
}

}  // namespace
}  // namespace kt::client
