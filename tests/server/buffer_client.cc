// kt_buffer_client: a second client process for the daemon's end-to-end
// tests (ownership needs a different process, not just another channel).
//
//   kt_buffer_client SOCKET use BUFFER_ID         Run softmax from the buffer
//   kt_buffer_client SOCKET unregister BUFFER_ID
//   kt_buffer_client SOCKET register-shm NAME     register, print the id, wait
//   kt_buffer_client SOCKET try-register-shm NAME register once
//   kt_buffer_client SOCKET run-cuda-ipc          Run on a one-off CUDA IPC handle
//   kt_buffer_client SOCKET open-queue
//   kt_buffer_client SOCKET run-inline            Run softmax on inline bytes
//
// `use` and `unregister` print the gRPC status code number; `register-shm`
// prints the buffer id and then sleeps until it is killed; the others print
// "CODE MESSAGE" on one line. Run as another user, they are that user's
// client (kerntuned_trust_test.cc).
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "grpcpp/grpcpp.h"
#include "kerntune/v1/kerntune.grpc.pb.h"

namespace pb = ::kerntune::v1;

namespace {

pb::RunRequest Softmax1x4() {
  pb::RunRequest request;
  request.set_op(pb::OP_SOFTMAX);
  request.set_dtype(pb::DTYPE_FLOAT32);
  request.mutable_shape()->set_rows(1);
  request.mutable_shape()->set_cols(4);
  return request;
}

int PrintStatus(const grpc::Status& status) {
  std::printf("%d %s\n", static_cast<int>(status.error_code()), status.error_message().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: kt_buffer_client SOCKET VERB [ARG]\n");
    return 2;
  }
  const std::string verb = argv[2];
  const std::string arg = argc == 4 ? argv[3] : "";
  auto stub = pb::KernTune::NewStub(
      grpc::CreateChannel(std::string("unix:") + argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status status;
  if (verb == "use") {
    pb::RunRequest request = Softmax1x4();
    request.mutable_input()->mutable_buffer()->set_buffer_id(arg);
    pb::RunResponse response;
    status = stub->Run(&context, request, &response);
  } else if (verb == "unregister") {
    pb::UnregisterBufferRequest request;
    request.set_buffer_id(arg);
    pb::UnregisterBufferResponse response;
    status = stub->UnregisterBuffer(&context, request, &response);
  } else if (verb == "register-shm") {
    pb::RegisterBufferRequest request;
    request.mutable_host_shm()->set_name(arg);
    pb::RegisterBufferResponse response;
    status = stub->RegisterBuffer(&context, request, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "RegisterBuffer: %s\n", status.error_message().c_str());
      return 1;
    }
    std::printf("%s\n", response.buffer().buffer_id().c_str());
    std::fflush(stdout);
    while (true) pause();
  } else if (verb == "try-register-shm") {
    pb::RegisterBufferRequest request;
    request.mutable_host_shm()->set_name(arg);
    pb::RegisterBufferResponse response;
    return PrintStatus(stub->RegisterBuffer(&context, request, &response));
  } else if (verb == "run-cuda-ipc" || verb == "run-inline") {
    pb::RunRequest request = Softmax1x4();
    if (verb == "run-cuda-ipc") {
      request.mutable_input()->mutable_cuda_ipc()->set_handle(std::string(64, '\x01'));
    } else {
      request.mutable_input()->set_inline_data(std::string(4 * sizeof(float), '\0'));
    }
    pb::RunResponse response;
    return PrintStatus(stub->Run(&context, request, &response));
  } else if (verb == "open-queue") {
    pb::OpenQueueResponse response;
    const grpc::Status opened = stub->OpenQueue(&context, pb::OpenQueueRequest(), &response);
    // As a real client does once it has mapped the region: the name goes,
    // else a daemon the test kills leaves it in /dev/shm.
    if (opened.ok()) shm_unlink(response.shm_name().c_str());
    return PrintStatus(opened);
  } else {
    std::fprintf(stderr, "unknown verb %s\n", verb.c_str());
    return 2;
  }
  std::printf("%d\n", static_cast<int>(status.error_code()));
  return 0;
}
