// kerntuned on a real GPU (CTest label gpu): tuned dispatch from a temp
// store written for this GPU's SKU, and inline Runs of every op and dtype
// (the masked softmax with a mask, causal and both; softmax / log-softmax
// also along a middle axis) checked against the fp64 reference within the
// per-dtype tolerance.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "db/tuning_store.h"
#include "gtest/gtest.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "kernels/device_info.h"
#include "kernels/host_dtype.h"
#include "kernels/launch_config.h"
#include "kernels/reference.h"
#include "kernels/verify.h"
#include "kernels/version.h"
#include "proto/convert.h"
#include "tests/server/daemon_process.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tuner/backend.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::kt::server::testing::Connect;
using ::kt::server::testing::Daemon;
using ::kt::server::testing::KerntunedBinary;
using ::kt::server::testing::WaitUntilServing;

constexpr kernels::Shape kTunedShape{4096, 1024};

class KerntunedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(kernels::CudaDeviceCount(), 0) << "this test needs a GPU";
    auto device = kernels::GetDeviceInfo(0);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *device;
    // One tuned point for this GPU: a legal config other than the heuristic.
    auto configs = kernels::EnumerateConfigs(kernels::Op::kSoftmax, kernels::DType::kFloat16,
                                             kTunedShape, device_);
    auto heuristic = kernels::HeuristicConfig(kernels::Op::kSoftmax, kernels::DType::kFloat16,
                                              kTunedShape, device_);
    ASSERT_TRUE(configs.ok() && heuristic.ok());
    for (const auto& config : *configs) {
      if (config != *heuristic) tuned_ = config;
    }
    ASSERT_NE(tuned_, *heuristic);
    db::BestConfig row;
    row.point = {0, "softmax", "float16", kTunedShape.rows, kTunedShape.cols};
    row.config = tuner::ConfigRecordOf(tuned_);
    row.median_us = 10;
    row.gbps = 1000;
    row.heuristic_key = kernels::ConfigKey(*heuristic);
    row.env.kernel_version = kernels::kKernelLibraryVersion;
    db::OpenOptions options;
    options.create_if_missing = true;
    auto store = db::TuningStore::Open(db_, options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->ImportBestConfigs(tuner::SkuOf(device_), {row}).ok());

    // No shipped configs: the sources these tests expect are the store's.
    daemon_ = std::make_unique<Daemon>(
        KerntunedBinary(),
        std::vector<std::string>{"--socket=" + socket_, "--db=" + db_,
                                 "--configs=" + dir_.File("no_shipped_configs")},
        dir_.File("kerntuned.log"));
    const absl::Status serving =
        WaitUntilServing(*daemon_, socket_, std::chrono::seconds(30));
    ASSERT_TRUE(serving.ok()) << serving;
    stub_ = pb::KernTune::NewStub(Connect("unix:" + socket_));
  }

  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "kerntuned log:\n" << daemon_->Log();
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }

  kt::testing::ScopedTempDir dir_;
  const std::string socket_ = dir_.File("kerntune.sock");
  const std::string db_ = dir_.File("tuning.db");
  kernels::DeviceInfo device_;
  kernels::LaunchConfig tuned_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<pb::KernTune::Stub> stub_;
};

TEST_F(KerntunedGpuTest, StatusAndConfigsComeFromThisGpusSku) {
  pb::GetStatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(Context().get(), pb::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.backend(), "gpu");
  ASSERT_GE(status.devices_size(), 1);
  EXPECT_EQ(status.devices(0).sku().name(), device_.name);
  EXPECT_EQ(status.tuned_entries(), 1);
  EXPECT_GT(status.database_data_version(), 0);

  pb::ListConfigsResponse list;
  ASSERT_TRUE(stub_->ListConfigs(Context().get(), pb::ListConfigsRequest(), &list).ok());
  ASSERT_EQ(list.entries_size(), 1);
  EXPECT_EQ(list.entries(0).config().key(), kernels::ConfigKey(tuned_));

  pb::GetConfigRequest request;
  request.set_op(pb::OP_SOFTMAX);
  request.set_dtype(pb::DTYPE_FLOAT16);
  request.mutable_shape()->set_rows(kTunedShape.rows);
  request.mutable_shape()->set_cols(kTunedShape.cols);
  pb::GetConfigResponse config;
  ASSERT_TRUE(stub_->GetConfig(Context().get(), request, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_TUNED);
  EXPECT_EQ(config.config().config().key(), kernels::ConfigKey(tuned_));
  EXPECT_EQ(config.config().tuned_median_us(), 10);
  request.set_op(pb::OP_LAYER_NORM);
  ASSERT_TRUE(stub_->GetConfig(Context().get(), request, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_HEURISTIC);
  // The tuned point's rows and cols along a middle axis: another problem,
  // served by the axis heuristic.
  request.set_op(pb::OP_SOFTMAX);
  request.mutable_shape()->set_inner(48);
  ASSERT_TRUE(stub_->GetConfig(Context().get(), request, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_HEURISTIC);
  EXPECT_EQ(config.config().config().impl(), "axis");
}

// The query length of a masked problem of `rows`: the largest divisor <= 64.
int64_t QueryLength(int64_t rows) {
  for (int64_t q = std::min<int64_t>(rows, 64); q > 1; --q) {
    if (rows % q == 0) return q;
  }
  return 1;
}

// Per-row float outputs within the stats tolerance.
void ExpectStatsNear(const google::protobuf::RepeatedField<float>& got,
                     const std::vector<float>& want, const char* what) {
  const kernels::Tolerance stats = kernels::StatsTolerance();
  ASSERT_EQ(got.size(), static_cast<int>(want.size())) << what;
  for (size_t r = 0; r < want.size(); ++r) {
    EXPECT_LE(std::fabs(got[static_cast<int>(r)] - want[r]),
              stats.atol + stats.rtol * std::fabs(want[r]))
        << what << "[" << r << "]";
  }
}

TEST_F(KerntunedGpuTest, RunsEveryOpAndDtypeWithinTolerance) {
  std::mt19937_64 rng(4242);
  const kernels::Shape row_shapes[] = {{1, 1}, {33, 1000}, kTunedShape, {3, 5000}};
  // Seed 001's middle-axis shapes, for the ops that reduce one.
  const kernels::Shape axis_shapes[] = {{1, 128, 32768}, {512, 896, 48}, {7, 33, 5}};
  // The six basic ops; the LLM ops' operands (residual, quantization) are
  // not built here.
  for (kernels::Op op : kernels::kBasicOps) {
    std::vector<kernels::Shape> shapes(std::begin(row_shapes), std::end(row_shapes));
    if (kernels::SupportsInnerAxis(op)) {
      shapes.insert(shapes.end(), std::begin(axis_shapes), std::end(axis_shapes));
    }
    for (kernels::DType dtype : kernels::kAllDTypes) {
      for (const kernels::Shape& shape : shapes) {
        const bool masked = op == kernels::Op::kScaledMaskedSoftmax;
        // The masked softmax alternates: an additive mask, causal, both.
        const int variant = static_cast<int>((shape.rows + shape.cols) % 3);
        SCOPED_TRACE(std::string(kernels::OpName(op)) + " " +
                     std::string(kernels::DTypeName(dtype)) + " " +
                     std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + "x" +
                     std::to_string(shape.inner) +
                     (masked ? " variant " + std::to_string(variant) : std::string()));
        const size_t size = kernels::DTypeSize(dtype);
        auto random = [&](int64_t n, double mean) {
          std::normal_distribution<double> normal(mean, 2.0);
          std::string bytes(n * size, '\0');
          for (int64_t i = 0; i < n; ++i) kernels::StoreFromDouble(dtype, bytes.data(), i, normal(rng));
          return bytes;
        };
        pb::RunRequest request;
        request.set_op(proto::OpToProto(op));
        request.set_dtype(proto::DTypeToProto(dtype));
        request.mutable_shape()->set_rows(shape.rows);
        request.mutable_shape()->set_cols(shape.cols);
        if (shape.inner > 1) request.mutable_shape()->set_inner(shape.inner);
        request.mutable_input()->set_inline_data(
            random(shape.elements(), op == kernels::Op::kLayerNorm ? 3 : 0.5));
        // Every other shape asks for the kernel's time.
        request.set_time_kernel(shape.cols % 2 == 0);
        // The reference's operands, filled beside the request's.
        std::vector<float> want(shape.elements()), mean(shape.rows), inv_std(shape.rows),
            row_scale(shape.rows);
        kernels::RowOpArgs args;
        std::string mask;
        switch (op) {
          case kernels::Op::kLayerNorm: {
            auto* params = request.mutable_layer_norm();
            params->set_epsilon(1e-5);
            params->set_want_mean_inv_std(true);
            params->mutable_gamma()->set_inline_data(random(shape.cols, 1));
            params->mutable_beta()->set_inline_data(random(shape.cols, 0));
            args.gamma = params->gamma().inline_data().data();
            args.beta = params->beta().inline_data().data();
            args.mean = mean.data();
            args.inv_std = inv_std.data();
            args.params.epsilon = 1e-5;
            break;
          }
          case kernels::Op::kRmsNorm: {
            auto* params = request.mutable_rms_norm();
            params->set_epsilon(1e-6);
            params->set_want_inv_rms(true);
            params->mutable_weight()->set_inline_data(random(shape.cols, 1));
            args.gamma = params->weight().inline_data().data();
            args.inv_std = inv_std.data();
            args.params.epsilon = 1e-6;
            break;
          }
          case kernels::Op::kReduceScale:
            args.row_scale = row_scale.data();
            break;
          case kernels::Op::kScaledMaskedSoftmax: {
            auto* params = request.mutable_scaled_masked_softmax();
            const int64_t q = QueryLength(shape.rows);
            params->set_scale(1.0 / std::sqrt(static_cast<double>(shape.cols)));
            params->set_mask_rows(q);
            params->set_causal(variant != 0);
            if (variant != 1) {
              mask = random(q * shape.cols, 0);
              params->mutable_mask()->set_inline_data(mask);
            }
            args.params.scale = params->scale();
            args.mask = mask.empty() ? nullptr : mask.data();
            args.params.mask_rows = q;
            args.params.causal = params->causal();
            break;
          }
          case kernels::Op::kSoftmax:
          case kernels::Op::kLogSoftmax:
            break;
        }
        pb::RunResponse response;
        const grpc::Status status = stub_->Run(Context().get(), request, &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(response.backend(), "gpu");
        if (request.time_kernel()) {
          EXPECT_GT(response.kernel_time_us(), 0);
        } else {
          EXPECT_EQ(response.kernel_time_us(), 0);
        }
        EXPECT_EQ(response.config().source(),
                  op == kernels::Op::kSoftmax && dtype == kernels::DType::kFloat16 &&
                          shape == kTunedShape
                      ? pb::CONFIG_SOURCE_TUNED
                  : op == kernels::Op::kSoftmax && dtype == kernels::DType::kFloat16 &&
                          shape.inner == 1
                      ? response.config().source()  // nearest or heuristic, by legality
                      : pb::CONFIG_SOURCE_HEURISTIC);
        if (shape.inner > 1) {
          EXPECT_EQ(response.config().config().impl(), "axis");
        }

        // fp64 reference kept in float32, compared within the dtype's tolerance.
        args.x = request.input().inline_data().data();
        args.y = want.data();
        ASSERT_TRUE(kernels::RunReference(op, dtype, shape, args, 0, shape.rows,
                                          kernels::DType::kFloat32)
                        .ok());
        ASSERT_EQ(response.output_data().size(), shape.elements() * size);
        const kernels::Tolerance tolerance = kernels::OutputTolerance(op, dtype);
        int64_t bad = 0;
        for (int64_t i = 0; i < shape.elements(); ++i) {
          const double got = kernels::LoadAsDouble(dtype, response.output_data().data(), i);
          const bool both_nan = std::isnan(got) && std::isnan(want[i]);
          if (!both_nan &&
              !(std::fabs(got - want[i]) <= tolerance.atol + tolerance.rtol * std::fabs(want[i]))) {
            if (bad++ == 0) ADD_FAILURE() << "y[" << i << "] = " << got << ", want " << want[i];
          }
        }
        EXPECT_EQ(bad, 0);
        if (op == kernels::Op::kLayerNorm) ExpectStatsNear(response.mean(), mean, "mean");
        if (op == kernels::Op::kLayerNorm || op == kernels::Op::kRmsNorm) {
          ExpectStatsNear(response.inv_std(), inv_std, "inv_std");
        }
        if (op == kernels::Op::kReduceScale) {
          ExpectStatsNear(response.row_scale(), row_scale, "row_scale");
        } else {
          EXPECT_EQ(response.row_scale_size(), 0);
        }
      }
    }
  }
  // Still serving, then a clean stop.
  const std::optional<int> exit = daemon_->Signal(SIGTERM, std::chrono::seconds(10));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);
}

}  // namespace
}  // namespace kt::server
