// A kerntuned child (CPU backend) on a Unix socket in a temp dir, and a
// stub connected to it: the fixture of the end-to-end tests.
#ifndef KERNTUNE_TESTS_SERVER_KERNTUNED_FIXTURE_H_
#define KERNTUNE_TESTS_SERVER_KERNTUNED_FIXTURE_H_

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "tests/server/daemon_process.h"
#include "tests/server/malformed_requests.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::server::testing {

inline constexpr auto kStartDeadline = std::chrono::seconds(10);
inline constexpr auto kStopDeadline = std::chrono::seconds(5);

class KerntunedFixture : public ::testing::Test {
 protected:
  // Starts kerntuned --cpu on a socket in the temp dir; waits until healthy.
  void Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--cpu", "--socket=" + socket_, "--db=" + db_,
                                     "--max_request_bytes=" +
                                         std::to_string(kTableMaxRequestBytes)};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = std::make_unique<Daemon>(KerntunedBinary(), args, dir_.File("kerntuned.log"));
    const absl::Status serving = WaitUntilServing(*daemon_, socket_, kStartDeadline);
    ASSERT_TRUE(serving.ok()) << serving;
    channel_ = Connect("unix:" + socket_);
    stub_ = ::kerntune::v1::KernTune::NewStub(channel_);
  }

  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) {
      std::cerr << "kerntuned log:\n" << daemon_->Log();
    }
  }

  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (::kerntune::v1::KernTune::Stub::*method)(grpc::ClientContext*,
                                                               const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return (stub_.get()->*method)(&context, request, response);
  }

  kt::testing::ScopedTempDir dir_;
  const std::string socket_ = dir_.File("run/kerntune.sock");
  const std::string db_ = dir_.File("missing.db");
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<::kerntune::v1::KernTune::Stub> stub_;
};

}  // namespace kt::server::testing

#endif  // KERNTUNE_TESTS_SERVER_KERNTUNED_FIXTURE_H_
