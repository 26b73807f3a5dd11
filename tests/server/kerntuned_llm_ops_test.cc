// The LLM inference row ops (issue 44) end to end through the real kerntuned
// on the CPU backend, over gRPC and over a submission queue: every add /
// quant norm x dtype x code type x scale mode against the fp64 reference
// (codes within one, scales, the residual written back), QK-norm in place
// on a strided, grouped view of a fused qkv tensor, and hostile requests
// refused with an error naming the field while the daemon keeps serving.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/run_queue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/host_dtype.h"
#include "kernels/reference.h"
#include "tests/server/kerntuned_fixture.h"
#include "tests/server/request_values.h"
#include "tests/server/shared_memory.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::kt::server::testing::RandomTensor;
using ::kt::server::testing::SharedMemory;
using ::kt::server::testing::ToKernels;
using ::testing::HasSubstr;

constexpr int64_t kArenaBytes = int64_t{1} << 20;

bool IsRms(pb::Op op) {
  return op == pb::OP_ADD_RMS_NORM || op == pb::OP_RMS_NORM_QUANT ||
         op == pb::OP_ADD_RMS_NORM_QUANT || op == pb::OP_RMS_NORM;
}

// Whether two codes are equal or neighbours: the GPU multiplies by 1 /
// scale, so a code may differ from the fp64 reference's at a rounding tie.
bool WithinOneCode(kernels::QuantDType dtype, uint8_t a, uint8_t b) {
  if (a == b) return true;
  if (dtype == kernels::QuantDType::kInt8) {
    return std::abs(static_cast<int>(static_cast<int8_t>(a)) - static_cast<int8_t>(b)) <= 1;
  }
  // fp8 codes are sign and magnitude; magnitudes order like their values.
  // +0 and -0 are neighbours of each other's neighbours: compare across 0
  // through the decoded values.
  if ((a & 0x80) == (b & 0x80)) return std::abs((a & 0x7f) - (b & 0x7f)) <= 1;
  return (a & 0x7f) + (b & 0x7f) <= 1;
}

// Where each tensor of a Run lives in the registered arena, in bytes.
struct Offsets {
  int64_t x = 0, residual = 8192, y = 16384, scales = 24576, scale = 32768, gamma = 40960,
          beta = 49152, residual_copy = 57344;
};

class KerntunedLlmOpsTest : public ::kt::server::testing::KerntunedFixture {
 protected:
  enum class Path { kGrpc, kQueue };

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start());
    pb::RegisterBufferRequest request;
    request.mutable_host_shm()->set_name(arena_.name());
    request.set_label("llm ops");
    pb::RegisterBufferResponse response;
    const grpc::Status status = Call(&pb::KernTune::Stub::RegisterBuffer, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    arena_id_ = response.buffer().buffer_id();
    absl::StatusOr<std::unique_ptr<client::RunQueueClient>> queue =
        client::RunQueueClient::Open(*stub_, socket_, absl::Seconds(10));
    ASSERT_TRUE(queue.ok()) << queue.status();
    queue_ = *std::move(queue);
  }

  template <typename Ref>
  void InArena(Ref* ref, int64_t offset) {
    ref->mutable_buffer()->set_buffer_id(arena_id_);
    ref->mutable_buffer()->set_offset_bytes(offset);
  }

  // The daemon's answer, by gRPC or through the queue, as a status.
  absl::StatusOr<pb::RunResponse> Run(Path path, const pb::RunRequest& request) {
    if (path == Path::kQueue) {
      client::RunQueueClient::Outcome outcome = queue_->Run(request, absl::Seconds(10));
      EXPECT_TRUE(outcome.submitted);
      return outcome.response;
    }
    pb::RunResponse response;
    const grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response;
  }

  SharedMemory arena_{kArenaBytes};
  std::string arena_id_;
  std::unique_ptr<client::RunQueueClient> queue_;
};

// One case of the sweep: an op, a dtype and, for the quantizing ops, the
// code type and scale mode.
struct Point {
  pb::Op op;
  pb::DType dtype;
  pb::QuantDType quant_dtype = pb::QUANT_DTYPE_UNSPECIFIED;
  pb::ScaleMode scale_mode = pb::SCALE_MODE_UNSPECIFIED;
  std::string Name() const {
    return absl::StrCat(pb::Op_Name(op), " ", pb::DType_Name(dtype), " ",
                        pb::QuantDType_Name(quant_dtype), " ", pb::ScaleMode_Name(scale_mode));
  }
};

TEST_F(KerntunedLlmOpsTest, EveryLlmOpMatchesTheReferenceOverGrpcAndTheQueue) {
  constexpr int64_t kRows = 4, kCols = 128, kGroup = 64;
  constexpr float kStaticScale = 0.0625f;
  std::vector<Point> points;
  for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
    for (pb::Op op : {pb::OP_ADD_RMS_NORM, pb::OP_ADD_LAYER_NORM}) points.push_back({op, dtype});
    for (pb::Op op : {pb::OP_RMS_NORM_QUANT, pb::OP_LAYER_NORM_QUANT, pb::OP_ADD_RMS_NORM_QUANT,
                      pb::OP_ADD_LAYER_NORM_QUANT}) {
      for (pb::QuantDType quant :
           {pb::QUANT_DTYPE_FP8_E4M3, pb::QUANT_DTYPE_FP8_E5M2, pb::QUANT_DTYPE_INT8}) {
        for (pb::ScaleMode mode :
             {pb::SCALE_MODE_STATIC, pb::SCALE_MODE_PER_ROW, pb::SCALE_MODE_PER_GROUP}) {
          points.push_back({op, dtype, quant, mode});
        }
      }
    }
  }
  std::mt19937_64 rng(20261207);
  const Offsets at;
  char* arena = arena_.data();
  int index = 0;
  for (const Point& point : points) {
    ++index;
    const kernels::Op op = ToKernels(point.op);
    const kernels::DType dtype = ToKernels(point.dtype);
    const bool quant = kernels::QuantizesOutput(op);
    const bool adds = kernels::AddsResidual(op);
    const bool rms = IsRms(point.op);
    const int64_t element = static_cast<int64_t>(kernels::DTypeSize(dtype));
    const int64_t tensor_bytes = kRows * kCols * element;
    const std::string x = RandomTensor(dtype, kRows * kCols, rng, 1.0);
    const std::string residual = RandomTensor(dtype, kRows * kCols, rng, 0.5);
    const std::string gamma = RandomTensor(dtype, kCols, rng, 1.0);
    const std::string beta = RandomTensor(dtype, kCols, rng, 0.0);
    // Gemma's offset on every other RMSNorm; a scale_ub on every other
    // dynamic quantization.
    const double weight_offset = rms && index % 2 == 0 ? 1.0 : 0.0;
    const double scale_ub = point.scale_mode != pb::SCALE_MODE_STATIC && index % 2 == 1 ? 2.5 : 0;

    // The expected result: the fp64 reference on private copies.
    kernels::RowOpArgs args;
    std::string want_residual = residual;
    std::string want_y(kRows * kCols * (quant ? 1 : element), '\0');
    const int64_t scales_per_row =
        point.scale_mode == pb::SCALE_MODE_PER_GROUP ? kCols / kGroup : 1;
    std::vector<float> want_scales(kRows * scales_per_row);
    args.x = x.data();
    args.y = want_y.data();
    args.gamma = gamma.data();
    if (!rms) args.beta = beta.data();
    if (adds) args.residual = want_residual.data();
    args.params.epsilon = 1e-5;
    args.params.weight_offset = weight_offset;
    if (quant) {
      args.params.quant_dtype = ToKernels(point.quant_dtype);
      args.params.scale_mode = ToKernels(point.scale_mode);
      args.params.group_size = point.scale_mode == pb::SCALE_MODE_PER_GROUP ? kGroup : 0;
      args.params.scale_ub = scale_ub;
      if (point.scale_mode == pb::SCALE_MODE_STATIC) {
        args.quant_scale = &kStaticScale;
      } else {
        args.row_scale = want_scales.data();
      }
    }
    ASSERT_TRUE(kernels::RunReference(op, dtype, {kRows, kCols, 1}, args, 0, kRows, dtype, 1).ok())
        << point.Name();

    for (Path path : {Path::kGrpc, Path::kQueue}) {
      SCOPED_TRACE(point.Name() + (path == Path::kGrpc ? " over gRPC" : " through the queue"));
      std::memcpy(arena + at.residual, residual.data(), residual.size());
      std::memset(arena + at.y, 0x5a, 4096);  // poison: unwritten bytes fail
      std::memset(arena + at.scales, 0x5a, 4096);
      std::memcpy(arena + at.x, x.data(), x.size());
      std::memcpy(arena + at.gamma, gamma.data(), gamma.size());
      std::memcpy(arena + at.beta, beta.data(), beta.size());
      std::memcpy(arena + at.scale, &kStaticScale, sizeof(kStaticScale));

      // gRPC sends what it may inline (x, the weights, the static scale)
      // and gets the codes and dynamic scales inline; the queue carries
      // client memory only.
      const bool inline_ok = path == Path::kGrpc;
      pb::RunRequest request;
      request.set_op(point.op);
      request.set_dtype(point.dtype);
      request.mutable_shape()->set_rows(kRows);
      request.mutable_shape()->set_cols(kCols);
      if (inline_ok) {
        request.mutable_input()->set_inline_data(x);
        request.mutable_output()->set_return_inline(true);
      } else {
        InArena(request.mutable_input(), at.x);
        InArena(request.mutable_output(), at.y);
      }
      pb::TensorRef* gamma_ref = rms ? request.mutable_rms_norm()->mutable_weight()
                                     : request.mutable_layer_norm()->mutable_gamma();
      pb::TensorRef* residual_ref = nullptr;
      pb::Quantization* quant_ref = nullptr;
      if (rms) {
        request.mutable_rms_norm()->set_epsilon(1e-5);
        request.mutable_rms_norm()->set_weight_offset(weight_offset);
        if (adds) residual_ref = request.mutable_rms_norm()->mutable_residual();
        if (quant) quant_ref = request.mutable_rms_norm()->mutable_quant();
      } else {
        request.mutable_layer_norm()->set_epsilon(1e-5);
        if (inline_ok) {
          request.mutable_layer_norm()->mutable_beta()->set_inline_data(beta);
        } else {
          InArena(request.mutable_layer_norm()->mutable_beta(), at.beta);
        }
        if (adds) residual_ref = request.mutable_layer_norm()->mutable_residual();
        if (quant) quant_ref = request.mutable_layer_norm()->mutable_quant();
      }
      if (inline_ok) {
        gamma_ref->set_inline_data(gamma);
      } else {
        InArena(gamma_ref, at.gamma);
      }
      if (residual_ref != nullptr) InArena(residual_ref, at.residual);
      if (quant_ref != nullptr) {
        quant_ref->set_dtype(point.quant_dtype);
        quant_ref->set_scale_mode(point.scale_mode);
        quant_ref->set_scale_ub(scale_ub);
        if (point.scale_mode == pb::SCALE_MODE_PER_GROUP) quant_ref->set_group_size(kGroup);
        if (point.scale_mode == pb::SCALE_MODE_STATIC) {
          if (inline_ok) {
            quant_ref->mutable_scale()->set_inline_data(
                std::string(reinterpret_cast<const char*>(&kStaticScale), sizeof(kStaticScale)));
          } else {
            InArena(quant_ref->mutable_scale(), at.scale);
          }
        } else if (!inline_ok) {
          InArena(quant_ref->mutable_scales(), at.scales);
        }
      }

      absl::StatusOr<pb::RunResponse> response = Run(path, request);
      ASSERT_TRUE(response.ok()) << response.status();
      EXPECT_EQ(response->backend(), "cpu");
      const std::string got_y =
          inline_ok ? response->output_data() : std::string(arena + at.y, want_y.size());
      ASSERT_EQ(got_y.size(), want_y.size());
      if (quant) {
        for (size_t i = 0; i < want_y.size(); ++i) {
          ASSERT_TRUE(WithinOneCode(args.params.quant_dtype, static_cast<uint8_t>(got_y[i]),
                                    static_cast<uint8_t>(want_y[i])))
              << "code " << i << ": " << +static_cast<uint8_t>(got_y[i]) << " against "
              << +static_cast<uint8_t>(want_y[i]);
        }
      } else {
        EXPECT_EQ(got_y, want_y);
      }
      if (quant && point.scale_mode != pb::SCALE_MODE_STATIC) {
        std::vector<float> got_scales(want_scales.size());
        if (inline_ok) {
          ASSERT_EQ(response->row_scale_size(), static_cast<int>(want_scales.size()));
          std::copy(response->row_scale().begin(), response->row_scale().end(), got_scales.begin());
        } else {
          EXPECT_EQ(response->row_scale_size(), 0);
          std::memcpy(got_scales.data(), arena + at.scales, got_scales.size() * sizeof(float));
        }
        for (size_t i = 0; i < want_scales.size(); ++i) {
          EXPECT_FLOAT_EQ(got_scales[i], want_scales[i]) << "scale " << i;
        }
      } else {
        EXPECT_EQ(response->row_scale_size(), 0);
        // A static quantization writes no scales.
        EXPECT_EQ(static_cast<uint8_t>(arena[at.scales]), 0x5a);
      }
      if (adds) {
        EXPECT_EQ(std::string(arena + at.residual, tensor_bytes), want_residual)
            << "the residual x + residual, written back";
      } else {
        EXPECT_EQ(std::string(arena + at.residual, tensor_bytes), residual);
      }
    }
  }
}

// QK-norm of a fused [tokens 3, 3 (q, k, v), heads 4, head_dim 64] bf16 qkv
// tensor: q over gRPC and k through the queue, each in place on its
// strided, grouped view; v and every byte outside q's and k's rows stay.
TEST_F(KerntunedLlmOpsTest, QkNormRunsInPlaceOnAStridedGroupedView) {
  constexpr int64_t kTokens = 3, kHeads = 4, kHeadDim = 64;
  constexpr int64_t kRows = kTokens * kHeads;
  constexpr int64_t kElements = kTokens * 3 * kHeads * kHeadDim;
  const kernels::DType dtype = kernels::DType::kBFloat16;
  std::mt19937_64 rng(44);
  const std::string qkv = RandomTensor(dtype, kElements, rng, 0.5);
  const std::string weight = RandomTensor(dtype, kHeadDim, rng, 1.0);
  char* arena = arena_.data();
  std::memcpy(arena, qkv.data(), qkv.size());
  const int64_t weight_at = 65536;
  std::memcpy(arena + weight_at, weight.data(), weight.size());

  // Expected: each head's row normalized alone, contiguous, by the
  // reference; everything else as it was.
  std::string want = qkv;
  const auto row_start = [&](int part, int64_t row) {
    return ((row / kHeads) * 3 * kHeads + part * kHeads + row % kHeads) * kHeadDim * 2;
  };
  for (int part : {0, 1}) {
    std::string rows(kRows * kHeadDim * 2, '\0');
    for (int64_t r = 0; r < kRows; ++r) {
      std::memcpy(rows.data() + r * kHeadDim * 2, qkv.data() + row_start(part, r), kHeadDim * 2);
    }
    std::string normalized(rows.size(), '\0');
    kernels::RowOpArgs args;
    args.x = rows.data();
    args.y = normalized.data();
    args.gamma = weight.data();
    args.params.epsilon = 1e-6;
    ASSERT_TRUE(kernels::RunReference(kernels::Op::kRmsNorm, dtype, {kRows, kHeadDim, 1}, args, 0,
                                      kRows, dtype, 1)
                    .ok());
    for (int64_t r = 0; r < kRows; ++r) {
      std::memcpy(want.data() + row_start(part, r), normalized.data() + r * kHeadDim * 2,
                  kHeadDim * 2);
    }
  }

  for (int part : {0, 1}) {
    const Path path = part == 0 ? Path::kGrpc : Path::kQueue;
    pb::RunRequest request;
    request.set_op(pb::OP_RMS_NORM);
    request.set_dtype(pb::DTYPE_BFLOAT16);
    request.mutable_shape()->set_rows(kRows);
    request.mutable_shape()->set_cols(kHeadDim);
    const int64_t first = part * kHeads * kHeadDim * 2;  // q's or k's first element
    InArena(request.mutable_input(), first);
    InArena(request.mutable_output(), first);
    request.mutable_rms_norm()->set_epsilon(1e-6);
    InArena(request.mutable_rms_norm()->mutable_weight(), weight_at);
    pb::RowStrides* strides = request.mutable_row_strides();
    strides->set_input(kHeadDim);
    strides->set_output(kHeadDim);
    strides->set_group_rows(kHeads);
    strides->set_input_group(3 * kHeads * kHeadDim);
    strides->set_output_group(3 * kHeads * kHeadDim);
    absl::StatusOr<pb::RunResponse> response = Run(path, request);
    ASSERT_TRUE(response.ok()) << response.status();
  }
  const std::string got(arena, qkv.size());
  for (int64_t i = 0; i < static_cast<int64_t>(qkv.size()); i += 2) {
    ASSERT_EQ(got.substr(i, 2), want.substr(i, 2))
        << "element " << i / 2 << " (token " << i / 2 / (3 * kHeads * kHeadDim) << ", part "
        << i / 2 / (kHeads * kHeadDim) % 3 << ")";
  }
}

TEST_F(KerntunedLlmOpsTest, HostileRequestsAreRefusedByFieldAndTheDaemonKeepsServing) {
  const Offsets at;
  char* arena = arena_.data();
  // add_rms_norm_quant float32 8 x 64 with a static scale in host memory.
  const auto base = [&] {
    pb::RunRequest request;
    request.set_op(pb::OP_ADD_RMS_NORM_QUANT);
    request.set_dtype(pb::DTYPE_FLOAT32);
    request.mutable_shape()->set_rows(8);
    request.mutable_shape()->set_cols(64);
    InArena(request.mutable_input(), at.x);
    InArena(request.mutable_output(), at.y);
    pb::RmsNormParams* params = request.mutable_rms_norm();
    params->set_epsilon(1e-6);
    InArena(params->mutable_residual(), at.residual);
    params->mutable_quant()->set_dtype(pb::QUANT_DTYPE_FP8_E4M3);
    params->mutable_quant()->set_scale_mode(pb::SCALE_MODE_STATIC);
    InArena(params->mutable_quant()->mutable_scale(), at.scale);
    return request;
  };
  const float one = 1.0f;
  std::memcpy(arena + at.scale, &one, sizeof(one));
  struct Case {
    std::string name;
    pb::RunRequest request;
    float scale = 1.0f;
    std::string message;
  };
  std::vector<Case> cases;
  const auto add = [&](std::string name, std::string message, auto edit, float scale = 1.0f) {
    pb::RunRequest request = base();
    edit(request);
    cases.push_back({std::move(name), std::move(request), scale, std::move(message)});
  };
  add("stride below cols", "row_strides.input=32 must be >= shape.cols=64",
      [](pb::RunRequest& r) { r.mutable_row_strides()->set_input(32); });
  add("overflowing stride", "puts the input's last row past a 64-bit byte offset",
      [](pb::RunRequest& r) { r.mutable_row_strides()->set_input(int64_t{1} << 62); });
  add("overflowing output stride", "puts the output's last row past a 64-bit byte offset",
      [](pb::RunRequest& r) {
        r.mutable_row_strides()->set_output(std::numeric_limits<int64_t>::max() / 4);
      });
  add("groups on a fused norm", "grouped rows (per-head views, QK-norm) are for rms_norm",
      [](pb::RunRequest& r) { r.mutable_row_strides()->set_group_rows(2); });
  add("residual overlapping the output", "output overlaps rms_norm.residual",
      [&](pb::RunRequest& r) { InArena(r.mutable_rms_norm()->mutable_residual(), at.y + 256); });
  add(
      "zero static scale in host memory", "rms_norm.quant.scale=0 must be finite and > 0",
      [](pb::RunRequest&) {}, 0.0f);
  add(
      "NaN static scale in host memory", "rms_norm.quant.scale=nan must be finite and > 0",
      [](pb::RunRequest&) {}, std::nanf(""));
  add("quant on a non-quant op", "rms_norm.quant is set but op=add_rms_norm writes no codes",
      [](pb::RunRequest& r) { r.set_op(pb::OP_ADD_RMS_NORM); });
  add("missing residual", "rms_norm.residual is not set: op=add_rms_norm_quant adds a residual",
      [](pb::RunRequest& r) { r.mutable_rms_norm()->clear_residual(); });
  add("group_size 96", "rms_norm.quant.group_size=96 must be 64 or 128", [](pb::RunRequest& r) {
    r.mutable_shape()->set_cols(192);
    pb::Quantization* quant = r.mutable_rms_norm()->mutable_quant();
    quant->clear_scale();
    quant->set_scale_mode(pb::SCALE_MODE_PER_GROUP);
    quant->set_group_size(96);
  });
  add("inline residual", "the residual is read and written back: pass it as a buffer or cuda_ipc",
      [](pb::RunRequest& r) {
        // A few bytes: the form is refused before the size, and the
        // request still fits a queue descriptor.
        r.mutable_rms_norm()->mutable_residual()->set_inline_data(std::string(16, '\0'));
      });
  add("codes in place", "cannot run in place",
      [&](pb::RunRequest& r) { InArena(r.mutable_output(), at.x); });

  for (Path path : {Path::kGrpc, Path::kQueue}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name + (path == Path::kGrpc ? " over gRPC" : " through the queue"));
      std::memcpy(arena + at.scale, &c.scale, sizeof(c.scale));
      absl::StatusOr<pb::RunResponse> response = Run(path, c.request);
      ASSERT_FALSE(response.ok());
      EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(response.status().message()), HasSubstr(c.message));
    }
    // Still serving, by the same path.
    std::memcpy(arena + at.scale, &one, sizeof(one));
    absl::StatusOr<pb::RunResponse> fine = Run(path, base());
    EXPECT_TRUE(fine.ok()) << fine.status();
  }
  EXPECT_TRUE(daemon_->running());
}

}  // namespace
}  // namespace kt::server
