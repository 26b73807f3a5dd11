// KernTuneService as a function: the drain used at shutdown lets calls in
// flight finish and refuses new ones with UNAVAILABLE; a Run reports where
// the daemon spent it and GetStatus counts it; devices carry their UUID and
// PCI bus id; GetStatus says when the store cannot be read;
// ListServedShapes lists each SKU's problems served untuned.
#include "server/service.h"

#include <fstream>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/version.h"
#include "server/config_cache.h"
#include "tests/server/malformed_requests.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

// A backend whose Execute blocks until released.
class BlockingBackend final : public Backend {
 public:
  std::string name() const override { return "blocking"; }
  absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) override {
    entered_.Notify();
    release_.WaitForNotification();
    RunResult result;
    result.inline_output(kernels::Operand::kOutput)
        .assign(static_cast<size_t>(request.tensor(kernels::Operand::kOutput).bytes), '\0');
    return result;
  }
  absl::Notification entered_;
  absl::Notification release_;
};

ServiceOptions TestOptions() {
  ServiceOptions options;
  options.max_request_bytes = int64_t{1} << 20;
  options.backend_reason = "test";
  return options;
}

TEST(KernTuneServiceTest, DrainWaitsForCallsInFlightAndRefusesNewOnes) {
  BlockingBackend backend;
  KernTuneService service(backend, TestOptions());
  const pb::RunRequest request =
      testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4);

  grpc::Status in_flight_status;
  pb::RunResponse in_flight_response;
  std::thread in_flight([&] {
    in_flight_status = service.HandleRun("test-peer", &request, &in_flight_response);
  });
  backend.entered_.WaitForNotification();

  // The call is still running: a short drain times out.
  EXPECT_FALSE(service.Drain(absl::Milliseconds(20)));
  // New calls are refused while draining.
  pb::GetStatusRequest status_request;
  pb::GetStatusResponse status_response;
  const grpc::Status refused =
      service.HandleGetStatus("test-peer", &status_request, &status_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(refused.error_message(), "kerntuned is shutting down");

  // Once it finishes, the drain completes and the call got its answer.
  backend.release_.Notify();
  EXPECT_TRUE(service.Drain(absl::Seconds(10)));
  in_flight.join();
  EXPECT_TRUE(in_flight_status.ok()) << in_flight_status.error_message();
  EXPECT_EQ(in_flight_response.output_data().size(), 32u);
  EXPECT_EQ(in_flight_response.backend(), "blocking");
}

TEST(KernTuneServiceTest, DrainWithNothingInFlightReturnsAtOnce) {
  BlockingBackend backend;
  KernTuneService service(backend, TestOptions());
  EXPECT_TRUE(service.Drain(absl::ZeroDuration()));
}

// Answers at once, with GPU-like stage times and devices of its choosing.
class FakeGpuBackend final : public Backend {
 public:
  std::string name() const override { return "fake"; }
  absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) override {
    RunResult result;
    result.inline_output(kernels::Operand::kOutput)
        .assign(static_cast<size_t>(request.tensor(kernels::Operand::kOutput).bytes), '\0');
    result.kernel_time_us = 3;
    result.timing.lane_wait_us = 1.5;
    result.timing.launch_us = 2.5;
    result.timing.lookup_us = 0.5;
    result.timing.timing_events_us = 0.75;
    result.timing.kernel_launch_us = 1.0;
    result.timing.gpu_wait_us = 3.5;
    result.answered_early = answer_early;
    return result;
  }
  std::vector<BackendDevice> devices() const override { return devices_; }
  BackendStats stats() override { return {7, 21.0}; }
  bool answer_early = false;
  std::vector<BackendDevice> devices_;
};

TEST(KernTuneServiceTest, RunReportsItsStagesAndGetStatusCountsIt) {
  FakeGpuBackend backend;
  KernTuneService service(backend, TestOptions());
  const pb::RunRequest request =
      testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4);
  pb::RunResponse response;
  {
    ASSERT_TRUE(service.HandleRun("test-peer", &request, &response).ok());
  }
  const pb::RunTiming& timing = response.server_timing();
  EXPECT_GE(timing.validate_us(), 0);
  EXPECT_GE(timing.resolve_us(), 0);
  EXPECT_GE(timing.execute_us(), 0);
  EXPECT_EQ(timing.lane_wait_us(), 1.5);
  EXPECT_EQ(timing.launch_us(), 2.5);
  EXPECT_EQ(timing.gpu_wait_us(), 3.5);
  EXPECT_EQ(timing.lookup_us(), 0.5);
  EXPECT_EQ(timing.timing_events_us(), 0.75);
  EXPECT_EQ(timing.kernel_launch_us(), 1.0);
  // The handler's time covers its stages (each measured on the same clock).
  EXPECT_GE(timing.handler_us() + 1e-9,
            timing.validate_us() + timing.resolve_us() + timing.execute_us());
  EXPECT_EQ(response.kernel_time_us(), 3);

  backend.answer_early = true;
  {
    ASSERT_TRUE(service.HandleRun("test-peer", &request, &response).ok());
  }
  // A refused Run is not counted.
  pb::RunRequest bad = request;
  bad.mutable_shape()->set_cols(0);
  {
    EXPECT_EQ(service.HandleRun("test-peer", &bad, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }

  pb::GetStatusRequest status_request;
  pb::GetStatusResponse status;
  ASSERT_TRUE(service.HandleGetStatus("test-peer", &status_request, &status).ok());
  EXPECT_EQ(status.stats().runs(), 2);
  EXPECT_EQ(status.stats().runs_answered_early(), 1);
  EXPECT_GT(status.stats().handler_us(), 0);
  EXPECT_EQ(status.stats().kernels_timed(), 7);
  EXPECT_EQ(status.stats().kernel_us(), 21.0);
}

TEST(KernTuneServiceTest, DevicesCarryTheirUuidAndPciBusIdWhenKnown) {
  // New fields, new numbers: old clients skip them.
  const google::protobuf::Descriptor* device = pb::Device::descriptor();
  ASSERT_NE(device->FindFieldByName("uuid"), nullptr);
  EXPECT_EQ(device->FindFieldByName("uuid")->number(), 3);
  ASSERT_NE(device->FindFieldByName("pci_bus_id"), nullptr);
  EXPECT_EQ(device->FindFieldByName("pci_bus_id")->number(), 4);

  FakeGpuBackend backend;
  BackendDevice known{kernels::DescribedH100(), {"GPU-5b7f6b8a-0123-4567-89ab-cdef0010feff",
                                                 "0000:1B:00.0"}};
  known.info.ordinal = 0;
  BackendDevice unknown{kernels::DescribedH100(), {}};
  unknown.info.ordinal = 1;
  backend.devices_ = {known, unknown};
  KernTuneService service(backend, TestOptions());
  pb::GetStatusRequest request;
  pb::GetStatusResponse status;
  ASSERT_TRUE(service.HandleGetStatus("test-peer", &request, &status).ok());
  ASSERT_EQ(status.devices_size(), 2);
  EXPECT_EQ(status.devices(0).ordinal(), 0);
  EXPECT_EQ(status.devices(0).uuid(), "GPU-5b7f6b8a-0123-4567-89ab-cdef0010feff");
  EXPECT_EQ(status.devices(0).pci_bus_id(), "0000:1B:00.0");
  EXPECT_EQ(status.devices(1).uuid(), "");
  EXPECT_EQ(status.devices(1).pci_bus_id(), "");
}

// A GPU-like backend whose config cache holds shipped entries, and those of
// the store at `db_path` when given.
class ShippedConfigsBackend final : public Backend {
 public:
  explicit ShippedConfigsBackend(std::vector<tuner::TunedEntry> shipped,
                                 const std::string& db_path = "")
      : cache_(*ConfigCache::Create(db_path, kernels::DescribedH100(), std::move(shipped))) {}
  std::string name() const override { return "fake"; }
  absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) override {
    return absl::UnimplementedError("not run here");
  }
  absl::StatusOr<const ConfigCache*> ConfigCacheFor(absl::string_view device) const override {
    return cache_.get();
  }

 private:
  std::unique_ptr<ConfigCache> cache_;
};

TEST(KernTuneServiceTest, ShippedAndStaleEntriesAreReportedAndListed) {
  tuner::TunedEntry current;
  current.op = kernels::Op::kSoftmax;
  current.dtype = kernels::DType::kFloat16;
  current.shape = {4096, 1024, 1};
  current.config = *kernels::HeuristicConfig(current.op, current.dtype, current.shape,
                                             kernels::DescribedH100());
  current.median_us = 5;
  current.kernel_version = kernels::kKernelLibraryVersion;
  current.origin = tuner::EntryOrigin::kShipped;
  tuner::TunedEntry stale = current;
  stale.shape.rows = 8192;
  stale.kernel_version = "0.1.0+k1";
  ShippedConfigsBackend backend({current, stale});
  ServiceOptions options = TestOptions();
  options.shipped_config_files = {"/opt/kerntune/share/kerntune/configs/h100.json"};
  KernTuneService service(backend, options);

  pb::GetStatusRequest status_request;
  pb::GetStatusResponse status;
  ASSERT_TRUE(service.HandleGetStatus("test-peer", &status_request, &status).ok());
  EXPECT_EQ(status.tuned_entries(), 0);
  EXPECT_EQ(status.shipped_entries(), 1);
  EXPECT_EQ(status.stale_entries_skipped(), 1);
  ASSERT_EQ(status.shipped_config_files_size(), 1);
  EXPECT_EQ(status.shipped_config_files(0), "/opt/kerntune/share/kerntune/configs/h100.json");

  pb::ListConfigsRequest list_request;
  pb::ListConfigsResponse list;
  ASSERT_TRUE(service.HandleListConfigs("test-peer", &list_request, &list).ok());
  ASSERT_EQ(list.entries_size(), 1);  // the stale one is not served
  EXPECT_EQ(list.entries(0).source(), pb::CONFIG_SOURCE_SHIPPED);
  EXPECT_EQ(list.sku().name(), kernels::DescribedH100().name);

  pb::GetConfigRequest config_request;
  config_request.set_op(pb::OP_SOFTMAX);
  config_request.set_dtype(pb::DTYPE_FLOAT16);
  config_request.mutable_shape()->set_rows(4096);
  config_request.mutable_shape()->set_cols(1024);
  pb::GetConfigResponse config;
  ASSERT_TRUE(service.HandleGetConfig("test-peer", &config_request, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_SHIPPED);
  EXPECT_EQ(config.config().tuned_origin(), pb::CONFIG_SOURCE_SHIPPED);
  config_request.mutable_shape()->set_rows(8192);  // stale there: the nearest current one
  ASSERT_TRUE(service.HandleGetConfig("test-peer", &config_request, &config).ok());
  EXPECT_EQ(config.config().source(), pb::CONFIG_SOURCE_NEAREST_TUNED);
}

TEST(KernTuneServiceTest, GetStatusSaysWhenTheStoreCannotBeRead) {
  kt::testing::ScopedTempDir dir;
  const std::string path = dir.File("tuning.db");
  std::ofstream(path) << "not a tuning store, and long enough to look like a file header..";
  ShippedConfigsBackend backend({}, path);
  ServiceOptions options = TestOptions();
  options.database_path = path;
  KernTuneService service(backend, options);
  pb::GetStatusRequest request;
  pb::GetStatusResponse status;
  ASSERT_TRUE(service.HandleGetStatus("test-peer", &request, &status).ok());
  EXPECT_EQ(status.database_path(), path);
  EXPECT_THAT(status.database_problem(),
              ::testing::HasSubstr("cannot read the tuning store " + path));
}

// Devices with config caches of their own: two of one SKU, one of another.
class ServedShapesBackend final : public Backend {
 public:
  ServedShapesBackend() {
    kernels::DeviceInfo other = kernels::DescribedH100();
    other.name = "NVIDIA H200";
    for (const kernels::DeviceInfo& info :
         {kernels::DescribedH100(), kernels::DescribedH100(), other}) {
      caches_.push_back(*ConfigCache::Create("", info));
    }
  }
  std::string name() const override { return "fake"; }
  absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) override {
    return absl::UnimplementedError("not run here");
  }
  std::vector<BackendDevice> devices() const override {
    std::vector<BackendDevice> out;
    for (size_t i = 0; i < caches_.size(); ++i) {
      BackendDevice device;
      device.info = caches_[i]->device();
      device.info.ordinal = static_cast<int>(i);
      device.config_cache = caches_[i].get();
      out.push_back(device);
    }
    return out;
  }
  std::vector<std::unique_ptr<ConfigCache>> caches_;
};

TEST(KernTuneServiceTest, ListServedShapesSumsEachSkusDevices) {
  ServedShapesBackend backend;
  KernTuneService service(backend, TestOptions());
  const absl::Time before = absl::Now();
  auto& caches = backend.caches_;
  // Runs as the devices' executors look their configs up.
  for (int i = 0; i < 2; ++i) {
    caches[0]->LookupForRun(kernels::Op::kSoftmax, kernels::DType::kFloat16, {4096, 1000, 1});
  }
  caches[1]->LookupForRun(kernels::Op::kSoftmax, kernels::DType::kFloat16, {4096, 1000, 1});
  caches[1]->LookupForRun(kernels::Op::kLogSoftmax, kernels::DType::kBFloat16, {1, 128, 32768});
  caches[2]->LookupForRun(kernels::Op::kLayerNorm, kernels::DType::kFloat32, {8, 768, 1});

  pb::ListServedShapesRequest request;
  pb::ListServedShapesResponse response;
  ASSERT_TRUE(service.HandleListServedShapes("test-peer", &request, &response).ok());
  ASSERT_EQ(response.shapes_size(), 3);
  const pb::ServedShape& first = response.shapes(0);
  EXPECT_EQ(first.sku().name(), kernels::DescribedH100().name);
  EXPECT_EQ(first.sku().sm_count(), kernels::DescribedH100().sm_count);
  EXPECT_EQ(first.op(), pb::OP_SOFTMAX);
  EXPECT_EQ(first.dtype(), pb::DTYPE_FLOAT16);
  EXPECT_EQ(first.shape().rows(), 4096);
  EXPECT_EQ(first.shape().cols(), 1000);
  EXPECT_EQ(first.runs(), 3);  // both H100s
  EXPECT_EQ(first.source(), pb::CONFIG_SOURCE_HEURISTIC);
  EXPECT_GE(first.last_seen_unix_ms(), absl::ToUnixMillis(before));
  EXPECT_LE(first.first_seen_unix_ms(), first.last_seen_unix_ms());
  const pb::ServedShape& second = response.shapes(1);
  EXPECT_EQ(second.op(), pb::OP_LOG_SOFTMAX);
  EXPECT_EQ(second.shape().inner(), 32768);
  EXPECT_EQ(second.runs(), 1);
  const pb::ServedShape& third = response.shapes(2);  // the other SKU comes after
  EXPECT_EQ(third.sku().name(), "NVIDIA H200");
  EXPECT_EQ(third.op(), pb::OP_LAYER_NORM);
  EXPECT_EQ(response.evicted(), 0);
}

TEST(KernTuneServiceTest, ListServedShapesIsEmptyWithoutConfigCaches) {
  FakeGpuBackend backend;  // no config caches, as the CPU backend
  KernTuneService service(backend, TestOptions());
  pb::ListServedShapesRequest request;
  pb::ListServedShapesResponse response;
  ASSERT_TRUE(service.HandleListServedShapes("test-peer", &request, &response).ok());
  EXPECT_EQ(response.shapes_size(), 0);
}

TEST(KernTuneServiceTest, OnlySmallRunsStayOnGrpcThreads) {
  pb::RunRequest request = testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 1, 1024);
  EXPECT_TRUE(RunsOnGrpcThread(request));
  request.mutable_shape()->set_rows(64);  // exactly 64Ki elements
  EXPECT_TRUE(RunsOnGrpcThread(request));
  request.mutable_shape()->set_rows(65);
  EXPECT_FALSE(RunsOnGrpcThread(request));
  request.mutable_shape()->set_rows(1);
  request.mutable_shape()->set_inner(128);  // the middle axis counts too
  EXPECT_FALSE(RunsOnGrpcThread(request));
  // A product past int64 goes to a worker, where validation refuses it.
  request.mutable_shape()->set_rows(int64_t{1} << 40);
  request.mutable_shape()->set_cols(int64_t{1} << 40);
  EXPECT_FALSE(RunsOnGrpcThread(request));
  // Non-positive extents are refused at once: no need for a worker.
  request.mutable_shape()->set_cols(0);
  EXPECT_TRUE(RunsOnGrpcThread(request));
}

}  // namespace
}  // namespace kt::server
