// kerntuned on a real GPU (CTest label gpu): tuned dispatch from a temp
// store written for this GPU's SKU, and inline Runs of every op and dtype
// checked against the fp64 reference within the per-dtype tolerance.
#include <signal.h>
#include <sys/wait.h>

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

    daemon_ = std::make_unique<Daemon>(
        KerntunedBinary(), std::vector<std::string>{"--socket=" + socket_, "--db=" + db_},
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
}

TEST_F(KerntunedGpuTest, RunsEveryOpAndDtypeWithinTolerance) {
  std::mt19937_64 rng(4242);
  const kernels::Shape shapes[] = {{1, 1}, {33, 1000}, kTunedShape, {3, 5000}};
  for (kernels::Op op : kernels::kAllOps) {
    for (kernels::DType dtype : kernels::kAllDTypes) {
      for (const kernels::Shape& shape : shapes) {
        SCOPED_TRACE(std::string(kernels::OpName(op)) + " " +
                     std::string(kernels::DTypeName(dtype)) + " " +
                     std::to_string(shape.rows) + "x" + std::to_string(shape.cols));
        const bool layer_norm = op == kernels::Op::kLayerNorm;
        const size_t size = kernels::DTypeSize(dtype);
        auto random = [&](int64_t n, double mean) {
          std::normal_distribution<double> normal(mean, 2.0);
          std::string bytes(n * size, '\0');
          for (int64_t i = 0; i < n; ++i) kernels::StoreFromDouble(dtype, bytes.data(), i, normal(rng));
          return bytes;
        };
        pb::RunRequest request;
        request.set_op(layer_norm ? pb::OP_LAYER_NORM
                                  : op == kernels::Op::kSoftmax ? pb::OP_SOFTMAX
                                                                : pb::OP_LOG_SOFTMAX);
        request.set_dtype(dtype == kernels::DType::kFloat32   ? pb::DTYPE_FLOAT32
                          : dtype == kernels::DType::kFloat16 ? pb::DTYPE_FLOAT16
                                                              : pb::DTYPE_BFLOAT16);
        request.mutable_shape()->set_rows(shape.rows);
        request.mutable_shape()->set_cols(shape.cols);
        request.mutable_input()->set_inline_data(random(shape.elements(), layer_norm ? 3 : 0.5));
        if (layer_norm) {
          request.mutable_layer_norm()->set_epsilon(1e-5);
          request.mutable_layer_norm()->set_want_mean_inv_std(true);
          request.mutable_layer_norm()->mutable_gamma()->set_inline_data(random(shape.cols, 1));
          request.mutable_layer_norm()->mutable_beta()->set_inline_data(random(shape.cols, 0));
        }
        pb::RunResponse response;
        const grpc::Status status = stub_->Run(Context().get(), request, &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(response.backend(), "gpu");
        EXPECT_GT(response.kernel_time_us(), 0);
        EXPECT_EQ(response.config().source(),
                  op == kernels::Op::kSoftmax && dtype == kernels::DType::kFloat16 &&
                          shape.rows == kTunedShape.rows && shape.cols == kTunedShape.cols
                      ? pb::CONFIG_SOURCE_TUNED
                  : op == kernels::Op::kSoftmax && dtype == kernels::DType::kFloat16
                      ? response.config().source()  // nearest or heuristic, by legality
                      : pb::CONFIG_SOURCE_HEURISTIC);

        // fp64 reference kept in float32, compared within the dtype's tolerance.
        std::vector<float> want(shape.elements()), mean(shape.rows), inv_std(shape.rows);
        kernels::HostRowOpArgs args;
        args.x = request.input().inline_data().data();
        args.y = want.data();
        if (layer_norm) {
          args.gamma = request.layer_norm().gamma().inline_data().data();
          args.beta = request.layer_norm().beta().inline_data().data();
          args.mean = mean.data();
          args.inv_std = inv_std.data();
          args.epsilon = 1e-5;
        }
        ASSERT_TRUE(kernels::RunReference(op, dtype, shape, args, 0, shape.rows,
                                          kernels::DType::kFloat32)
                        .ok());
        ASSERT_EQ(response.output_data().size(), shape.elements() * size);
        const kernels::Tolerance tolerance = kernels::OutputTolerance(op, dtype);
        int64_t bad = 0;
        for (int64_t i = 0; i < shape.elements(); ++i) {
          const double got = kernels::LoadAsDouble(dtype, response.output_data().data(), i);
          if (!(std::fabs(got - want[i]) <= tolerance.atol + tolerance.rtol * std::fabs(want[i]))) {
            if (bad++ == 0) ADD_FAILURE() << "y[" << i << "] = " << got << ", want " << want[i];
          }
        }
        EXPECT_EQ(bad, 0);
        if (layer_norm) {
          const kernels::Tolerance stats = kernels::StatsTolerance();
          ASSERT_EQ(response.mean_size(), shape.rows);
          ASSERT_EQ(response.inv_std_size(), shape.rows);
          for (int64_t r = 0; r < shape.rows; ++r) {
            EXPECT_LE(std::fabs(response.mean(r) - mean[r]), stats.atol + stats.rtol * std::fabs(mean[r]));
            EXPECT_LE(std::fabs(response.inv_std(r) - inv_std[r]),
                      stats.atol + stats.rtol * std::fabs(inv_std[r]));
          }
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
