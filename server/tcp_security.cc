// The TCP listener's TLS and bearer token (tcp_security.h).
#include "server/tcp_security.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "proto/credentials.h"
#include "server/log.h"
#include "server/service.h"

namespace kt::server {
namespace {

// The host of "host:port" or "[v6]:port".
std::string HostOf(absl::string_view host_port) {
  if (absl::ConsumePrefix(&host_port, "[")) {
    return std::string(host_port.substr(0, host_port.find(']')));
  }
  return std::string(host_port.substr(0, host_port.rfind(':')));
}

// The first of the TCP flags given, for "give --tcp too".
std::optional<std::string> FirstTcpFlag(const TcpSecurity& security) {
  if (!security.cert_file.empty()) return "--tls_cert";
  if (!security.key_file.empty()) return "--tls_key";
  if (!security.client_ca_file.empty()) return "--tls_client_ca";
  if (!security.token_file.empty()) return "--token_file";
  if (security.insecure) return "--insecure_tcp";
  return std::nullopt;
}

// Equal, in a time that depends on the expected token's length only: how
// long a wrong guess took says nothing of how much of it was right.
bool SameSecret(absl::string_view given, absl::string_view expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const char other = i < given.size() ? given[i] : '\0';
    difference |= static_cast<unsigned char>(expected[i] ^ other);
  }
  return difference == 0;
}

// The method a call names (":path" "/kerntune.v1.KernTune/Run" -> "Run",
// "/grpc.health.v1.Health/Check" -> "grpc.health.v1.Health/Check"). The
// path is the client's, unchecked yet: anything but a plausible method name
// is not written to the log.
std::string MethodOf(const grpc::AuthMetadataProcessor::InputMetadata& metadata) {
  const auto path = metadata.find(":path");
  if (path == metadata.end()) return "a call";
  absl::string_view method(path->second.data(), path->second.size());
  absl::ConsumePrefix(&method, "/");
  absl::ConsumePrefix(&method, "kerntune.v1.KernTune/");
  const bool plausible = !method.empty() && method.size() <= 128 &&
                         std::all_of(method.begin(), method.end(), [](char c) {
                           return absl::ascii_isalnum(c) || c == '.' || c == '/' || c == '_';
                         });
  return plausible ? std::string(method) : "an unknown method";
}

// "TCP client", or "TCP client CN=<name>" when it showed a certificate.
std::string CallerOf(const grpc::AuthContext& context) {
  const std::vector<grpc::string_ref> names =
      context.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (names.empty()) return "TCP client";
  return absl::StrCat("TCP client CN=", absl::CHexEscape(absl::string_view(
                                            names.front().data(), names.front().size())));
}

}  // namespace

bool IsLoopbackAddress(absl::string_view host_port) {
  const std::string host = HostOf(host_port);
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

absl::Status ValidateTcpSecurity(absl::string_view tcp_address, const TcpSecurity& security) {
  if (security.reload_seconds < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_reload_s=", security.reload_seconds, " must be >= 0 (0: read the files once)"));
  }
  if (tcp_address.empty()) {
    if (const std::optional<std::string> flag = FirstTcpFlag(security)) {
      return absl::InvalidArgumentError(absl::StrCat(
          *flag, " applies to the TCP listener: give --tcp=HOST:PORT too (the Unix socket is "
          "guarded by its file mode and the callers' credentials)"));
    }
    return absl::OkStatus();
  }
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: the certificate and its private key");
  }
  if (!security.tls()) {
    if (!security.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key: client certificates are checked in "
          "the TLS handshake");
    }
    if (!security.token_file.empty()) {
      return absl::InvalidArgumentError(
          "--token_file needs --tls_cert and --tls_key: a bearer token sent in plaintext can "
          "be read on its way, and gRPC clients send one over TLS only");
    }
    if (!security.insecure && !IsLoopbackAddress(tcp_address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tcp=", tcp_address, " is not a loopback address, and plaintext TCP there lets "
          "anyone who reaches the port run work on this daemon: give --tls_cert and --tls_key "
          "(and --token_file or --tls_client_ca), or --insecure_tcp to serve it in plaintext "
          "anyway"));
    }
  } else if (security.insecure) {
    return absl::InvalidArgumentError(
        "--insecure_tcp and --tls_cert exclude each other: with TLS the listener is not "
        "plaintext");
  }
  return absl::OkStatus();
}

std::optional<std::string> TcpSecurityWarning(absl::string_view tcp_address,
                                              const TcpSecurity& security) {
  if (tcp_address.empty()) return std::nullopt;
  if (!security.tls()) {
    return absl::StrCat("--tcp=", tcp_address, " is plaintext and takes no token: ",
                        IsLoopbackAddress(tcp_address)
                            ? "every local user can call it (the Unix socket admits its owner "
                              "and group only)"
                            : "anyone who reaches the port can call it and read its traffic "
                              "(--insecure_tcp)");
  }
  if (security.token_file.empty() && security.client_ca_file.empty()) {
    return absl::StrCat("--tcp=", tcp_address, " is TLS without --token_file or "
                        "--tls_client_ca: anyone who reaches the port can call it");
  }
  return std::nullopt;
}

std::string DescribeTcpSecurity(const TcpSecurity& security) {
  if (!security.tls()) return "plaintext";
  std::vector<absl::string_view> parts = {"TLS"};
  if (!security.client_ca_file.empty()) parts.push_back("client certificates");
  if (!security.token_file.empty()) parts.push_back("bearer token");
  return absl::StrJoin(parts, ", ");
}

namespace {

// InvalidArgument naming both files unless `key_pem`'s private key is the
// one whose public key `cert_pem`'s first certificate holds.
absl::Status CheckKeyBelongsToCertificate(const TcpSecurity& security, const std::string& cert_pem,
                                          const std::string& key_pem) {
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  X509* cert = cert_bio != nullptr ? PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr)
                                   : nullptr;
  EVP_PKEY* key = key_bio != nullptr
                      ? PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr)
                      : nullptr;
  const bool belongs = cert != nullptr && key != nullptr && X509_check_private_key(cert, key) == 1;
  EVP_PKEY_free(key);
  X509_free(cert);
  BIO_free(key_bio);
  BIO_free(cert_bio);
  ERR_clear_error();  // OpenSSL's queue is per thread; leave nothing in it
  if (belongs) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--tls_key=", security.key_file, " does not belong to --tls_cert=", security.cert_file,
      ": the certificate holds another public key"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTcpCredentials(
    const TcpSecurity& security, RequestLog& refusals) {
  if (!security.tls()) return grpc::InsecureServerCredentials();
  // Read here whatever gRPC reads later: a start with unusable files fails
  // naming the flag and the file.
  absl::StatusOr<std::string> cert =
      proto::ReadPemFile("--tls_cert", security.cert_file, proto::PemKind::kCertificate);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      proto::ReadPemFile("--tls_key", security.key_file, proto::PemKind::kPrivateKey);
  if (!key.ok()) return key.status();
  if (absl::Status s = CheckKeyBelongsToCertificate(security, *cert, *key); !s.ok()) return s;
  const bool client_certs = !security.client_ca_file.empty();
  std::string client_ca;
  if (client_certs) {
    absl::StatusOr<std::string> read = proto::ReadPemFile(
        "--tls_client_ca", security.client_ca_file, proto::PemKind::kCertificate);
    if (!read.ok()) return read.status();
    client_ca = *std::move(read);
  }
  const grpc_ssl_client_certificate_request_type request_type =
      client_certs ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (security.reload_seconds > 0) {
    auto files = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        security.key_file, security.cert_file, security.client_ca_file,
        static_cast<unsigned>(security.reload_seconds));
    grpc::experimental::TlsServerCredentialsOptions options(files);
    options.watch_identity_key_cert_pairs();
    if (client_certs) options.watch_root_certs();
    options.set_cert_request_type(request_type);
    credentials = grpc::experimental::TlsServerCredentials(options);
  } else {
    grpc::SslServerCredentialsOptions options(request_type);
    options.pem_root_certs = std::move(client_ca);
    options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
    credentials = grpc::SslServerCredentials(options);
  }
  if (!security.token_file.empty()) {
    absl::StatusOr<std::string> token = proto::ReadTokenFile("--token_file", security.token_file);
    if (!token.ok()) return token.status();
    credentials->SetAuthMetadataProcessor(std::make_shared<BearerTokenChecker>(
        *std::move(token), refusals, security.token_file,
        absl::Seconds(security.reload_seconds)));
  }
  return credentials;
}

namespace {

// What tells that a file changed: its inode (a file renamed into place),
// size and modification time; empty when it cannot be looked at.
std::string FileState(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                      st.st_mtim.tv_nsec);
}

}  // namespace

BearerTokenChecker::BearerTokenChecker(std::string token, RequestLog& refusals,
                                       std::string token_file, absl::Duration reload)
    : refusals_(refusals),
      token_file_(std::move(token_file)),
      reload_(reload),
      token_(std::move(token)),
      next_look_(absl::Now() + reload),
      file_state_(token_file_.empty() ? "" : FileState(token_file_)) {}

std::string BearerTokenChecker::CurrentToken(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (token_file_.empty() || reload_ <= absl::ZeroDuration() || now < next_look_) return token_;
  next_look_ = now + reload_;
  const std::string state = FileState(token_file_);
  if (state == file_state_) return token_;
  absl::StatusOr<std::string> read = proto::ReadTokenFile("--token_file", token_file_);
  if (!read.ok()) {
    // Mid-rotation, say: the token in use stays until the file reads again.
    if (!said_unreadable_) {
      LogWarning(absl::StrCat(read.status().message(), "; the TCP listener keeps its token"));
      said_unreadable_ = true;
    }
    return token_;
  }
  said_unreadable_ = false;
  file_state_ = state;
  if (*read != token_) {
    token_ = *std::move(read);
    LogInfo(absl::StrCat("--token_file=", token_file_, ": a new token, in use from now on"));
  }
  return token_;
}

grpc::Status BearerTokenChecker::Process(const InputMetadata& auth_metadata,
                                         grpc::AuthContext* context,
                                         OutputMetadata* consumed_auth_metadata,
                                         OutputMetadata* /*response_metadata*/) {
  const std::string token = CurrentToken(absl::Now());
  const auto header = auth_metadata.find(proto::kAuthorizationKey);
  if (header != auth_metadata.end()) {
    absl::string_view value(header->second.data(), header->second.size());
    if (absl::ConsumePrefix(&value, proto::kBearerPrefix) && SameSecret(value, token)) {
      // The handlers never see the token.
      consumed_auth_metadata->emplace(proto::kAuthorizationKey,
                                      std::string(header->second.data(), header->second.size()));
      return grpc::Status::OK;
    }
  }
  const absl::Status refused = absl::UnauthenticatedError(
      header == auth_metadata.end()
          ? "no bearer token: kerntuned's TCP listener takes calls with \"authorization: Bearer "
            "<token>\" only (kerntune --token_file, kerntune.Client(token=...))"
          : "the bearer token is not the one kerntuned was given (--token_file)");
  refusals_.Failed(MethodOf(auth_metadata), CallerOf(*context), refused, absl::Now());
  return ToGrpcStatus(refused);
}

}  // namespace kt::server
