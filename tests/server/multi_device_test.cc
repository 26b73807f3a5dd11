// The GPU backend's routing over several devices, without a GPU: fake
// devices run the CPU reference on host memory that stands in for their
// allocations. Runs on device tensors go to the device that holds them;
// others name a device or go to the least-loaded one; tensors on two
// devices are refused; a device that fails is isolated while the others
// serve; a device busy with long Runs does not hold up another's.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/version.h"
#include "kernels/reference.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "server/cpu_backend.h"
#include "server/device.h"
#include "server/gpu_backend.h"
#include "server/service.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::testing::HasSubstr;

constexpr char kUuid0[] = "GPU-00000000-1111-2222-3333-444444444444";
constexpr char kUuid1[] = "GPU-99999999-1111-2222-3333-444444444444";

// A fake allocation: heap bytes standing in for device memory.
using Allocation = std::shared_ptr<std::vector<char>>;

class FakeDeviceMemory final : public ClientMemory {
 public:
  FakeDeviceMemory(Allocation allocation, int device)
      : ClientMemory(allocation->data(), static_cast<int64_t>(allocation->size()),
                     MemorySpace::kDevice, device),
        allocation_(std::move(allocation)) {}

 private:
  Allocation allocation_;
};

// One fake GPU: its "IPC handles" name allocations of this device only; it
// runs Runs with the CPU reference; a test can hold its Runs at a gate or
// make the next one fail as a sticky CUDA error would.
class FakeDevice final : public Device {
 public:
  // `sku` names its model (a node may mix them); `shipped`: its SKU's
  // shipped configs.
  FakeDevice(int ordinal, std::string uuid, std::string sku,
             std::map<std::string, Allocation> allocations,
             std::vector<tuner::TunedEntry> shipped)
      : info_(Info(ordinal, std::move(sku))),
        identity_{std::move(uuid), "0000:00:00.0"},
        allocations_(std::move(allocations)),
        // Its configs are those of a described device (ordinal -1): there is
        // no GPU to ask for occupancy.
        cache_(*ConfigCache::Create("", Info(-1, info_.name), std::move(shipped))) {}

  const kernels::DeviceInfo& info() const override { return info_; }
  const kernels::DeviceIdentity& identity() const override { return identity_; }
  const ConfigCache& config_cache() const override { return *cache_; }

  absl::StatusOr<RunResult> Execute(const RunRequest& request) override {
    entered_.fetch_add(1);
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(+[](bool* closed) { return !*closed; }, &gate_closed_));
      if (!fail_next_.empty()) {
        failure_ = fail_next_;
        fail_next_.clear();
      }
      if (!failure_.empty()) return absl::UnavailableError("device failed: " + failure_);
    }
    // Its device memory is host memory here: let the reference read it.
    RunRequest host = request;
    for (TensorView& view : host.tensors) {
      if (view.where == TensorView::Where::kDevice) view.where = TensorView::Where::kClientHost;
    }
    absl::StatusOr<RunResult> result = cpu_.Execute(0, host);
    if (result.ok()) result->config.reset();
    return result;
  }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle) override {
    auto it = allocations_.find(handle);
    if (it == allocations_.end()) {
      // As the driver does where the GPUs cannot reach each other.
      return absl::InvalidArgumentError("the handle's allocation is not on this device");
    }
    return std::make_shared<const FakeDeviceMemory>(it->second, info_.ordinal);
  }
  void Housekeep(absl::Time, absl::FunctionRef<bool(const PeerProcess&)>) override {}
  BackendStats stats() override { return cpu_.stats(); }
  int64_t open_ipc_events() const override { return 0; }
  std::string failure() const override {
    absl::MutexLock lock(&mu_);
    return failure_;
  }

  void CloseGate() {
    absl::MutexLock lock(&mu_);
    gate_closed_ = true;
  }
  void OpenGate() {
    absl::MutexLock lock(&mu_);
    gate_closed_ = false;
  }
  void FailNext(std::string reason) {
    absl::MutexLock lock(&mu_);
    fail_next_ = std::move(reason);
  }
  int entered() const { return entered_.load(); }

 private:
  static kernels::DeviceInfo Info(int ordinal, std::string sku) {
    kernels::DeviceInfo info = kernels::DescribedH100();
    info.ordinal = ordinal;
    info.name = std::move(sku);
    return info;
  }

  const kernels::DeviceInfo info_;
  const kernels::DeviceIdentity identity_;
  const std::map<std::string, Allocation> allocations_;
  std::unique_ptr<ConfigCache> cache_;
  CpuBackend cpu_{1};
  std::atomic<int> entered_{0};
  mutable absl::Mutex mu_;
  bool gate_closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string fail_next_ ABSL_GUARDED_BY(mu_);
  std::string failure_ ABSL_GUARDED_BY(mu_);
};

// A 64-byte "IPC handle" naming allocation `n`.
std::string Handle(int n) {
  std::string handle(64, '\0');
  handle[0] = static_cast<char>(n);
  return handle;
}

Allocation RandomFloats(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  auto allocation = std::make_shared<std::vector<char>>(count * sizeof(float));
  for (int64_t i = 0; i < count; ++i) {
    const float value = dist(rng);
    std::memcpy(allocation->data() + i * sizeof(float), &value, sizeof(float));
  }
  return allocation;
}

// Softmax float32 of `input` (rows x cols) by the fp64 reference.
std::vector<float> ExpectedSoftmax(const std::vector<char>& input, int64_t rows, int64_t cols) {
  std::vector<float> expected(rows * cols);
  kernels::RowOpArgs args;
  args.set_operand(kernels::Operand::kInput, const_cast<char*>(input.data()));
  args.set_operand(kernels::Operand::kOutput, expected.data());
  EXPECT_TRUE(kernels::RunReference(kernels::Op::kSoftmax, kernels::DType::kFloat32,
                                    {rows, cols, 1}, args, 0, rows, kernels::DType::kFloat32, 1)
                  .ok());
  return expected;
}

std::vector<float> AsFloats(const char* bytes, int64_t count) {
  std::vector<float> out(count);
  std::memcpy(out.data(), bytes, count * sizeof(float));
  return out;
}

class MultiDeviceTest : public ::testing::Test {
 protected:
  static constexpr int64_t kRows = 8;
  static constexpr int64_t kCols = 256;
  static constexpr int64_t kBytes = kRows * kCols * sizeof(float);
  static constexpr kernels::Shape kShippedShape = {4096, 1024, 1};

  MultiDeviceTest() {
    // Device 0 holds allocations 0 (input) and 1 (output), device 1 holds
    // 2 (input) and 3 (output).
    for (int n = 0; n < 4; ++n) {
      allocations_.push_back(n % 2 == 0 ? RandomFloats(kRows * kCols, 100 + n)
                                        : std::make_shared<std::vector<char>>(kBytes));
    }
    // Two GPU models, each with a shipped config of its own for one point.
    const std::vector<kernels::LaunchConfig> configs =
        *kernels::EnumerateConfigs(kernels::Op::kSoftmax, kernels::DType::kFloat16,
                                   kShippedShape, kernels::DescribedH100());
    std::vector<std::unique_ptr<Device>> devices;
    auto device0 = std::make_unique<FakeDevice>(
        0, kUuid0, "Model A",
        std::map<std::string, Allocation>{{Handle(0), allocations_[0]},
                                          {Handle(1), allocations_[1]}},
        std::vector<tuner::TunedEntry>{Shipped(configs.front())});
    auto device1 = std::make_unique<FakeDevice>(
        1, kUuid1, "Model B",
        std::map<std::string, Allocation>{{Handle(2), allocations_[2]},
                                          {Handle(3), allocations_[3]}},
        std::vector<tuner::TunedEntry>{Shipped(configs.back())});
    device0_ = device0.get();
    device1_ = device1.get();
    devices.push_back(std::move(device0));
    devices.push_back(std::move(device1));
    backend_ = std::make_unique<GpuBackend>(std::move(devices));

    ServiceOptions options;
    options.max_request_bytes = int64_t{16} << 20;
    options.backend_reason = "fake devices";
    options.workers = 2;
    PeerProcess me{getpid(), getuid(), getgid(), *ProcessStartTicks(getpid())};
    me.memory_access = absl::OkStatus();  // as the socket's policy lets its own user
    options.identify_caller = [me](absl::string_view) { return me; };
    service_ = std::make_unique<KernTuneService>(*backend_, options);
  }

  static tuner::TunedEntry Shipped(const kernels::LaunchConfig& config) {
    tuner::TunedEntry entry;
    entry.op = kernels::Op::kSoftmax;
    entry.dtype = kernels::DType::kFloat16;
    entry.shape = kShippedShape;
    entry.config = config;
    entry.median_us = 5;
    entry.kernel_version = kernels::kKernelLibraryVersion;
    entry.origin = tuner::EntryOrigin::kShipped;
    return entry;
  }

  // Registers allocation `n` (on `device`), returns its buffer id.
  std::string Register(int n, int device) {
    pb::RegisterBufferRequest request;
    request.mutable_cuda_ipc()->set_handle(Handle(n));
    request.mutable_cuda_ipc()->set_device_ordinal(device);
    pb::RegisterBufferResponse response;
    const grpc::Status status = service_->HandleRegisterBuffer("peer", &request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.buffer().buffer_id();
  }

  static pb::RunRequest SoftmaxOnBuffers(const std::string& input, const std::string& output) {
    pb::RunRequest request;
    request.set_op(pb::OP_SOFTMAX);
    request.set_dtype(pb::DTYPE_FLOAT32);
    request.mutable_shape()->set_rows(kRows);
    request.mutable_shape()->set_cols(kCols);
    request.mutable_input()->mutable_buffer()->set_buffer_id(input);
    request.mutable_output()->mutable_buffer()->set_buffer_id(output);
    return request;
  }

  static pb::RunRequest InlineSoftmax(int64_t rows, const std::string& device) {
    pb::RunRequest request;
    request.set_op(pb::OP_SOFTMAX);
    request.set_dtype(pb::DTYPE_FLOAT32);
    request.mutable_shape()->set_rows(rows);
    request.mutable_shape()->set_cols(kCols);
    const Allocation input = RandomFloats(rows * kCols, 7);
    request.mutable_input()->set_inline_data(std::string(input->begin(), input->end()));
    request.mutable_output()->set_return_inline(true);
    request.set_device(device);
    return request;
  }

  grpc::Status Run(const pb::RunRequest& request, pb::RunResponse* response) {
    return service_->HandleRun("peer", &request, response);
  }

  pb::GetStatusResponse Status() {
    pb::GetStatusRequest request;
    pb::GetStatusResponse response;
    EXPECT_TRUE(service_->HandleGetStatus("peer", &request, &response).ok());
    return response;
  }

  std::vector<Allocation> allocations_;
  FakeDevice* device0_ = nullptr;
  FakeDevice* device1_ = nullptr;
  std::unique_ptr<GpuBackend> backend_;
  std::unique_ptr<KernTuneService> service_;
};

TEST_F(MultiDeviceTest, ARunOnDeviceTensorsRunsOnTheirDevice) {
  for (int device : {0, 1}) {
    const std::string input = Register(2 * device, device);
    const std::string output = Register(2 * device + 1, device);
    pb::RunResponse response;
    const grpc::Status status = Run(SoftmaxOnBuffers(input, output), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.device_ordinal(), device);
    EXPECT_EQ(response.device_uuid(), device == 0 ? kUuid0 : kUuid1);
    EXPECT_EQ(AsFloats(allocations_[2 * device + 1]->data(), kRows * kCols),
              ExpectedSoftmax(*allocations_[2 * device], kRows, kCols));
  }
  EXPECT_EQ(device0_->entered(), 1);
  EXPECT_EQ(device1_->entered(), 1);
}

TEST_F(MultiDeviceTest, AOneOffIpcHandleRunsOnItsDevice) {
  pb::RunRequest request = InlineSoftmax(kRows, "");
  request.mutable_input()->mutable_cuda_ipc()->set_handle(Handle(2));
  request.mutable_input()->mutable_cuda_ipc()->set_device_ordinal(1);
  pb::RunResponse response;
  const grpc::Status status = Run(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.device_ordinal(), 1);
  EXPECT_EQ(AsFloats(response.output_data().data(), kRows * kCols),
            ExpectedSoftmax(*allocations_[2], kRows, kCols));
}

TEST_F(MultiDeviceTest, TensorsOnTwoDevicesAreRefusedNamingBoth) {
  const std::string input = Register(0, 0);
  const std::string output = Register(3, 1);
  pb::RunResponse response;
  const grpc::Status status = Run(SoftmaxOnBuffers(input, output), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr(kUuid0));
  EXPECT_THAT(status.error_message(), HasSubstr(kUuid1));
  EXPECT_EQ(device0_->entered() + device1_->entered(), 0);
  // Nothing was written to either device's output.
  EXPECT_EQ(*allocations_[3], std::vector<char>(kBytes));

  // Device tensors and a device field naming the other device.
  pb::RunRequest named = SoftmaxOnBuffers(Register(2, 1), output);
  named.set_device("0");
  EXPECT_EQ(Run(named, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  named.set_device(kUuid1);
  EXPECT_TRUE(Run(named, &response).ok());
}

TEST_F(MultiDeviceTest, AnIpcHandleOfAnotherDeviceIsRefused) {
  pb::RegisterBufferRequest request;
  request.mutable_cuda_ipc()->set_handle(Handle(2));  // device 1's
  request.mutable_cuda_ipc()->set_device_ordinal(0);
  pb::RegisterBufferResponse response;
  EXPECT_EQ(service_->HandleRegisterBuffer("peer", &request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  request.mutable_cuda_ipc()->set_device_ordinal(5);  // not served
  const grpc::Status status = service_->HandleRegisterBuffer("peer", &request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("device_ordinal=5"));
}

TEST_F(MultiDeviceTest, InlineRunsGoWhereTheyAreNamedOrToTheLeastLoaded) {
  pb::RunResponse response;
  for (const char* name : {"1", kUuid1, "GPU-99999999", "gpu-99999999-1111"}) {
    ASSERT_TRUE(Run(InlineSoftmax(kRows, name), &response).ok()) << name;
    EXPECT_EQ(response.device_ordinal(), 1) << name;
  }
  for (const char* name : {"2", "GPU-12345678", "all", "0,1", "GPU-0"}) {
    const grpc::Status status = Run(InlineSoftmax(kRows, name), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_THAT(status.error_message(), HasSubstr("device=")) << name;
  }
  // Device 0 busy with a Run at its gate: unnamed Runs go to device 1.
  device0_->CloseGate();
  std::thread busy([&] {
    pb::RunResponse busy_response;
    EXPECT_TRUE(Run(InlineSoftmax(kRows, "0"), &busy_response).ok());
  });
  while (device0_->entered() == 0) std::this_thread::yield();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Run(InlineSoftmax(kRows, ""), &response).ok());
    EXPECT_EQ(response.device_ordinal(), 1);
  }
  device0_->OpenGate();
  busy.join();
  // Idle again: unnamed Runs spread over both.
  std::set<int> used;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Run(InlineSoftmax(kRows, ""), &response).ok());
    used.insert(response.device_ordinal());
  }
  EXPECT_EQ(used, (std::set<int>{0, 1}));
}

TEST_F(MultiDeviceTest, AFailedDeviceIsIsolatedWhileTheOtherServes) {
  const std::string on0_in = Register(0, 0);
  const std::string on0_out = Register(1, 0);
  const std::string on1_in = Register(2, 1);
  const std::string on1_out = Register(3, 1);
  device0_->FailNext("cudaErrorIllegalAddress (an illegal memory access was encountered)");

  pb::RunResponse response;
  EXPECT_EQ(Run(SoftmaxOnBuffers(on0_in, on0_out), &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // From now on device 0 is refused before it is asked, and unnamed Runs
  // avoid it; device 1 serves as before.
  const grpc::Status refused = Run(InlineSoftmax(kRows, "0"), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr(kUuid0));
  EXPECT_THAT(refused.error_message(), HasSubstr("cudaErrorIllegalAddress"));
  EXPECT_EQ(device0_->entered(), 1);
  ASSERT_TRUE(Run(SoftmaxOnBuffers(on1_in, on1_out), &response).ok());
  EXPECT_EQ(response.device_ordinal(), 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Run(InlineSoftmax(kRows, ""), &response).ok());
    EXPECT_EQ(response.device_ordinal(), 1);
  }

  pb::GetStatusResponse status = Status();
  ASSERT_EQ(status.devices_size(), 2);
  EXPECT_FALSE(status.devices(0).available());
  EXPECT_THAT(status.devices(0).unavailable_reason(), HasSubstr("cudaErrorIllegalAddress"));
  EXPECT_TRUE(status.devices(1).available());
  EXPECT_EQ(status.devices(1).runs(), 4);
  EXPECT_EQ(status.devices(0).registered_buffers(), 2);

  // Housekeeping releases the failed device's registrations only.
  service_->Housekeep(absl::Now());
  status = Status();
  EXPECT_EQ(status.devices(0).registered_buffers(), 0);
  EXPECT_EQ(status.devices(1).registered_buffers(), 2);
  EXPECT_EQ(status.registered_buffers(), 2);
  EXPECT_EQ(Run(SoftmaxOnBuffers(on0_in, on0_out), &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // No new registration on it either.
  pb::RegisterBufferRequest again;
  again.mutable_cuda_ipc()->set_handle(Handle(0));
  again.mutable_cuda_ipc()->set_device_ordinal(0);
  pb::RegisterBufferResponse registered;
  EXPECT_EQ(service_->HandleRegisterBuffer("peer", &again, &registered).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(MultiDeviceTest, EveryDeviceFailedIsUnavailable) {
  device0_->FailNext("x");
  device1_->FailNext("y");
  pb::RunResponse response;
  EXPECT_EQ(Run(InlineSoftmax(kRows, "0"), &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Run(InlineSoftmax(kRows, "1"), &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  const grpc::Status status = Run(InlineSoftmax(kRows, ""), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("every device"));
}

TEST_F(MultiDeviceTest, GetConfigAndListConfigsAnswerForTheNamedDevice) {
  pb::GetConfigRequest request;
  request.set_op(pb::OP_SOFTMAX);
  request.set_dtype(pb::DTYPE_FLOAT16);
  request.mutable_shape()->set_rows(4096);
  request.mutable_shape()->set_cols(1024);
  pb::GetConfigResponse response;
  std::map<std::string, std::string> config_of;
  for (const char* device : {"", "0", kUuid1, "1"}) {
    request.set_device(device);
    ASSERT_TRUE(service_->HandleGetConfig("peer", &request, &response).ok()) << device;
    EXPECT_EQ(response.config().source(), pb::CONFIG_SOURCE_SHIPPED);
    config_of[device] = response.config().config().SerializeAsString();
  }
  EXPECT_EQ(config_of[""], config_of["0"]);  // the first device
  EXPECT_EQ(config_of[kUuid1], config_of["1"]);
  EXPECT_NE(config_of["0"], config_of["1"]);  // each its own model's
  request.set_device("3");
  EXPECT_EQ(service_->HandleGetConfig("peer", &request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  pb::ListConfigsRequest list;
  pb::ListConfigsResponse listed;
  list.set_device("1");
  ASSERT_TRUE(service_->HandleListConfigs("peer", &list, &listed).ok());
  EXPECT_EQ(listed.sku().name(), "Model B");
  list.set_device("GPU-nope");
  EXPECT_EQ(service_->HandleListConfigs("peer", &list, &listed).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// Through gRPC, in process: large Runs execute on their device's workers, so
// more long Runs on device 0 than it has workers leave device 1 serving.
TEST_F(MultiDeviceTest, ADeviceBusyWithLongRunsDoesNotHoldUpAnother) {
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterService(service_.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  grpc::ChannelArguments arguments;
  arguments.SetMaxSendMessageSize(64 << 20);
  arguments.SetMaxReceiveMessageSize(64 << 20);
  std::unique_ptr<pb::KernTune::Stub> stub = pb::KernTune::NewStub(server->InProcessChannel(arguments));

  // Large enough to leave gRPC's threads: 512 x 256 elements.
  const int64_t large_rows = 512;
  ASSERT_FALSE(RunsOnGrpcThread(InlineSoftmax(large_rows, "0")));
  device0_->CloseGate();
  constexpr int kBlocked = 4;  // twice device 0's workers
  std::vector<std::thread> blocked;
  std::atomic<int> blocked_ok{0};
  for (int i = 0; i < kBlocked; ++i) {
    blocked.emplace_back([&] {
      grpc::ClientContext context;
      pb::RunResponse response;
      if (stub->Run(&context, InlineSoftmax(large_rows, "0"), &response).ok()) ++blocked_ok;
    });
  }
  while (device0_->entered() < 2) std::this_thread::yield();

  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    pb::RunResponse response;
    const grpc::Status status = stub->Run(&context, InlineSoftmax(large_rows, "1"), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.device_ordinal(), 1);
  }
  EXPECT_EQ(blocked_ok.load(), 0);  // device 0 still holds every one of them
  device0_->OpenGate();
  for (std::thread& thread : blocked) thread.join();
  EXPECT_EQ(blocked_ok.load(), kBlocked);
  server->Shutdown();
}

}  // namespace
}  // namespace kt::server
