// KernTuneService as a function: the drain used at shutdown lets calls in
// flight finish and refuses new ones with UNAVAILABLE.
#include "server/service.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/server/malformed_requests.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

// A backend whose Execute blocks until released.
class BlockingBackend final : public Backend {
 public:
  std::string name() const override { return "blocking"; }
  absl::StatusOr<RunResult> Execute(const RunRequest& request) override {
    entered_.Notify();
    release_.WaitForNotification();
    RunResult result;
    result.output.assign(static_cast<size_t>(request.tensor_bytes()), '\0');
    return result;
  }
  absl::Notification entered_;
  absl::Notification release_;
};

TEST(KernTuneServiceTest, DrainWaitsForCallsInFlightAndRefusesNewOnes) {
  BlockingBackend backend;
  KernTuneService service(backend, ServiceOptions{int64_t{1} << 20, "test", ""});
  const pb::RunRequest request =
      testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4);

  grpc::Status in_flight_status;
  pb::RunResponse in_flight_response;
  std::thread in_flight([&] {
    grpc::ServerContext context;
    in_flight_status = service.Run(&context, &request, &in_flight_response);
  });
  backend.entered_.WaitForNotification();

  // The call is still running: a short drain times out.
  EXPECT_FALSE(service.Drain(absl::Milliseconds(20)));
  // New calls are refused while draining.
  grpc::ServerContext context;
  pb::GetStatusRequest status_request;
  pb::GetStatusResponse status_response;
  const grpc::Status refused = service.GetStatus(&context, &status_request, &status_response);
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
  KernTuneService service(backend, ServiceOptions{int64_t{1} << 20, "test", ""});
  EXPECT_TRUE(service.Drain(absl::ZeroDuration()));
}

}  // namespace
}  // namespace kt::server
