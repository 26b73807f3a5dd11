// kerntuned's TCP listener secured: TLS (the server's certificate and key,
// and client certificates when asked for) and a bearer token checked on
// every call, health and reflection included. The Unix socket takes none of
// it: its file mode (0660) decides who may connect, and the daemon reads
// each caller's credentials, so a token there would guard nothing more.
// The check sits in gRPC's TLS credentials (an AuthMetadataProcessor), so
// it covers exactly the TCP port; the Unix socket's connections are handed
// to gRPC with credentials of their own.
#ifndef KERNTUNE_SERVER_TCP_SECURITY_H_
#define KERNTUNE_SERVER_TCP_SECURITY_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "server/request_log.h"

namespace kt::server {

// What kerntuned's TCP flags set.
struct TcpSecurity {
  // --tls_cert, --tls_key: PEM files of the listener's certificate (chain)
  // and private key; both or neither. Given, the listener speaks TLS only.
  std::string cert_file;
  std::string key_file;
  // --tls_client_ca: PEM file of the CAs a client certificate must chain
  // to; given, a client without one is refused at the handshake.
  std::string client_ca_file;
  // --token_file: a file holding the bearer token every TCP call must
  // carry (needs TLS). A file, never the flag's value: ps shows arguments.
  std::string token_file;
  // --insecure_tcp: serve plaintext TCP on an address other than loopback.
  bool insecure = false;
  // --tls_reload_s: how often the TLS files and the token file are read
  // again, so that rotated ones (a renewed certificate, a Kubernetes Secret
  // swapped in place) serve new connections and calls without a restart;
  // 0: read once, at the start.
  int reload_seconds = 60;

  bool tls() const { return !cert_file.empty(); }
};

// True when "host:port" ("[v6]:port") binds loopback only: localhost,
// 127.0.0.0/8, ::1. Any other name counts as reachable from outside,
// whatever it resolves to now.
bool IsLoopbackAddress(absl::string_view host_port);

// InvalidArgument naming the flag when the TCP flags do not fit together or
// with --tcp=`tcp_address` (empty: no TCP listener): TLS flags without
// --tcp, a token without TLS, plaintext on a non-loopback address without
// --insecure_tcp. No file is read here.
absl::Status ValidateTcpSecurity(absl::string_view tcp_address, const TcpSecurity& security);

// What the log says of an accepted configuration that leaves the listener
// open to more callers than an operator may think (plaintext, or TLS with
// neither a token nor client certificates); nullopt when nothing to say.
std::optional<std::string> TcpSecurityWarning(absl::string_view tcp_address,
                                              const TcpSecurity& security);

// "TLS, client certificates, bearer token", or "plaintext": for the log's
// serving line.
std::string DescribeTcpSecurity(const TcpSecurity& security);

// The TCP listener's credentials: plaintext, or TLS from the PEM files
// with the token checker on every call. Reads the files: an error names
// the flag and the file ("--tls_key=/etc/k.pem: cannot open it: ...").
// With reload_seconds, gRPC reads the TLS files again that often (a new
// handshake gets what they hold then; gRPC keeps the last good ones while
// they are unreadable) and the checker its token file.
// Refused calls go to `refusals`, which must outlive the server.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTcpCredentials(
    const TcpSecurity& security, RequestLog& refusals);

// Checks "authorization: Bearer <token>" on every call of a TLS listener:
// UNAUTHENTICATED when missing or wrong, the refusal logged through the
// request log (by client certificate CN when there is one: gRPC does not
// tell this check the peer's address). The token is compared in constant
// time, removed from the call's metadata once accepted, and never logged.
//
// With a token file and a reload period, the file is looked at again at
// most that often (its inode, size and modification time) and read when it
// changed; a file that cannot be read or holds no token keeps the token in
// use, said once in the log.
class BearerTokenChecker final : public grpc::AuthMetadataProcessor {
 public:
  BearerTokenChecker(std::string token, RequestLog& refusals, std::string token_file = "",
                     absl::Duration reload = absl::ZeroDuration());

  // Run on gRPC's thread: a compare (and, once a period, a stat) costs less
  // than a hand-off.
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  // The token to compare with, read again when the period has passed and
  // the file changed.
  std::string CurrentToken(absl::Time now);

  RequestLog& refusals_;
  const std::string token_file_;
  const absl::Duration reload_;
  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  absl::Time next_look_ ABSL_GUARDED_BY(mu_);
  std::string file_state_ ABSL_GUARDED_BY(mu_);  // inode, size, mtime when last read
  bool said_unreadable_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_TCP_SECURITY_H_
