// `kerntune tune --served` end to end without a GPU: the real binary against
// a real kerntuned on the CPU backend (which serves nothing to tune), no
// daemon, a fake GPU daemon whose ListServedShapes --dry_run lists, and the
// usage errors. Tuning itself needs a GPU: tests/client/tune_served_gpu_test.cc.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "tests/client/cpu_daemon.h"

namespace kt::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::CpuDaemonTest;
using testing::ProcessResult;
using testing::RunKerntune;

class TuneServedTest : public CpuDaemonTest {};

TEST_F(TuneServedTest, ACpuDaemonHasNothingToTune) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // A Run first: the CPU reference launches no config, so none is recorded.
  const ProcessResult run = RunKerntune({"run", "softmax", "--dtype=fp32", "--rows=3",
                                      "--cols=100", "--via=inline", "--server=" + target()});
  ASSERT_EQ(run.code, 0) << run.err;
  absl::StatusOr<pb::ListServedShapesResponse> served = Client().ListServedShapes();
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->shapes_size(), 0);

  const ProcessResult tune = RunKerntune({"tune", "--served", "--server=" + target()});
  EXPECT_EQ(tune.code, 1) << tune.err;
  EXPECT_THAT(tune.err, HasSubstr("runs the CPU backend, which launches no tuned configs"));
  EXPECT_EQ(tune.out, "");
}

TEST_F(TuneServedTest, NoDaemonIsAClearFailure) {
  const ProcessResult tune =
      RunKerntune({"tune", "--served", "--server=unix:" + dir_.File("nobody.sock")});
  EXPECT_EQ(tune.code, 1);
  EXPECT_THAT(tune.err, HasSubstr("is kerntuned running there?"));
}

TEST_F(TuneServedTest, UsageErrorsExitTwo) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"tune", "--served", "--rows=8", "--cols=8"}, "it takes no --rows, --cols or --inner"},
      {{"tune", "--served", "--groups=main"}, "it takes no --groups"},
      {{"tune", "--dry_run"}, "--dry_run lists what --served would tune; give --served"},
      {{"tune", "--served", "--ops=softmx"}, "softmx"},
  };
  for (const auto& c : cases) {
    const ProcessResult tune = RunKerntune(c.args);
    EXPECT_EQ(tune.code, 2) << c.message << "\n" << tune.err;
    EXPECT_THAT(tune.err, HasSubstr(c.message));
  }
}

// A GPU daemon as far as `tune --served` asks: its status and what it
// served untuned.
class ServedDaemon final : public pb::KernTune::Service {
 public:
  grpc::Status GetStatus(grpc::ServerContext*, const pb::GetStatusRequest*,
                         pb::GetStatusResponse* response) override {
    response->set_backend("gpu");
    response->set_database_path("/var/lib/kerntune/tuning.db");
    return grpc::Status::OK;
  }
  grpc::Status ListServedShapes(grpc::ServerContext*, const pb::ListServedShapesRequest*,
                                pb::ListServedShapesResponse* response) override {
    *response = served;
    return grpc::Status::OK;
  }
  pb::ListServedShapesResponse served;
};

class TuneServedFakeDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target_, grpc::InsecureServerCredentials());
    builder.RegisterService(&daemon_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }

  void Add(const std::string& gpu, pb::Op op, pb::DType dtype, int64_t rows, int64_t cols,
           int64_t runs) {
    pb::ServedShape* shape = daemon_.served.add_shapes();
    shape->mutable_sku()->set_name(gpu);
    shape->mutable_sku()->set_cc_major(9);
    shape->mutable_sku()->set_sm_count(132);
    shape->mutable_sku()->set_total_memory_bytes(int64_t{80} << 30);
    shape->set_op(op);
    shape->set_dtype(dtype);
    shape->mutable_shape()->set_rows(rows);
    shape->mutable_shape()->set_cols(cols);
    shape->set_runs(runs);
    shape->set_last_seen_unix_ms(1714564800000);
    shape->set_source(pb::CONFIG_SOURCE_NEAREST_TUNED);
  }

  kt::testing::ScopedTempDir dir_;
  const std::string target_ = "unix:" + dir_.File("served.sock");
  ServedDaemon daemon_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TuneServedFakeDaemonTest, NothingServedUntunedIsNothingToTune) {
  const ProcessResult tune = RunKerntune({"tune", "--served", "--server=" + target_});
  EXPECT_EQ(tune.code, 0) << tune.err;
  EXPECT_THAT(tune.err, HasSubstr("nothing to tune"));
  EXPECT_EQ(tune.out, "");
}

TEST_F(TuneServedFakeDaemonTest, TheDryRunWithoutAGpuListsEveryModelsProblems) {
  if (kernels::CudaDeviceCount() > 0) {
    GTEST_SKIP() << "a GPU here: the dry run lists its model's problems only";
  }
  Add("NVIDIA H100 80GB HBM3", pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 4096, 1000, 7);
  Add("NVIDIA H200", pb::OP_LAYER_NORM, pb::DTYPE_FLOAT32, 8, 768, 3);
  Add("NVIDIA H100 80GB HBM3", pb::OP_RMS_NORM, pb::DTYPE_BFLOAT16, 16, 5120, 1);
  const ProcessResult listed = RunKerntune({"tune", "--served", "--dry_run", "--server=" + target_});
  EXPECT_EQ(listed.code, 0) << listed.err;
  EXPECT_THAT(listed.err, HasSubstr("no CUDA device here"));
  EXPECT_THAT(listed.out, HasSubstr("NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs, 80.0 GiB): 2 "
                                    "problems served untuned\n"));
  EXPECT_THAT(listed.out, HasSubstr("softmax float16 4096x1000"));
  EXPECT_THAT(listed.out, HasSubstr("7 runs, last 2024-05-01 12:00:00 UTC, served nearest_tuned"));
  EXPECT_THAT(listed.out, HasSubstr("rms_norm bfloat16 16x5120"));
  EXPECT_THAT(listed.out, HasSubstr("NVIDIA H200 (cc 9.0, 132 SMs, 80.0 GiB): 1 problem"));
  EXPECT_THAT(listed.out, HasSubstr("layer_norm float32 8x768"));

  // --ops and --dtypes filter.
  const ProcessResult filtered = RunKerntune(
      {"tune", "--served", "--dry_run", "--ops=softmax", "--server=" + target_});
  EXPECT_EQ(filtered.code, 0) << filtered.err;
  EXPECT_THAT(filtered.out, HasSubstr("softmax float16 4096x1000"));
  EXPECT_THAT(filtered.out, Not(HasSubstr("rms_norm")));
  EXPECT_THAT(filtered.out, Not(HasSubstr("H200")));

  // Tuning them needs a GPU.
  const ProcessResult tune = RunKerntune({"tune", "--served", "--server=" + target_});
  EXPECT_EQ(tune.code, 1);
  EXPECT_THAT(tune.err, HasSubstr("no CUDA device found: tuning needs a GPU"));
}

}  // namespace
}  // namespace kt::client
