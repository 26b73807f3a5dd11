// The proto conversions: every enum value both ways, unknown values named by
// number, shapes checked field by field, launch configs and SKUs round trip.
#include "proto/convert.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"

namespace kt::proto {
namespace {

using ::testing::HasSubstr;

TEST(ConvertTest, EveryOpAndDTypeRoundTrips) {
  for (kernels::Op op : kernels::kAllOps) {
    const pb::Op wire = OpToProto(op);
    EXPECT_NE(wire, pb::OP_UNSPECIFIED) << kernels::OpName(op);
    EXPECT_EQ(OpFromProto(wire, "op").value(), op);
  }
  for (kernels::DType dtype : kernels::kAllDTypes) {
    const pb::DType wire = DTypeToProto(dtype);
    EXPECT_NE(wire, pb::DTYPE_UNSPECIFIED) << kernels::DTypeName(dtype);
    EXPECT_EQ(DTypeFromProto(wire, "dtype").value(), dtype);
  }
}

TEST(ConvertTest, EveryQuantDTypeAndScaleModeRoundTrips) {
  for (kernels::QuantDType dtype : kernels::kAllQuantDTypes) {
    const pb::QuantDType wire = QuantDTypeToProto(dtype);
    EXPECT_NE(wire, pb::QUANT_DTYPE_UNSPECIFIED) << kernels::QuantDTypeName(dtype);
    EXPECT_EQ(QuantDTypeFromProto(wire, "quant.dtype").value(), dtype);
  }
  for (kernels::ScaleMode mode :
       {kernels::ScaleMode::kStatic, kernels::ScaleMode::kPerRow, kernels::ScaleMode::kPerGroup}) {
    const pb::ScaleMode wire = ScaleModeToProto(mode);
    EXPECT_NE(wire, pb::SCALE_MODE_UNSPECIFIED) << kernels::ScaleModeName(mode);
    EXPECT_EQ(ScaleModeFromProto(wire, "quant.scale_mode").value(), mode);
  }
}

TEST(ConvertTest, QuantizationRoundTripsAndRefusesUnsetEnumsByField) {
  kernels::OpParams params;
  params.quant_dtype = kernels::QuantDType::kInt8;
  params.scale_mode = kernels::ScaleMode::kPerGroup;
  params.group_size = 128;
  params.scale_ub = 12.5;
  const pb::Quantization wire = QuantizationToProto(params);
  EXPECT_EQ(wire.dtype(), pb::QUANT_DTYPE_INT8);
  EXPECT_EQ(wire.scale_mode(), pb::SCALE_MODE_PER_GROUP);
  kernels::OpParams back;
  ASSERT_TRUE(QuantizationFromProto(wire, "rms_norm.quant", back).ok());
  EXPECT_EQ(back.quant_dtype, kernels::QuantDType::kInt8);
  EXPECT_EQ(back.scale_mode, kernels::ScaleMode::kPerGroup);
  EXPECT_EQ(back.group_size, 128);
  EXPECT_EQ(back.scale_ub, 12.5);

  pb::Quantization unset = wire;
  unset.clear_dtype();
  EXPECT_THAT(QuantizationFromProto(unset, "rms_norm.quant", back).message(),
              HasSubstr("rms_norm.quant.dtype=0 (QUANT_DTYPE_UNSPECIFIED) must be "
                        "QUANT_DTYPE_FP8_E4M3, QUANT_DTYPE_FP8_E5M2 or QUANT_DTYPE_INT8"));
  unset = wire;
  unset.set_scale_mode(static_cast<pb::ScaleMode>(7));
  EXPECT_THAT(QuantizationFromProto(unset, "layer_norm.quant", back).message(),
              HasSubstr("layer_norm.quant.scale_mode=7 (unknown) must be SCALE_MODE_STATIC"));
}

TEST(ConvertTest, RowStridesRoundTripFieldByField) {
  pb::RowStrides wire;
  wire.set_input(1);
  wire.set_output(2);
  wire.set_residual(3);
  wire.set_group_rows(4);
  wire.set_input_group(5);
  wire.set_output_group(6);
  kernels::OpParams params;
  RowStridesFromProto(wire, params);
  EXPECT_EQ(params.x_row_stride, 1);
  EXPECT_EQ(params.y_row_stride, 2);
  EXPECT_EQ(params.residual_row_stride, 3);
  EXPECT_EQ(params.group_rows, 4);
  EXPECT_EQ(params.x_group_stride, 5);
  EXPECT_EQ(params.y_group_stride, 6);
  EXPECT_EQ(RowStridesToProto(params).SerializeAsString(), wire.SerializeAsString());
}

TEST(ConvertTest, UnsetAndUnknownEnumsNameTheFieldAndTheNumber) {
  absl::StatusOr<kernels::Op> op = OpFromProto(pb::OP_UNSPECIFIED, "op");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(op.status().message(), HasSubstr("op=0 (OP_UNSPECIFIED) must be OP_SOFTMAX, "));
  EXPECT_THAT(op.status().message(),
              HasSubstr("OP_SCALED_MASKED_SOFTMAX, OP_ADD_RMS_NORM, OP_ADD_LAYER_NORM, "
                        "OP_RMS_NORM_QUANT, OP_LAYER_NORM_QUANT, OP_ADD_RMS_NORM_QUANT or "
                        "OP_ADD_LAYER_NORM_QUANT"));
  // A number a newer client might send has no name here.
  op = OpFromProto(static_cast<pb::Op>(42), "request.op");
  ASSERT_FALSE(op.ok());
  EXPECT_THAT(op.status().message(), HasSubstr("request.op=42 (unknown) must be"));
  absl::StatusOr<kernels::DType> dtype = DTypeFromProto(static_cast<pb::DType>(9), "dtype");
  ASSERT_FALSE(dtype.ok());
  EXPECT_THAT(dtype.status().message(),
              HasSubstr("dtype=9 (unknown) must be DTYPE_FLOAT32, DTYPE_FLOAT16 or "
                        "DTYPE_BFLOAT16"));
}

TEST(ConvertTest, ShapesAreCheckedFieldByField) {
  pb::Shape shape = ShapeToProto({8, 1024, 1});
  EXPECT_EQ(ShapeFromProto(shape, kernels::Op::kSoftmax, kernels::DType::kFloat16).value(),
            (kernels::Shape{8, 1024, 1}));
  shape.set_inner(0);  // unset: the last axis
  EXPECT_EQ(ShapeFromProto(shape, kernels::Op::kSoftmax, kernels::DType::kFloat16)->inner, 1);
  shape.set_inner(48);
  EXPECT_THAT(ShapeFromProto(shape, kernels::Op::kLayerNorm, kernels::DType::kFloat16)
                  .status()
                  .message(),
              HasSubstr("shape.inner=48: op=layer_norm reduces the last axis only"));
  shape.set_rows(0);
  EXPECT_THAT(
      ShapeFromProto(shape, kernels::Op::kSoftmax, kernels::DType::kFloat16).status().message(),
      HasSubstr("shape.rows=0 must be >= 1"));
  shape = ShapeToProto({int64_t{1} << 40, int64_t{1} << 30, 1});
  EXPECT_THAT(
      ShapeFromProto(shape, kernels::Op::kSoftmax, kernels::DType::kFloat32).status().message(),
      HasSubstr("overflows a 64-bit byte count"));
}

TEST(ConvertTest, LaunchConfigsRoundTripAndTheirFieldsMustAgreeWithTheKey) {
  const kernels::LaunchConfig config =
      *kernels::ParseLaunchConfig("split_row/b256/p8/g32/r1/w0/s8");
  pb::LaunchConfig wire = LaunchConfigToProto(config);
  EXPECT_EQ(wire.key(), "split_row/b256/p8/g32/r1/w0/s8");
  EXPECT_EQ(wire.impl(), "split_row");
  EXPECT_EQ(wire.split(), 8);
  EXPECT_EQ(LaunchConfigFromProto(wire).value(), config);

  wire.set_block_size(512);
  EXPECT_THAT(LaunchConfigFromProto(wire).status().message(),
              HasSubstr("config.block_size=512 disagrees with config.key="));
  wire = LaunchConfigToProto(config);
  wire.set_impl("warp");
  EXPECT_THAT(LaunchConfigFromProto(wire).status().message(),
              HasSubstr("config.impl=\"warp\" disagrees"));
  wire.clear_key();
  EXPECT_THAT(LaunchConfigFromProto(wire).status().message(), HasSubstr("config.key is missing"));
}

TEST(ConvertTest, ConfigSourcesRoundTripAndTheCpuReferenceIsNoLookup) {
  for (tuner::ConfigSource source :
       {tuner::ConfigSource::kTuned, tuner::ConfigSource::kShipped,
        tuner::ConfigSource::kNearestTuned, tuner::ConfigSource::kHeuristic}) {
    EXPECT_EQ(ConfigSourceFromProto(ConfigSourceToProto(source), "source").value(), source);
  }
  EXPECT_EQ(ConfigSourceToProto(tuner::ConfigSource::kShipped), pb::CONFIG_SOURCE_SHIPPED);
  EXPECT_THAT(ConfigSourceFromProto(pb::CONFIG_SOURCE_CPU_REFERENCE, "source").status().message(),
              HasSubstr("source=4 (CONFIG_SOURCE_CPU_REFERENCE) must be"));
}

TEST(ConvertTest, AChoiceCarriesItsEntrysPointTimeAndOrigin) {
  tuner::TunedEntry entry;
  entry.op = kernels::Op::kLayerNorm;
  entry.dtype = kernels::DType::kBFloat16;
  entry.shape = {4096, 1024, 1};
  entry.config = *kernels::ParseLaunchConfig("block_uncached/b512/p1/g32/r1/w0");
  entry.median_us = 12.5;
  entry.kernel_version = "0.1.0+k9";
  entry.origin = tuner::EntryOrigin::kShipped;
  const pb::ConfigChoice choice = ConfigChoiceToProto(
      tuner::ConfigChoice{entry.config, tuner::ConfigSource::kNearestTuned, entry});
  EXPECT_EQ(choice.source(), pb::CONFIG_SOURCE_NEAREST_TUNED);
  EXPECT_EQ(choice.config().key(), "block_uncached/b512/p1/g32/r1/w0");
  EXPECT_EQ(choice.tuned_shape().rows(), 4096);
  EXPECT_EQ(choice.tuned_median_us(), 12.5);
  EXPECT_EQ(choice.tuned_origin(), pb::CONFIG_SOURCE_SHIPPED);
  const pb::ConfigChoice heuristic =
      ConfigChoiceToProto(tuner::ConfigChoice{entry.config, tuner::ConfigSource::kHeuristic, {}});
  EXPECT_FALSE(heuristic.has_tuned_shape());

  const pb::TunedEntry listed = TunedEntryToProto(entry);
  EXPECT_EQ(listed.op(), pb::OP_LAYER_NORM);
  EXPECT_EQ(listed.dtype(), pb::DTYPE_BFLOAT16);
  EXPECT_EQ(listed.kernel_version(), "0.1.0+k9");
  EXPECT_EQ(listed.source(), pb::CONFIG_SOURCE_SHIPPED);

  // Back again, as the in-process runtime reads a daemon's ListConfigs.
  absl::StatusOr<tuner::TunedEntry> read = TunedEntryFromProto(listed);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->op, entry.op);
  EXPECT_EQ(read->dtype, entry.dtype);
  EXPECT_EQ(read->shape, entry.shape);
  EXPECT_EQ(read->config, entry.config);
  EXPECT_EQ(read->median_us, 12.5);
  EXPECT_EQ(read->kernel_version, "0.1.0+k9");
  EXPECT_EQ(read->origin, tuner::EntryOrigin::kShipped);
  pb::TunedEntry heuristic_source = listed;
  heuristic_source.set_source(pb::CONFIG_SOURCE_HEURISTIC);
  EXPECT_THAT(TunedEntryFromProto(heuristic_source).status().message(),
              HasSubstr("must be CONFIG_SOURCE_TUNED or CONFIG_SOURCE_SHIPPED"));
  pb::TunedEntry no_op = listed;
  no_op.set_op(pb::OP_UNSPECIFIED);
  EXPECT_FALSE(TunedEntryFromProto(no_op).ok());
}

TEST(ConvertTest, SkusRoundTrip) {
  const db::GpuSku sku{"NVIDIA H100 80GB HBM3", 9, 0, 132, 85520809984};
  EXPECT_EQ(SkuFromProto(SkuToProto(sku)), sku);
}

}  // namespace
}  // namespace kt::proto
