// The real kerntuned binary as a child process, CPU backend, on a Unix
// socket in a temp dir: every RPC, inline Runs checked against the
// reference, the malformed-request table over the wire, health, reflection,
// the socket's mode, stale sockets and SIGTERM.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "kernels/device_info.h"
#include "kernels/host_dtype.h"
#include "kernels/reference.h"
#include "kernels/version.h"
#include "proto/reflection.grpc.pb.h"
#include "tests/server/daemon_process.h"
#include "tests/server/kerntuned_fixture.h"
#include "tests/server/malformed_requests.h"
#include "tests/server/request_values.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::kt::server::testing::kTableMaxRequestBytes;
using ::testing::HasSubstr;
using ::kt::server::testing::Clock;
using ::kt::server::testing::Connect;
using ::kt::server::testing::Daemon;
using ::kt::server::testing::KerntunedBinary;
using ::kt::server::testing::RandomTensor;
using ::kt::server::testing::ToKernels;
using ::kt::server::testing::Health;
using ::kt::server::testing::WaitUntilServing;

using ::kt::server::testing::kStartDeadline;
using ::kt::server::testing::kStopDeadline;

using KerntunedTest = ::kt::server::testing::KerntunedFixture;


TEST_F(KerntunedTest, RunsEveryOpAndDtypeLikeTheReference) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::mt19937_64 rng(20261121);
  const struct {
    int64_t rows, cols;
  } shapes[] = {{1, 1}, {7, 33}, {64, 1000}};
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX, pb::OP_LAYER_NORM}) {
    for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
      for (const auto& shape : shapes) {
        SCOPED_TRACE(pb::Op_Name(op) + " " + pb::DType_Name(dtype) + " " +
                     std::to_string(shape.rows) + "x" + std::to_string(shape.cols));
        const kernels::DType kdtype = ToKernels(dtype);
        const bool layer_norm = op == pb::OP_LAYER_NORM;
        pb::RunRequest request;
        request.set_op(op);
        request.set_dtype(dtype);
        request.mutable_shape()->set_rows(shape.rows);
        request.mutable_shape()->set_cols(shape.cols);
        request.mutable_input()->set_inline_data(
            RandomTensor(kdtype, shape.rows * shape.cols, rng, layer_norm ? 3.0 : 0.5));
        if (shape.cols != 33) request.mutable_output()->set_return_inline(true);
        if (layer_norm) {
          auto* params = request.mutable_layer_norm();
          params->set_epsilon(1e-5);
          params->set_want_mean_inv_std(shape.cols != 1);
          if (shape.cols != 33) {
            params->mutable_gamma()->set_inline_data(RandomTensor(kdtype, shape.cols, rng, 1));
            params->mutable_beta()->set_inline_data(RandomTensor(kdtype, shape.cols, rng, 0));
          }
        }
        pb::RunResponse response;
        const grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
        ASSERT_TRUE(status.ok()) << status.error_message();

        // The CPU backend is the reference rounded once to the storage dtype.
        std::string want(request.input().inline_data().size(), '\0');
        std::vector<float> mean(shape.rows), inv_std(shape.rows);
        kernels::RowOpArgs args;
        args.x = request.input().inline_data().data();
        args.y = want.data();
        if (layer_norm) {
          const auto& params = request.layer_norm();
          if (params.has_gamma()) args.gamma = params.gamma().inline_data().data();
          if (params.has_beta()) args.beta = params.beta().inline_data().data();
          args.mean = mean.data();
          args.inv_std = inv_std.data();
          args.params.epsilon = params.epsilon();
        }
        ASSERT_TRUE(kernels::RunReference(ToKernels(op), kdtype, {shape.rows, shape.cols}, args,
                                          0, shape.rows, kdtype, 1)
                        .ok());
        EXPECT_EQ(response.output_data(), want);
        if (layer_norm && request.layer_norm().want_mean_inv_std()) {
          EXPECT_THAT(response.mean(), ::testing::ElementsAreArray(mean));
          EXPECT_THAT(response.inv_std(), ::testing::ElementsAreArray(inv_std));
        } else {
          EXPECT_EQ(response.mean_size(), 0);
          EXPECT_EQ(response.inv_std_size(), 0);
        }
        EXPECT_EQ(response.backend(), "cpu");
        EXPECT_EQ(response.config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
        EXPECT_FALSE(response.config().has_config());
        EXPECT_GE(response.kernel_time_us(), 0);
      }
    }
  }
}

// The reference's answer to `request` in the storage dtype (what the CPU
// backend must return), with its per-row outputs.
struct Expected {
  std::string y;
  std::vector<float> inv_std, row_scale;
};

Expected Reference(const pb::RunRequest& request, const std::string& mask = "") {
  const kernels::DType dtype = ToKernels(request.dtype());
  const kernels::Op op = ToKernels(request.op());
  const kernels::Shape shape{request.shape().rows(), request.shape().cols(),
                             std::max<int64_t>(1, request.shape().inner())};
  Expected want;
  want.y.resize(request.input().inline_data().size());
  want.inv_std.resize(shape.rows);
  want.row_scale.resize(shape.rows);
  kernels::RowOpArgs args;
  args.x = request.input().inline_data().data();
  args.y = want.y.data();
  if (op == kernels::Op::kRmsNorm) {
    if (request.rms_norm().has_weight()) {
      args.gamma = request.rms_norm().weight().inline_data().data();
    }
    args.params.epsilon = request.rms_norm().epsilon();
    args.inv_std = want.inv_std.data();
  }
  if (op == kernels::Op::kReduceScale) args.row_scale = want.row_scale.data();
  if (op == kernels::Op::kScaledMaskedSoftmax) {
    const auto& params = request.scaled_masked_softmax();
    args.params.scale = params.has_scale() ? params.scale() : 1.0;
    args.mask = mask.empty() ? nullptr : mask.data();
    args.params.mask_rows = params.mask_rows();
    args.params.causal = params.causal();
  }
  const absl::Status status =
      kernels::RunReference(op, dtype, shape, args, 0, shape.rows, dtype, 1);
  EXPECT_TRUE(status.ok()) << status;
  return want;
}

TEST_F(KerntunedTest, RunsTheNewOpsLikeTheReference) {
  ASSERT_NO_FATAL_FAILURE(Start());
  std::mt19937_64 rng(20261205);
  for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
    const kernels::DType kdtype = ToKernels(dtype);
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {64, 1000}}) {
      SCOPED_TRACE(pb::DType_Name(dtype) + " " + std::to_string(rows) + "x" +
                   std::to_string(cols));
      // RMSNorm, with and without its weight, 1/rms inline.
      for (bool weight : {true, false}) {
        pb::RunRequest request = testing::ValidRunRequest(pb::OP_RMS_NORM, dtype, rows, cols);
        request.mutable_input()->set_inline_data(RandomTensor(kdtype, rows * cols, rng, 0.5));
        request.mutable_rms_norm()->set_epsilon(1e-3);
        request.mutable_rms_norm()->set_want_inv_rms(true);
        if (weight) {
          request.mutable_rms_norm()->mutable_weight()->set_inline_data(
              RandomTensor(kdtype, cols, rng, 1.0));
        }
        pb::RunResponse response;
        const grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        const Expected want = Reference(request);
        EXPECT_EQ(response.output_data(), want.y) << "rms_norm weight=" << weight;
        EXPECT_THAT(response.inv_std(), ::testing::ElementsAreArray(want.inv_std));
        EXPECT_EQ(response.mean_size(), 0);
        EXPECT_EQ(response.row_scale_size(), 0);
        EXPECT_EQ(response.config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
      }
      // ReduceScale: y and the scales inline; x = y * scale.
      {
        pb::RunRequest request = testing::ValidRunRequest(pb::OP_REDUCE_SCALE, dtype, rows, cols);
        const std::string x = RandomTensor(kdtype, rows * cols, rng, 0.5);
        request.mutable_input()->set_inline_data(x);
        pb::RunResponse response;
        const grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        const Expected want = Reference(request);
        EXPECT_EQ(response.output_data(), want.y) << "reduce_scale";
        EXPECT_THAT(response.row_scale(), ::testing::ElementsAreArray(want.row_scale));
        ASSERT_EQ(response.row_scale_size(), rows);
        for (int64_t r = 0; r < rows; ++r) {
          double max_abs = 0;
          for (int64_t c = 0; c < cols; ++c) {
            max_abs = std::max(max_abs, std::fabs(kernels::LoadAsDouble(kdtype, x.data(),
                                                                        r * cols + c)));
          }
          EXPECT_FLOAT_EQ(response.row_scale(static_cast<int>(r)), static_cast<float>(max_abs));
        }
      }
    }
    // Scaled-masked softmax of a (batch 2, heads 3, q 5, k 7) input: with an
    // additive (5, 7) mask, causal, both, and neither (only a scale).
    for (int variant = 0; variant < 4; ++variant) {
      const bool with_mask = variant & 1;
      const bool causal = variant & 2;
      SCOPED_TRACE(pb::DType_Name(dtype) + " scaled_masked_softmax mask=" +
                   std::to_string(with_mask) + " causal=" + std::to_string(causal));
      constexpr int64_t kQ = 5, kK = 7, kRows = 2 * 3 * kQ;
      pb::RunRequest request =
          testing::ValidRunRequest(pb::OP_SCALED_MASKED_SOFTMAX, dtype, kRows, kK);
      request.mutable_input()->set_inline_data(RandomTensor(kdtype, kRows * kK, rng, 0.5));
      auto* params = request.mutable_scaled_masked_softmax();
      params->set_scale(0.375);
      std::string mask;
      if (with_mask) {
        mask = RandomTensor(kdtype, kQ * kK, rng, 0.0);
        // Some columns masked out entirely for a query.
        for (int64_t c = 0; c < kK; c += 3) {
          kernels::StoreFromDouble(kdtype, mask.data(), 2 * kK + c,
                                   -std::numeric_limits<double>::infinity());
        }
        params->mutable_mask()->set_inline_data(mask);
      }
      if (with_mask || causal) params->set_mask_rows(kQ);
      params->set_causal(causal);
      pb::RunResponse response;
      const grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      const Expected want = Reference(request, mask);
      EXPECT_EQ(response.output_data(), want.y);
      if (causal) {
        // Query 0 of every (batch, head) sees column 0 only.
        for (int64_t block = 0; block < 6; ++block) {
          for (int64_t c = 1; c < kK; ++c) {
            EXPECT_EQ(kernels::LoadAsDouble(kdtype, response.output_data().data(),
                                            block * kQ * kK + c),
                      0.0);
          }
        }
      }
    }
    // Softmax and log-softmax along a middle axis: (outer 3, dim 5, inner 4).
    for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX}) {
      SCOPED_TRACE(pb::Op_Name(op) + " " + pb::DType_Name(dtype) + " 3x5x4");
      pb::RunRequest request = testing::ValidRunRequest(op, dtype, 3, 5);
      request.mutable_shape()->set_inner(4);
      request.mutable_input()->set_inline_data(RandomTensor(kdtype, 3 * 5 * 4, rng, 0.5));
      pb::RunResponse response;
      const grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(response.output_data(), Reference(request).y);
      if (op == pb::OP_SOFTMAX && dtype == pb::DTYPE_FLOAT32) {
        // Independent of the reference: each (outer, inner) line over dim sums to 1.
        for (int64_t o = 0; o < 3; ++o) {
          for (int64_t i = 0; i < 4; ++i) {
            double sum = 0;
            for (int64_t d = 0; d < 5; ++d) {
              sum += kernels::LoadAsDouble(kdtype, response.output_data().data(),
                                           (o * 5 + d) * 4 + i);
            }
            EXPECT_NEAR(sum, 1.0, 1e-6) << o << ", " << i;
          }
        }
      }
    }
  }
}

TEST_F(KerntunedTest, SoftmaxOutputIsAProbabilityDistribution) {
  // Independent of RunReference: softmax rows of a known input sum to one.
  ASSERT_NO_FATAL_FAILURE(Start());
  pb::RunRequest request = testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4);
  const float x[8] = {0, 0, 0, 0, 1, 2, 3, 4};
  request.mutable_input()->set_inline_data(std::string(reinterpret_cast<const char*>(x), 32));
  pb::RunResponse response;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::Run, request, &response).ok());
  ASSERT_EQ(response.output_data().size(), 32u);
  float y[8];
  std::memcpy(y, response.output_data().data(), 32);
  for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(y[c], 0.25f);
  EXPECT_NEAR(y[4] + y[5] + y[6] + y[7], 1.0, 1e-6);
  EXPECT_NEAR(y[7], std::exp(4.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(4.0)),
              1e-6);
}

TEST_F(KerntunedTest, GetConfigListConfigsAndGetStatusOnTheCpu) {
  ASSERT_NO_FATAL_FAILURE(Start());
  pb::GetConfigRequest config_request;
  config_request.set_op(pb::OP_LAYER_NORM);
  config_request.set_dtype(pb::DTYPE_BFLOAT16);
  config_request.mutable_shape()->set_rows(49152);
  config_request.mutable_shape()->set_cols(4096);
  pb::GetConfigResponse config;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::GetConfig, config_request, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
  EXPECT_FALSE(config.config().has_config());

  config_request.mutable_shape()->set_cols(0);
  grpc::Status bad = Call(&pb::KernTune::Stub::GetConfig, config_request, &config);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("shape.cols=0"));
  config_request.mutable_shape()->set_cols(8);
  config_request.mutable_shape()->set_inner(4);
  bad = Call(&pb::KernTune::Stub::GetConfig, config_request, &config);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("shape.inner=4: op=layer_norm"));
  config_request.set_op(pb::OP_LOG_SOFTMAX);
  EXPECT_TRUE(Call(&pb::KernTune::Stub::GetConfig, config_request, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
  config_request.mutable_shape()->set_inner(0);
  config_request.set_op(pb::OP_UNSPECIFIED);
  bad = Call(&pb::KernTune::Stub::GetConfig, config_request, &config);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("op=0"));

  pb::ListConfigsResponse list;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::ListConfigs, pb::ListConfigsRequest(), &list).ok());
  EXPECT_EQ(list.entries_size(), 0);
  // The CPU reference launches no config: nothing is served untuned.
  pb::ListServedShapesResponse served;
  ASSERT_TRUE(
      Call(&pb::KernTune::Stub::ListServedShapes, pb::ListServedShapesRequest(), &served).ok());
  EXPECT_EQ(served.shapes_size(), 0);

  pb::GetStatusResponse status;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &status).ok());
  EXPECT_FALSE(status.version().empty());
  EXPECT_FALSE(status.kernel_library_version().empty());
  EXPECT_EQ(status.backend(), "cpu");
  EXPECT_EQ(status.backend_reason(), "--cpu given");
  EXPECT_EQ(status.devices_size(), 0);
  EXPECT_EQ(status.tuned_entries(), 0);
  EXPECT_EQ(status.database_path(), db_);
  EXPECT_GE(status.uptime_seconds(), 0);
  // The CPU backend says it uses no tuned configs; no Runs yet.
  EXPECT_THAT(status.backend_note(), HasSubstr("GPU tuned configs"));
  EXPECT_EQ(status.shipped_entries(), 0);
  EXPECT_EQ(status.stats().runs(), 0);
  EXPECT_EQ(status.stats().kernels_timed(), 0);
}

TEST_F(KerntunedTest, ARunReportsTheDaemonsTimeAndGetStatusCountsIt) {
  ASSERT_NO_FATAL_FAILURE(Start());
  pb::RunRequest request = testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 4, 256);
  for (int i = 0; i < 3; ++i) {
    pb::RunResponse response;
    ASSERT_TRUE(Call(&pb::KernTune::Stub::Run, request, &response).ok());
    const pb::RunTiming& timing = response.server_timing();
    EXPECT_GT(timing.handler_us(), 0);
    EXPECT_GE(timing.handler_us() + 1e-9,
              timing.validate_us() + timing.resolve_us() + timing.execute_us());
    // The CPU reference has no GPU stages.
    EXPECT_EQ(timing.lane_wait_us(), 0);
    EXPECT_EQ(timing.launch_us(), 0);
    EXPECT_EQ(timing.gpu_wait_us(), 0);
  }
  pb::GetStatusResponse status;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.stats().runs(), 3);
  EXPECT_EQ(status.stats().runs_answered_early(), 0);
  EXPECT_GT(status.stats().handler_us(), 0);
  // The CPU backend counts the reference's runs as its kernels.
  EXPECT_EQ(status.stats().kernels_timed(), 3);
  EXPECT_GE(status.stats().kernel_us(), 0);
}

TEST_F(KerntunedTest, MalformedRequestsGetTheirCodeAndTheDaemonStaysUp) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const auto cases = testing::MalformedRunRequests();
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    pb::RunResponse response;
    const grpc::Status status = Call(&pb::KernTune::Stub::Run, c.request, &response);
    EXPECT_EQ(static_cast<int>(status.error_code()), static_cast<int>(c.code))
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  // Still up and still right.
  pb::GetStatusResponse status;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &status).ok());
  pb::RunResponse response;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::Run,
                   testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 2, 8), &response)
                  .ok());
  EXPECT_EQ(response.output_data().size(), 32u);
  EXPECT_TRUE(daemon_->running());
  // Each failed request was logged at the edge.
  EXPECT_THAT(daemon_->Log(), HasSubstr("Run from"));
}

// Several clients at once, small Runs answered on gRPC's threads and larger
// ones by the workers, all correct; then SIGTERM with a client still sending
// stops the daemon cleanly.
TEST_F(KerntunedTest, ConcurrentClientsAndASigtermWithCallsInFlight) {
  ASSERT_NO_FATAL_FAILURE(Start({"--workers=2"}));
  constexpr int kClients = 4, kRunsEach = 6;
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      auto stub = pb::KernTune::NewStub(Connect("unix:" + socket_));
      std::mt19937_64 rng(1000 + t);
      for (int i = 0; i < kRunsEach; ++i) {
        // 300 x 256 is over 64Ki elements: a worker answers it.
        const int64_t rows = (t + i) % 2 == 0 ? 4 : 300;
        pb::RunRequest request =
            testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, rows, 256);
        request.mutable_input()->set_inline_data(
            RandomTensor(kernels::DType::kFloat16, rows * 256, rng, 2.0));
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        pb::RunResponse response;
        const grpc::Status status = stub->Run(&context, request, &response);
        if (!status.ok() || response.output_data() != Reference(request).y) ++wrong;
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(wrong.load(), 0);

  pb::GetConfigRequest get_config;
  get_config.set_op(pb::OP_SOFTMAX);
  get_config.set_dtype(pb::DTYPE_FLOAT16);
  get_config.mutable_shape()->set_rows(4);
  get_config.mutable_shape()->set_cols(256);
  pb::GetConfigResponse config;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::GetConfig, get_config, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
  get_config.mutable_shape()->set_rows(0);
  EXPECT_EQ(Call(&pb::KernTune::Stub::GetConfig, get_config, &config).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  for (const auto& c : testing::MalformedRunRequests()) {
    pb::RunResponse response;
    const grpc::Status status = Call(&pb::KernTune::Stub::Run, c.request, &response);
    EXPECT_EQ(static_cast<int>(status.error_code()), static_cast<int>(c.code)) << c.name;
  }
  pb::ListBuffersResponse buffers;
  EXPECT_TRUE(Call(&pb::KernTune::Stub::ListBuffers, pb::ListBuffersRequest(), &buffers).ok());
  pb::GetStatusResponse status;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.stats().runs(), kClients * kRunsEach);

  // Stop while a client keeps sending: every call either succeeds or is
  // refused, and the daemon exits 0 in time.
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    auto stub = pb::KernTune::NewStub(Connect("unix:" + socket_));
    const pb::RunRequest request =
        testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 300, 256);
    while (!stop.load()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      pb::RunResponse response;
      if (!stub->Run(&context, request, &response).ok()) break;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::optional<int> exit_status = daemon_->Signal(SIGTERM, kStopDeadline);
  stop = true;
  sender.join();
  ASSERT_TRUE(exit_status.has_value()) << "still running after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*exit_status));
  EXPECT_EQ(WEXITSTATUS(*exit_status), 0);
  EXPECT_THAT(daemon_->Log(), HasSubstr("kerntuned: stopped"));
}

TEST_F(KerntunedTest, HealthIsServingForTheServerAndTheService) {
  ASSERT_NO_FATAL_FAILURE(Start());
  grpc::Status status;
  EXPECT_EQ(Health(channel_, "", &status), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(Health(channel_, "kerntune.v1.KernTune", &status),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(status.ok());
  Health(channel_, "no.such.Service", &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(KerntunedTest, ReflectionListsAndDescribesTheService) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> names;
  for (const auto& service : response.list_services_response().service()) {
    names.push_back(service.name());
  }
  EXPECT_THAT(names, ::testing::IsSupersetOf({"kerntune.v1.KernTune", "grpc.health.v1.Health"}));

  request.set_file_containing_symbol("kerntune.v1.KernTune");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_file_descriptor_response()) << response.DebugString();
  std::vector<std::string> methods;
  for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    for (const auto& service : file.service()) {
      if (file.package() + "." + service.name() != "kerntune.v1.KernTune") continue;
      for (const auto& method : service.method()) methods.push_back(method.name());
    }
  }
  EXPECT_THAT(methods,
              ::testing::UnorderedElementsAre("Run", "RegisterBuffer", "UnregisterBuffer",
                                              "ListBuffers", "GetConfig", "ListConfigs",
                                              "GetStatus", "OpenQueue", "CloseQueue",
                                              "ListServedShapes"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(KerntunedTest, SocketIsMode0660InACreatedDirectory) {
  ASSERT_NO_FATAL_FAILURE(Start());
  struct stat info {};
  ASSERT_EQ(stat(socket_.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0660);
}

TEST_F(KerntunedTest, SigtermDrainsExitsZeroAndRemovesTheSocket) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const auto start = Clock::now();
  const std::optional<int> status = daemon_->Signal(SIGTERM, kStopDeadline);
  ASSERT_TRUE(status.has_value()) << "still running " << kStopDeadline.count() << " s after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_LT(Clock::now() - start, kStopDeadline);
  struct stat info {};
  EXPECT_NE(stat(socket_.c_str(), &info), 0) << "socket left behind";
  EXPECT_THAT(daemon_->Log(), HasSubstr("kerntuned: stopped"));
}

TEST_F(KerntunedTest, SigintAlsoStopsCleanly) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::optional<int> status = daemon_->Signal(SIGINT, kStopDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

TEST_F(KerntunedTest, AStaleSocketFileIsReplaced) {
  // A socket file nobody listens on, as a killed daemon leaves behind.
  ASSERT_EQ(mkdir(dir_.File("run").c_str(), 0755), 0);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
  ASSERT_NO_FATAL_FAILURE(Start());
  pb::GetStatusResponse status;
  EXPECT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &status).ok());
}

TEST_F(KerntunedTest, ASecondDaemonOnALiveSocketRefusesToStart) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Daemon second(KerntunedBinary(), {"--cpu", "--socket=" + socket_, "--db=" + db_}, dir_.File("second.log"));
  const std::optional<int> status = second.WaitExit(kStartDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  EXPECT_THAT(second.Log(), HasSubstr("another server is listening on " + socket_));
  // The first one still serves.
  pb::GetStatusResponse reply;
  EXPECT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &reply).ok());
}

// Bad flags stop the daemon before it listens, each a usage error (exit 2)
// on one line that names the flag: an out-of-range value with its range, a
// value that does not parse, an unknown flag (the removed execution modes'
// too, never silently ignored) with the flag meant when it is a typo.
// issue 43: absl's own report exited 1, several lines around the flag.
TEST_F(KerntunedTest, BadFlagsAreRefusedByName) {
  const struct {
    std::string flag;
    std::string message;
  } bad[] = {
      {"--workers=0", "--workers=0 must be in [1, 1024]"},
      {"--buffer_ttl_s=0", "--buffer_ttl_s=0 must be in [1, 604800]"},
      {"--max_request_bytes=0", "--max_request_bytes=0 must be >= 1"},
      {"--max_buffers=0", "--max_buffers=0 must be >= 1"},
      {"--socket=" + std::string(200, 's'), "bytes, the Unix socket path limit"},
      {"--tune_idle", "--tune_idle and --cpu exclude each other"},
      {"--workers=abc", "kerntuned: --workers=abc: "},
      {"--max_request_bytes=1e9", "kerntuned: --max_request_bytes=1e9: "},
      {"--cpu=maybe", "kerntuned: --cpu=maybe: "},
      {"--wrokers=4", "kerntuned: unknown flag --wrokers; did you mean --workers? "
                      "(kerntuned --help)"},
      {"--sockett=/tmp/x", "unknown flag --sockett; did you mean --socket?"},
      {"-buffer-ttl-s=5", "unknown flag --buffer-ttl-s; did you mean --buffer_ttl_s?"},
      {"--gpu_wait=spin", "kerntuned: unknown flag --gpu_wait (kerntuned --help)"},
      {"--hot_launcher", "unknown flag --hot_launcher"},
      {"--busy_poll_threads=2", "unknown flag --busy_poll_threads"},
      {"--grpc_min_pollers=4", "unknown flag --grpc_min_pollers"},
      {"--grpc_thread_run_elements=1", "unknown flag --grpc_thread_run_elements"},
      {"serve", "unexpected argument \"serve\": kerntuned takes flags only"},
  };
  for (const auto& [flag, message] : bad) {
    SCOPED_TRACE(flag);
    Daemon daemon(KerntunedBinary(), {"--cpu", "--socket=" + socket_, "--db=" + db_, flag},
                  dir_.File("refused.log"));
    const std::optional<int> status = daemon.WaitExit(kStartDeadline);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status));
    EXPECT_EQ(WEXITSTATUS(*status), 2);
    const std::string log = daemon.Log();
    EXPECT_THAT(log, HasSubstr(message));
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  }
  // A boolean's negation and a value in the next argument are flags too.
  Daemon daemon(KerntunedBinary(),
                {"--nocpu", "--cpu", "--socket", socket_, "--db=" + db_, "--workers", "2"},
                dir_.File("accepted.log"));
  ASSERT_TRUE(WaitUntilServing(daemon, socket_, kStartDeadline).ok()) << daemon.Log();
}

// issue 43: --version printed "Debug build (NDEBUG not #defined)" and no
// version.
TEST_F(KerntunedTest, VersionPrintsTheProjectAndKernelVersions) {
  Daemon daemon(KerntunedBinary(), {"--version"}, dir_.File("version.log"));
  const std::optional<int> status = daemon.WaitExit(kStartDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_EQ(daemon.Log(), absl::StrCat("kerntuned ", KT_PROJECT_VERSION, " (kernels ",
                                       kernels::kKernelLibraryVersion, ")\n"));
}

// --help lists the flags and no path of the machine that built it.
TEST_F(KerntunedTest, HelpListsTheFlagsWithoutABuildPath) {
  Daemon daemon(KerntunedBinary(), {"--help"}, dir_.File("help.log"));
  const std::optional<int> status = daemon.WaitExit(kStartDeadline);
  ASSERT_TRUE(status.has_value());
  const std::string help = daemon.Log();
  for (const char* flag : {"--socket", "--tcp", "--tls_cert", "--tls_key", "--tls_client_ca",
                           "--token_file", "--insecure_tcp", "--db", "--configs", "--cpu",
                           "--max_request_bytes", "--buffer_ttl_s", "--max_buffers", "--workers",
                           "--tune_idle"}) {
    EXPECT_THAT(help, HasSubstr(std::string(flag) + " (")) << flag;
  }
  EXPECT_THAT(help, HasSubstr("Flags from kerntuned:"));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("kerntuned_main.cc")));
  EXPECT_THAT(help, ::testing::Not(HasSubstr(KT_PROJECT_SOURCE_DIR)));
}

TEST_F(KerntunedTest, WithoutCpuFlagFallsBackToTheCpuWhenThereIsNoGpu) {
  if (kernels::CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present (kt_kerntuned_gpu_test)";
  daemon_ = std::make_unique<Daemon>(KerntunedBinary(),
                                     std::vector<std::string>{"--socket=" + socket_, "--db=" + db_},
                                     dir_.File("kerntuned.log"));
  const absl::Status serving = WaitUntilServing(*daemon_, socket_, kStartDeadline);
  ASSERT_TRUE(serving.ok()) << serving;
  stub_ = pb::KernTune::NewStub(Connect("unix:" + socket_));
  pb::GetStatusResponse status;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.backend(), "cpu");
  EXPECT_EQ(status.backend_reason(), "no CUDA device found");
  EXPECT_THAT(daemon_->Log(), HasSubstr("backend cpu (no CUDA device found): the fp64 reference "
                                        "on the CPU; GPU tuned configs"));
}

TEST_F(KerntunedTest, ServesOverTcpWhenAsked) {
  // The test must know the port, so not port 0: a free one.
  const int port = testing::FreeTcpPort();
  ASSERT_GT(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  ASSERT_NO_FATAL_FAILURE(Start({"--tcp=" + target}));
  auto tcp = pb::KernTune::NewStub(Connect(target));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::GetStatusResponse status;
  const grpc::Status got = tcp->GetStatus(&context, pb::GetStatusRequest(), &status);
  EXPECT_TRUE(got.ok()) << got.error_message();
  EXPECT_EQ(status.backend(), "cpu");
  EXPECT_THAT(daemon_->Log(), HasSubstr("is plaintext and takes no token: every local user can "
                                        "call it"));

  // No peer credentials over TCP: no registrations, inline tensors only.
  grpc::ClientContext register_context;
  pb::RegisterBufferRequest registration;
  registration.mutable_host_shm()->set_name("/anything");
  pb::RegisterBufferResponse registered;
  const grpc::Status refused = tcp->RegisterBuffer(&register_context, registration, &registered);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("RegisterBuffer needs the Unix socket"));
  grpc::ClientContext run_context;
  pb::RunRequest run = testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 1, 4);
  run.mutable_input()->mutable_buffer()->set_buffer_id("0123456789abcdef");
  pb::RunResponse response;
  EXPECT_EQ(tcp->Run(&run_context, run, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  grpc::ClientContext list_context;
  pb::ListBuffersResponse listed;
  EXPECT_EQ(tcp->ListBuffers(&list_context, pb::ListBuffersRequest(), &listed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  grpc::ClientContext unregister_context;
  pb::UnregisterBufferRequest unregister;
  unregister.set_buffer_id("0123456789abcdef");
  pb::UnregisterBufferResponse unregistered;
  EXPECT_EQ(tcp->UnregisterBuffer(&unregister_context, unregister, &unregistered).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace kt::server
