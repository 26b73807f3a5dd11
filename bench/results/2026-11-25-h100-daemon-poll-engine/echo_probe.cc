// Probe: the gRPC echo floor on a plain server, beside kerntuned's.
//   echo_probe serve <address>         a server with only gRPC's default health
//                                      service, on a standard listening port
//   echo_probe call <address> <n>      n blocking health Check calls (as
//                                      kt_daemon_bench makes its echo), p50/p99
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/generic/async_generic_service.h"

// Any other method: echoes the request (callback API, as kerntuned serves).
class EchoReactor : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&buffer_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer buffer_;
};
class EchoService : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new EchoReactor();
  }
};

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  const std::string address = argv[2];
  if (mode == "serve") {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    EchoService echo;
    builder.RegisterCallbackGenericService(&echo);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials());
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server) return 1;
    std::printf("serving %s\n", address.c_str());
    std::fflush(stdout);
    server->Wait();
    return 0;
  }
  const int n = argc > 3 ? std::atoi(argv[3]) : 3000;
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  const char* method = argc > 4 ? argv[4] : "/grpc.health.v1.Health/Check";
  const grpc::internal::RpcMethod check(method,
                                        grpc::internal::RpcMethod::NORMAL_RPC, channel);
  grpc::Slice empty("");  // an empty HealthCheckRequest: one empty slice
  grpc::ByteBuffer request(&empty, 1), reply;
  std::vector<double> us;
  for (int i = 0; i < n + 200; ++i) {
    grpc::ClientContext context;
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel.get(), check, &context, request, &reply);
    const double t = std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (!status.ok()) {
      std::printf("Check failed: %s\n", status.error_message().c_str());
      return 1;
    }
    if (i >= 200) us.push_back(t);
  }
  std::sort(us.begin(), us.end());
  std::printf("echo %s: p50 %.1f us  p90 %.1f us  p99 %.1f us  (n=%d)\n", address.c_str(),
              us[us.size() / 2], us[us.size() * 9 / 10], us[us.size() * 99 / 100], n);
  return 0;
}
