// KernTune's gRPC methods with the daemon's own request parsing. gRPC 1.51
// answers a request that does not parse with UNIMPLEMENTED and no message,
// before any handler sees it, and protobuf 3.21 fails the whole parse of a
// proto3 message when a `string` field is not UTF-8, saying which field
// only in its own log line, once per request. Here each method's request is
// parsed by the daemon: one that fails is refused INVALID_ARGUMENT naming
// the field (proto/parse_failure.h) and logged with its caller, like any
// other bad request. The fields stay `string` (rather than `bytes`, which
// is wire-compatible) so that the Python client, grpcurl's JSON and every
// generated client keep taking text.
#ifndef KERNTUNE_SERVER_REQUEST_PARSING_H_
#define KERNTUNE_SERVER_REQUEST_PARSING_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "kerntune/v1/kerntune.grpc.pb.h"

namespace kt::server {

class ParsingService : public kerntune::v1::KernTune::CallbackService {
 public:
  // Every method of the service, parsed as above.
  ParsingService();

 protected:
  // A request of `rpc` from `peer` that did not parse; `status` names the
  // field. Its answer (the service logs it, and converts).
  virtual grpc::Status Unparsed(absl::string_view rpc, absl::string_view peer,
                                const absl::Status& status) = 0;

 private:
  template <class Request, class Response>
  void ParseFor(const char* rpc,
                grpc::ServerUnaryReactor* (kerntune::v1::KernTune::CallbackService::*method)(
                    grpc::CallbackServerContext*, const Request*, Response*));
};

// Requests of at least this many bytes were received (tensors inline): once
// they are answered, the housekeeper gives the memory back (memory_trim.h).
inline constexpr size_t kLargeRequestBytes = size_t{16} << 20;

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_REQUEST_PARSING_H_
