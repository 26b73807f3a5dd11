// Reading the files that secure the TCP listener (credentials.h).
#include "proto/credentials.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kt::proto {
namespace {

// The flag as the user wrote it, for messages: "--tls_cert=/etc/x.pem".
std::string Named(absl::string_view flag, const std::string& path) {
  return absl::StrCat(flag, "=", path);
}

absl::StatusOr<std::string> ReadWholeFile(absl::string_view flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string reason = absl::StrCat(Named(flag, path), ": cannot open it: ",
                                            std::strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(reason) : absl::NotFoundError(reason);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(Named(flag, path), ": cannot read it"));
  return contents.str();
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view flag, const std::string& path,
                                        PemKind kind) {
  absl::StatusOr<std::string> text = ReadWholeFile(flag, path);
  if (!text.ok()) return text.status();
  // "-----BEGIN PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----", ...
  const bool found = kind == PemKind::kCertificate
                         ? absl::StrContains(*text, "-----BEGIN CERTIFICATE-----")
                         : absl::StrContains(*text, "PRIVATE KEY-----");
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(
        Named(flag, path), " holds no PEM ",
        kind == PemKind::kCertificate ? "certificate (-----BEGIN CERTIFICATE-----)"
                                      : "private key (-----BEGIN ... PRIVATE KEY-----)"));
  }
  return text;
}

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(flag, path);
  if (!text.ok()) return text.status();
  const absl::string_view token = absl::StripAsciiWhitespace(*text);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(Named(flag, path), " holds no token"));
  }
  for (const char c : token) {
    if (c < '!' || c > '~') {
      return absl::InvalidArgumentError(absl::StrCat(
          Named(flag, path),
          ": the token must be one line of visible ASCII (no spaces), what a header carries"));
    }
  }
  return std::string(token);
}

}  // namespace kt::proto
