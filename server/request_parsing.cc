// The daemon's own parsing of KernTune requests (see request_parsing.h).
#include "server/request_parsing.h"

#include <algorithm>
#include <functional>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "grpc/byte_buffer.h"
#include "grpc/byte_buffer_reader.h"
#include "grpcpp/impl/codegen/core_codegen_interface.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "proto/parse_failure.h"
#include "server/log.h"
#include "server/memory_trim.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

// The received payload as a ByteBuffer sharing its slices (no bytes
// copied); the payload itself is destroyed, as gRPC's own handler does.
// Unavailable when gRPC cannot read it (a compressed message that does not
// decompress).
absl::StatusOr<grpc::ByteBuffer> TakePayload(grpc_byte_buffer* payload) {
  std::vector<grpc::Slice> slices;
  grpc_byte_buffer_reader reader;
  const bool readable = grpc_byte_buffer_reader_init(&reader, payload) != 0;
  if (readable) {
    grpc_slice slice;
    while (grpc_byte_buffer_reader_next(&reader, &slice) != 0) {
      slices.emplace_back(slice, grpc::Slice::STEAL_REF);
    }
    grpc_byte_buffer_reader_destroy(&reader);
  }
  grpc_byte_buffer_destroy(payload);
  if (!readable) return absl::InvalidArgumentError("the request message cannot be read");
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// One method's handler: gRPC's callback handler for the typed method, with
// the request parsed here. The parse's outcome travels in the call's
// message holder (the allocator state gRPC hands the handler back), so a
// request that failed reaches the refusal instead of the method.
template <class Request, class Response>
class ParsingHandler final : public grpc::internal::MethodHandler {
 public:
  using Method = std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*,
                                                         const Request*, Response*)>;
  using Refuse =
      std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*, const absl::Status&)>;

  ParsingHandler(Method method, Refuse refuse)
      : typed_(
            [method = std::move(method), refuse = std::move(refuse)](
                grpc::CallbackServerContext* context, const Request* request, Response* response) {
              const auto* messages = static_cast<const Messages*>(context->GetRpcAllocatorState());
              if (!messages->unparsed.ok()) return refuse(context, messages->unparsed);
              return method(context, request, response);
            }) {}

  void RunHandler(const HandlerParameter& param) override { typed_.RunHandler(param); }

  // As gRPC's own Deserialize (the messages on the call's arena, the
  // payload destroyed after parsing), but a failure is kept for the
  // handler rather than failing the call.
  void* Deserialize(grpc_call* call, grpc_byte_buffer* payload, grpc::Status* status,
                    void** handler_data) override {
    auto* messages =
        new (grpc::g_core_codegen_interface->grpc_call_arena_alloc(call, sizeof(Messages)))
            Messages();
    *handler_data = messages;
    *status = grpc::Status::OK;
    if (payload == nullptr) {
      messages->unparsed = absl::InvalidArgumentError(
          "no request message arrived: the call ended first, or the daemon's receive quota "
          "(twice the largest request --max_request_bytes allows) was full");
      return messages->request();
    }
    messages->request_bytes = grpc_byte_buffer_length(payload);
    absl::StatusOr<grpc::ByteBuffer> buffer = TakePayload(payload);
    if (!buffer.ok()) {
      messages->unparsed = buffer.status();
      return messages->request();
    }
    QuietProtobufLog quiet;  // the refusal says it, with the caller
    grpc::ProtoBufferReader reader(&*buffer);
    if (!reader.status().ok() || !messages->request()->ParseFromZeroCopyStream(&reader)) {
      grpc::ProtoBufferReader again(&*buffer);
      messages->unparsed = proto::DescribeParseFailure(*Request::descriptor(), again);
    }
    return messages->request();
  }

 private:
  class Messages final : public grpc::MessageHolder<Request, Response> {
   public:
    Messages() {
      this->set_request(&request_);
      this->set_response(&response_);
    }
    // At the call's end. On the call's arena, like gRPC's own holder:
    // destroyed, not freed.
    void Release() override {
      // The answer's size as serialized (0 when it was not).
      const size_t bytes = std::max(request_bytes, static_cast<size_t>(response_.GetCachedSize()));
      this->~Messages();
      if (bytes >= kLargeRequestBytes) NoteLargeMessage(bytes);
    }

    absl::Status unparsed;
    size_t request_bytes = 0;

   private:
    Request request_;
    Response response_;
  };

  grpc::internal::CallbackUnaryHandler<Request, Response> typed_;
};

}  // namespace

template <class Request, class Response>
void ParsingService::ParseFor(const char* rpc,
                              grpc::ServerUnaryReactor* (pb::KernTune::CallbackService::*method)(
                                  grpc::CallbackServerContext*, const Request*, Response*)) {
  // The generated service numbers its methods in the .proto's order.
  const google::protobuf::ServiceDescriptor* service =
      pb::RunRequest::descriptor()->file()->FindServiceByName("KernTune");
  const google::protobuf::MethodDescriptor* found = service->FindMethodByName(rpc);
  GPR_ASSERT(found != nullptr && found->input_type() == Request::descriptor() &&
             found->output_type() == Response::descriptor());
  MarkMethodCallback(
      found->index(),
      new ParsingHandler<Request, Response>(
          [this, method](grpc::CallbackServerContext* context, const Request* request,
                         Response* response) {
            return (this->*method)(context, request, response);
          },
          [this, rpc](grpc::CallbackServerContext* context, const absl::Status& status) {
            grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
            reactor->Finish(Unparsed(rpc, context->peer(), status));
            return reactor;
          }));
}

ParsingService::ParsingService() {
  using Service = pb::KernTune::CallbackService;
  ParseFor<pb::RunRequest, pb::RunResponse>("Run", &Service::Run);
  ParseFor<pb::RegisterBufferRequest, pb::RegisterBufferResponse>("RegisterBuffer",
                                                                  &Service::RegisterBuffer);
  ParseFor<pb::UnregisterBufferRequest, pb::UnregisterBufferResponse>("UnregisterBuffer",
                                                                      &Service::UnregisterBuffer);
  ParseFor<pb::ListBuffersRequest, pb::ListBuffersResponse>("ListBuffers", &Service::ListBuffers);
  ParseFor<pb::GetConfigRequest, pb::GetConfigResponse>("GetConfig", &Service::GetConfig);
  ParseFor<pb::ListConfigsRequest, pb::ListConfigsResponse>("ListConfigs", &Service::ListConfigs);
  ParseFor<pb::GetStatusRequest, pb::GetStatusResponse>("GetStatus", &Service::GetStatus);
  ParseFor<pb::OpenQueueRequest, pb::OpenQueueResponse>("OpenQueue", &Service::OpenQueue);
  ParseFor<pb::CloseQueueRequest, pb::CloseQueueResponse>("CloseQueue", &Service::CloseQueue);
  ParseFor<pb::ListServedShapesRequest, pb::ListServedShapesResponse>("ListServedShapes",
                                                                      &Service::ListServedShapes);
  // A method added to the .proto must be added here too.
  GPR_ASSERT(pb::RunRequest::descriptor()->file()->FindServiceByName("KernTune")->method_count() ==
             10);
}

}  // namespace kt::server
