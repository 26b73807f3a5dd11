// Tensor references: stage 1 checks their form, stage 2 (ResolveTensorRefs)
// their memory: bounds, alignment, overlaps and events.
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/run_request.h"
#include "tests/server/fake_memory.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using kernels::Operand;
using ::kt::server::testing::FakeMemory;
using ::testing::HasSubstr;

class FakeResolver final : public TensorResolver {
 public:
  std::map<std::string, std::shared_ptr<const ClientMemory>> buffers;
  std::shared_ptr<const ClientMemory> device = FakeMemory::Make(1 << 16, MemorySpace::kDevice);

  absl::StatusOr<Opened> RegisteredBuffer(const std::string& id) override {
    auto it = buffers.find(id);
    if (it == buffers.end()) return absl::NotFoundError("buffer_id \"" + id + "\" unknown");
    return Opened{it->second, it->second->size()};
  }
  absl::StatusOr<Opened> CudaIpcAllocation(const std::string& handle, int device_ordinal) override {
    return Opened{device, device->size()};
  }
};

constexpr int64_t kLimit = 1 << 20;

// softmax float32 4 x 32 (512 bytes) from buffer "in" to buffer "out".
pb::RunRequest BufferRun(int64_t in_offset = 0, int64_t out_offset = 0,
                         const std::string& out_id = "out") {
  pb::RunRequest request;
  request.set_op(pb::OP_SOFTMAX);
  request.set_dtype(pb::DTYPE_FLOAT32);
  request.mutable_shape()->set_rows(4);
  request.mutable_shape()->set_cols(32);
  request.mutable_input()->mutable_buffer()->set_buffer_id("in");
  request.mutable_input()->mutable_buffer()->set_offset_bytes(in_offset);
  request.mutable_output()->mutable_buffer()->set_buffer_id(out_id);
  request.mutable_output()->mutable_buffer()->set_offset_bytes(out_offset);
  return request;
}

class ResolveRefsTest : public ::testing::Test {
 protected:
  ResolveRefsTest() {
    resolver_.buffers["in"] = FakeMemory::Make(1024);
    resolver_.buffers["out"] = FakeMemory::Make(1024);
  }
  absl::StatusOr<RunRequest> Both(const pb::RunRequest& request) {
    absl::StatusOr<RunRequest> run = ValidateRunRequest(request, kLimit);
    if (!run.ok()) return run.status();
    if (absl::Status s = ResolveTensorRefs(request, resolver_, *run); !s.ok()) return s;
    return run;
  }
  FakeResolver resolver_;
};

TEST_F(ResolveRefsTest, BufferSlicesPointIntoTheirMemory) {
  absl::StatusOr<RunRequest> run = Both(BufferRun(512, 256));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kInput).where, TensorView::Where::kClientHost);
  EXPECT_EQ(run->tensor(Operand::kInput).data, resolver_.buffers["in"]->base() + 512);
  EXPECT_EQ(run->tensor(Operand::kOutput).data, resolver_.buffers["out"]->base() + 256);
  EXPECT_EQ(run->memory.size(), 2u);
}

TEST_F(ResolveRefsTest, TheLastByteMayBeTheAllocationsLastByteButNoFurther) {
  EXPECT_TRUE(Both(BufferRun(512)).ok());
  absl::StatusOr<RunRequest> past = Both(BufferRun(516));
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(past.status().message()),
              HasSubstr("input: offset_bytes=516 + 512 bytes is past the end"));
  EXPECT_EQ(Both(BufferRun(0, int64_t{1} << 62)).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(ResolveRefsTest, OffsetsMustBeAlignedAndNonNegative) {
  EXPECT_THAT(std::string(Both(BufferRun(2)).status().message()),
              HasSubstr("input.buffer.offset_bytes=2 must be >= 0 and a multiple of 4"));
  EXPECT_EQ(Both(BufferRun(0, -4)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ResolveRefsTest, UnknownBuffersAreNotFoundNamingTheField) {
  absl::StatusOr<RunRequest> run = Both(BufferRun(0, 0, "nope"));
  EXPECT_EQ(run.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(run.status().message()), HasSubstr("output: buffer_id \"nope\""));
}

TEST_F(ResolveRefsTest, InPlaceIsAllowedPartialOverlapIsNot) {
  EXPECT_TRUE(Both(BufferRun(0, 0, "in")).ok());
  absl::StatusOr<RunRequest> shifted = Both(BufferRun(0, 128, "in"));
  EXPECT_EQ(shifted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shifted.status().message()), HasSubstr("output overlaps input"));
  EXPECT_TRUE(Both(BufferRun(0, 512, "in")).ok());  // adjacent, no overlap
}

// Issue 43: the same shared memory registered twice is two mappings at two
// addresses; an output through one overlapped the input through the other
// unseen, and the Run changed 32,725 bytes of the caller's input.
TEST_F(ResolveRefsTest, OverlapsAreFoundThroughTwoMappingsOfOneObject) {
  const MemoryObject file{MemorySpace::kHost, 42, 7};
  resolver_.buffers["in"] = FakeMemory::MakeFile(1024, file);
  resolver_.buffers["alias"] = FakeMemory::MakeFile(1024, file);
  resolver_.buffers["other"] = FakeMemory::MakeFile(1024, MemoryObject{MemorySpace::kHost, 42, 8});
  ASSERT_NE(resolver_.buffers["in"]->base(), resolver_.buffers["alias"]->base());

  absl::StatusOr<RunRequest> shifted = Both(BufferRun(0, 128, "alias"));
  EXPECT_EQ(shifted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shifted.status().message()), HasSubstr("output overlaps input"));
  EXPECT_EQ(Both(BufferRun(256, 0, "alias")).status().code(),
            absl::StatusCode::kInvalidArgument);
  // In place through the alias is in place; adjacent is no overlap; another
  // file (another inode) is other memory, whatever the offsets.
  EXPECT_TRUE(Both(BufferRun(0, 0, "alias")).ok());
  EXPECT_TRUE(Both(BufferRun(0, 512, "alias")).ok());
  EXPECT_TRUE(Both(BufferRun(0, 128, "other")).ok());
}

TEST_F(ResolveRefsTest, LayerNormStatisticsGoToMemoryAndMustNotOverlap) {
  pb::RunRequest request = BufferRun();
  request.set_op(pb::OP_LAYER_NORM);
  pb::LayerNormParams& params = *request.mutable_layer_norm();
  params.set_epsilon(1e-5);
  params.mutable_gamma()->mutable_buffer()->set_buffer_id("in");
  params.mutable_gamma()->mutable_buffer()->set_offset_bytes(512);  // read-only: may share
  params.mutable_mean()->mutable_buffer()->set_buffer_id("out");
  params.mutable_mean()->mutable_buffer()->set_offset_bytes(512);
  params.mutable_inv_std()->mutable_buffer()->set_buffer_id("out");
  params.mutable_inv_std()->mutable_buffer()->set_offset_bytes(528);
  absl::StatusOr<RunRequest> run = Both(request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->tensor(Operand::kMean).present());
  EXPECT_EQ(run->tensor(Operand::kMean).bytes, 16);

  params.mutable_inv_std()->mutable_buffer()->set_offset_bytes(520);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("layer_norm.mean overlaps layer_norm.inv_std"));
  params.mutable_inv_std()->mutable_buffer()->set_offset_bytes(508);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("output overlaps layer_norm.inv_std"));

  params.clear_inv_std();
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("layer_norm.mean and layer_norm.inv_std go together"));
  params.mutable_inv_std()->mutable_buffer()->set_buffer_id("out");
  params.mutable_inv_std()->mutable_buffer()->set_offset_bytes(528);
  params.set_want_mean_inv_std(true);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("cannot be combined"));
}

TEST_F(ResolveRefsTest, RmsNormWeightAndInvRmsResolveUnderTheirOwnNames) {
  pb::RunRequest request = BufferRun();
  request.set_op(pb::OP_RMS_NORM);
  pb::RmsNormParams& params = *request.mutable_rms_norm();
  params.set_epsilon(1e-6);
  params.mutable_weight()->mutable_buffer()->set_buffer_id("in");
  params.mutable_weight()->mutable_buffer()->set_offset_bytes(512);
  params.mutable_inv_rms()->mutable_buffer()->set_buffer_id("out");
  params.mutable_inv_rms()->mutable_buffer()->set_offset_bytes(512);
  absl::StatusOr<RunRequest> run = Both(request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kGamma).data, resolver_.buffers["in"]->base() + 512);
  EXPECT_EQ(run->tensor(Operand::kGamma).bytes, 32 * 4);
  EXPECT_EQ(run->tensor(Operand::kInvStd).data, resolver_.buffers["out"]->base() + 512);
  EXPECT_EQ(run->tensor(Operand::kInvStd).bytes, 4 * 4);
  EXPECT_FALSE(run->tensor(Operand::kMean).present());

  params.mutable_inv_rms()->mutable_buffer()->set_offset_bytes(500);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("output overlaps rms_norm.inv_rms"));
  params.mutable_inv_rms()->mutable_buffer()->set_buffer_id("in");
  params.mutable_inv_rms()->mutable_buffer()->set_offset_bytes(520);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("rms_norm.inv_rms overlaps rms_norm.weight"));
  params.mutable_weight()->mutable_buffer()->set_offset_bytes(900);
  absl::StatusOr<RunRequest> past = Both(request);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(past.status().message()),
              HasSubstr("rms_norm.weight: offset_bytes=900 + 128 bytes is past the end"));
}

TEST_F(ResolveRefsTest, RowScaleAndMaskResolveAndAreBoundsChecked) {
  pb::RunRequest scale = BufferRun();
  scale.set_op(pb::OP_REDUCE_SCALE);
  auto* row_scale = scale.mutable_reduce_scale()->mutable_row_scale()->mutable_buffer();
  row_scale->set_buffer_id("out");
  row_scale->set_offset_bytes(1008);  // 4 rows: 16 bytes, the last 16 of "out"
  absl::StatusOr<RunRequest> run = Both(scale);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kRowScale).where, TensorView::Where::kClientHost);
  EXPECT_EQ(run->tensor(Operand::kRowScale).data, resolver_.buffers["out"]->base() + 1008);
  row_scale->set_offset_bytes(1012);
  EXPECT_EQ(Both(scale).status().code(), absl::StatusCode::kOutOfRange);
  row_scale->set_offset_bytes(256);
  EXPECT_THAT(std::string(Both(scale).status().message()),
              HasSubstr("output overlaps reduce_scale.row_scale"));
  row_scale->set_buffer_id("gone");
  EXPECT_THAT(std::string(Both(scale).status().message()),
              HasSubstr("reduce_scale.row_scale: buffer_id \"gone\""));

  // (batch 1, heads 2, q 2, k 32): a (2, 32) float32 mask of 256 bytes.
  pb::RunRequest masked = BufferRun();
  masked.set_op(pb::OP_SCALED_MASKED_SOFTMAX);
  auto* params = masked.mutable_scaled_masked_softmax();
  params->set_mask_rows(2);
  params->mutable_mask()->mutable_buffer()->set_buffer_id("in");
  params->mutable_mask()->mutable_buffer()->set_offset_bytes(768);
  run = Both(masked);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kMask).data, resolver_.buffers["in"]->base() + 768);
  EXPECT_EQ(run->tensor(Operand::kMask).bytes, 256);
  params->mutable_mask()->mutable_buffer()->set_offset_bytes(772);
  EXPECT_THAT(std::string(Both(masked).status().message()),
              HasSubstr("scaled_masked_softmax.mask: offset_bytes=772 + 256 bytes is past"));
  // The mask is an input: the output may not overlap it.
  params->mutable_mask()->mutable_buffer()->set_buffer_id("out");
  params->mutable_mask()->mutable_buffer()->set_offset_bytes(256);
  EXPECT_THAT(std::string(Both(masked).status().message()),
              HasSubstr("output overlaps scaled_masked_softmax.mask"));
}

// add_rms_norm float32 4 x 32: input in "in", output in "out", the
// residual in "res" (512 bytes each).
pb::RunRequest AddRmsNormRun() {
  pb::RunRequest request = BufferRun();
  request.set_op(pb::OP_ADD_RMS_NORM);
  request.mutable_rms_norm()->set_epsilon(1e-6);
  request.mutable_rms_norm()->mutable_residual()->mutable_buffer()->set_buffer_id("res");
  return request;
}

TEST_F(ResolveRefsTest, TheResidualIsClientMemoryOverlappingNothing) {
  resolver_.buffers["res"] = FakeMemory::Make(1024);
  pb::RunRequest request = AddRmsNormRun();
  absl::StatusOr<RunRequest> run = Both(request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kResidual).where, TensorView::Where::kClientHost);
  EXPECT_EQ(run->tensor(Operand::kResidual).data, resolver_.buffers["res"]->base());
  EXPECT_EQ(run->tensor(Operand::kResidual).bytes, 512);

  pb::BufferSlice* residual = request.mutable_rms_norm()->mutable_residual()->mutable_buffer();
  residual->set_offset_bytes(516);
  EXPECT_EQ(Both(request).status().code(), absl::StatusCode::kOutOfRange);
  // Not on the output, not on the input, not even exactly.
  residual->set_offset_bytes(0);
  residual->set_buffer_id("out");
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("output overlaps rms_norm.residual"));
  residual->set_buffer_id("in");
  residual->set_offset_bytes(256);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("rms_norm.residual overlaps input"));
  residual->set_offset_bytes(512);  // adjacent to the input
  EXPECT_TRUE(Both(request).ok());
  // In place is still the output on the input.
  residual->set_buffer_id("res");
  residual->set_offset_bytes(0);
  request.mutable_output()->mutable_buffer()->set_buffer_id("in");
  EXPECT_TRUE(Both(request).ok());
}

TEST_F(ResolveRefsTest, QuantizedCodesNeverRunInPlace) {
  pb::RunRequest request = BufferRun(0, 0, "in");
  request.set_op(pb::OP_RMS_NORM_QUANT);
  request.mutable_rms_norm()->set_epsilon(1e-6);
  pb::Quantization* quant = request.mutable_rms_norm()->mutable_quant();
  quant->set_dtype(pb::QUANT_DTYPE_FP8_E5M2);
  quant->set_scale_mode(pb::SCALE_MODE_PER_ROW);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("op=rms_norm_quant writes one-byte codes and cannot run in place"));
  // Codes (128 bytes) and scales (16 bytes) in "out", side by side.
  request.mutable_output()->mutable_buffer()->set_buffer_id("out");
  quant->mutable_scales()->mutable_buffer()->set_buffer_id("out");
  quant->mutable_scales()->mutable_buffer()->set_offset_bytes(128);
  absl::StatusOr<RunRequest> run = Both(request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kOutput).bytes, 128);
  EXPECT_EQ(run->tensor(Operand::kRowScale).data, resolver_.buffers["out"]->base() + 128);
  quant->mutable_scales()->mutable_buffer()->set_offset_bytes(124);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("output overlaps rms_norm.quant.scales"));
}

TEST_F(ResolveRefsTest, AStaticScaleInHostMemoryMustBeFiniteAndPositive) {
  pb::RunRequest request = BufferRun();
  request.set_op(pb::OP_LAYER_NORM_QUANT);
  request.mutable_layer_norm()->set_epsilon(1e-5);
  pb::Quantization* quant = request.mutable_layer_norm()->mutable_quant();
  quant->set_dtype(pb::QUANT_DTYPE_INT8);
  quant->set_scale_mode(pb::SCALE_MODE_STATIC);
  quant->mutable_scale()->mutable_buffer()->set_buffer_id("in");
  quant->mutable_scale()->mutable_buffer()->set_offset_bytes(1020);
  char* scale = resolver_.buffers["in"]->base() + 1020;
  const auto put = [scale](float value) { std::memcpy(scale, &value, sizeof(value)); };
  put(0.5f);
  absl::StatusOr<RunRequest> run = Both(request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kQuantScale).data, scale);
  EXPECT_EQ(run->tensor(Operand::kQuantScale).bytes, 4);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    put(bad);
    absl::StatusOr<RunRequest> refused = Both(request);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(
        std::string(refused.status().message()),
        HasSubstr("layer_norm.quant.scale=" + absl::StrCat(bad) + " must be finite and > 0"));
  }
  // The scale is an input: the codes must not overlap it.
  put(0.5f);
  request.mutable_output()->mutable_buffer()->set_buffer_id("in");
  request.mutable_output()->mutable_buffer()->set_offset_bytes(896);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("output overlaps layer_norm.quant.scale"));
  // One in device memory is not read (the caller's contract).
  request.mutable_output()->mutable_buffer()->set_buffer_id("out");
  request.mutable_output()->mutable_buffer()->set_offset_bytes(0);
  quant->mutable_scale()->mutable_cuda_ipc()->set_handle(std::string(64, 'h'));
  EXPECT_TRUE(Both(request).ok());
}

// QK-norm of q, in place, in a fused [tokens 2, 3, heads 2, head_dim 32]
// float32 qkv tensor (1536 bytes).
pb::RunRequest QkNormRun() {
  pb::RunRequest request;
  request.set_op(pb::OP_RMS_NORM);
  request.set_dtype(pb::DTYPE_FLOAT32);
  request.mutable_shape()->set_rows(4);
  request.mutable_shape()->set_cols(32);
  request.mutable_rms_norm()->set_epsilon(1e-6);
  request.mutable_input()->mutable_buffer()->set_buffer_id("qkv");
  request.mutable_output()->mutable_buffer()->set_buffer_id("qkv");
  pb::RowStrides* strides = request.mutable_row_strides();
  strides->set_input(32);
  strides->set_output(32);
  strides->set_group_rows(2);
  strides->set_input_group(3 * 2 * 32);
  strides->set_output_group(3 * 2 * 32);
  return request;
}

TEST_F(ResolveRefsTest, StridedViewsAreCheckedOnTheirExtents) {
  resolver_.buffers["qkv"] = FakeMemory::Make(1536);
  pb::RunRequest request = QkNormRun();
  absl::StatusOr<RunRequest> run = Both(request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kInput).bytes, (192 + 32 + 32) * 4);
  // k's view (offset 256 bytes) in place is fine; past the end is not.
  request.mutable_input()->mutable_buffer()->set_offset_bytes(1024);
  request.mutable_output()->mutable_buffer()->set_offset_bytes(1024);
  EXPECT_EQ(Both(request).status().code(), absl::StatusCode::kOutOfRange);
  request.mutable_input()->mutable_buffer()->set_offset_bytes(256);
  request.mutable_output()->mutable_buffer()->set_offset_bytes(256);
  EXPECT_TRUE(Both(request).ok());

  // In place with other strides is refused.
  request.mutable_row_strides()->set_output_group(3 * 2 * 32 + 32);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("output is on input (in place) but their rows are laid out differently"));
  // A strided output into q's rows and an input in k's rows interleave
  // but their extents overlap: refused, conservatively.
  request = QkNormRun();
  request.mutable_input()->mutable_buffer()->set_offset_bytes(256);
  EXPECT_THAT(std::string(Both(request).status().message()), HasSubstr("output overlaps input"));
  // inv_rms inside a gap of the output's rows: refused too.
  request = QkNormRun();
  request.mutable_rms_norm()->mutable_inv_rms()->mutable_buffer()->set_buffer_id("qkv");
  request.mutable_rms_norm()->mutable_inv_rms()->mutable_buffer()->set_offset_bytes(512);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("output overlaps rms_norm.inv_rms"));
  request.mutable_rms_norm()->mutable_inv_rms()->mutable_buffer()->set_offset_bytes(1520);
  EXPECT_TRUE(Both(request).ok());
}

TEST_F(ResolveRefsTest, EventsNeedADeviceTensorAndTheRightSize) {
  pb::RunRequest request = BufferRun();
  request.set_wait_event(std::string(64, 'e'));
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("they need the input or the output in device memory"));
  request.mutable_input()->mutable_cuda_ipc()->set_handle(std::string(64, 'h'));
  absl::StatusOr<RunRequest> run = Both(request);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tensor(Operand::kInput).where, TensorView::Where::kDevice);
  request.set_done_event("short");
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("done_event has 5 bytes, want exactly 64"));
}

TEST_F(ResolveRefsTest, IpcHandlesMustBeSixtyFourBytes) {
  pb::RunRequest request = BufferRun();
  request.mutable_input()->mutable_cuda_ipc()->set_handle(std::string(63, 'h'));
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("input.cuda_ipc.handle has 63 bytes, want exactly 64"));
  request.mutable_input()->mutable_cuda_ipc()->set_handle(std::string(64, 'h'));
  request.mutable_input()->mutable_cuda_ipc()->set_device_ordinal(-1);
  EXPECT_THAT(std::string(Both(request).status().message()),
              HasSubstr("device_ordinal=-1 must be >= 0"));
}

TEST_F(ResolveRefsTest, TheInlineLimitDoesNotApplyToMemoryReferences) {
  pb::RunRequest request = BufferRun();
  request.mutable_shape()->set_rows(1 << 20);  // 128 MiB per tensor, over kLimit
  resolver_.buffers["in"] = FakeMemory::Make(int64_t{128} << 20);
  resolver_.buffers["out"] = FakeMemory::Make(int64_t{128} << 20);
  EXPECT_TRUE(Both(request).ok());
  request.mutable_output()->set_return_inline(true);  // now it travels
  EXPECT_EQ(Both(request).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace kt::server
