// Shared pieces of the CLI's daemon verbs (daemon_cli_common.h).
#include "client/daemon_cli_common.h"

#include "absl/strings/match.h"
#include "client/cli_common.h"
#include "proto/convert.h"
#include "proto/credentials.h"

namespace kt::client {

absl::StatusOr<TcpCredentials> ReadTcpCredentials(const TcpCredentialFiles& files) {
  TcpCredentials credentials;
  const struct {
    const char* flag;
    const std::string& path;
    proto::PemKind kind;
    std::string& pem;
  } pem_files[] = {
      {"--tls_ca", files.ca_file, proto::PemKind::kCertificate, credentials.root_certs},
      {"--tls_cert", files.cert_file, proto::PemKind::kCertificate, credentials.cert_chain},
      {"--tls_key", files.key_file, proto::PemKind::kPrivateKey, credentials.private_key},
  };
  for (const auto& file : pem_files) {
    if (file.path.empty()) continue;
    absl::StatusOr<std::string> pem = proto::ReadPemFile(file.flag, file.path, file.kind);
    if (!pem.ok()) return pem.status();
    file.pem = *std::move(pem);
  }
  if (!files.token_file.empty()) {
    absl::StatusOr<std::string> token = proto::ReadTokenFile("--token_file", files.token_file);
    if (!token.ok()) return token.status();
    credentials.token = *std::move(token);
  }
  return credentials;
}

int ReportDaemonError(absl::string_view verb, const absl::Status& status, std::ostream& err) {
  err << "kerntune " << verb << ": " << status.message() << "\n";
  if (absl::IsUnavailable(status) && absl::StrContains(status.message(), "andshake failed")) {
    err << "kerntune " << verb
        << ": --tls_ca must hold the CA that signed the daemon's certificate, which must name "
           "the host of --server\n";
  } else if (absl::IsUnavailable(status)) {
    err << "kerntune " << verb
        << ": is kerntuned running there? Start it, or point --server at its socket "
           "(unix:PATH) or host:port; a TCP daemon may want TLS (--tls_ca) and a client "
           "certificate (--tls_cert, --tls_key)\n";
  } else if (absl::IsDeadlineExceeded(status)) {
    err << "kerntune " << verb << ": the daemon did not answer in time\n";
  } else if (absl::IsResourceExhausted(status)) {
    err << "kerntune " << verb
        << ": tensors in registered shared memory (run --via=shm) have no such limit\n";
  } else if (absl::IsUnauthenticated(status)) {
    err << "kerntune " << verb
        << ": give --token_file, a file holding the token of kerntuned's --token_file\n";
  } else if (absl::IsUnimplemented(status)) {
    err << "kerntune " << verb << ": the daemon does not serve this call (an older kerntuned?)\n";
  }
  return kExitFailure;
}

absl::string_view ConfigSourceName(pb::ConfigSource source) {
  if (source == pb::CONFIG_SOURCE_CPU_REFERENCE) return "cpu";
  absl::StatusOr<tuner::ConfigSource> lookup = proto::ConfigSourceFromProto(source, "source");
  return lookup.ok() ? tuner::ConfigSourceName(*lookup) : "unknown";
}

}  // namespace kt::client
