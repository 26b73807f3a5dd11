// What secures kerntuned's TCP listener, the same at both ends: how the
// bearer token travels, and reading the files an operator names by flag
// (PEM certificates and keys, the token) with errors that name the flag and
// the file and never quote a secret.
#ifndef KERNTUNE_PROTO_CREDENTIALS_H_
#define KERNTUNE_PROTO_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kt::proto {

// Every call on a TCP listener with a token carries the metadata
// "authorization: Bearer <token>", as gRPC's access-token call credentials
// (C++ AccessTokenCredentials, Python access_token_call_credentials) send it.
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

enum class PemKind { kCertificate, kPrivateKey };

// The text of the PEM file `path`, given as `flag` ("--tls_cert"): an error
// saying "--tls_cert=PATH: ..." when it cannot be read or holds no block of
// `kind` (a certificate where a key belongs, an empty file).
absl::StatusOr<std::string> ReadPemFile(absl::string_view flag, const std::string& path,
                                        PemKind kind);

// The bearer token held in `path`: its text less surrounding whitespace (the
// newline an editor or `echo` leaves). InvalidArgument when that is empty or
// holds a character other than visible ASCII, which a header value cannot
// carry; the message never quotes the file's contents.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path);

}  // namespace kt::proto

#endif  // KERNTUNE_PROTO_CREDENTIALS_H_
