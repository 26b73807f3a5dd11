// Reading the TLS and token files: what is accepted, and errors that name
// the flag and the file and never quote a token.
#include "proto/credentials.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::proto {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class CredentialFilesTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  kt::testing::ScopedTempDir dir_;
};

TEST_F(CredentialFilesTest, ATokenFileLosesItsSurroundingWhitespace) {
  absl::StatusOr<std::string> token = ReadTokenFile("--token_file", Write("t", "  abc.DEF-1~\n"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc.DEF-1~");
}

TEST_F(CredentialFilesTest, AnEmptyOrMultiWordTokenIsRefusedWithoutQuotingIt) {
  const std::string empty = Write("empty", "\n\n");
  EXPECT_EQ(ReadTokenFile("--token_file", empty).status().message(),
            "--token_file=" + empty + " holds no token");
  for (const char* text : {"zq1 zq2", "zq1\nzq2", "zq1\tzq2", "zq1\xc3\xa9"}) {
    const absl::Status refused = ReadTokenFile("--token_file", Write("bad", text)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(refused)) << text;
    EXPECT_THAT(refused.message(), HasSubstr("one line of visible ASCII"));
    EXPECT_THAT(refused.message(), Not(HasSubstr("zq1")));
  }
}

TEST_F(CredentialFilesTest, AMissingFileIsNamedWithItsFlag) {
  const std::string missing = dir_.File("missing.pem");
  const absl::Status status =
      ReadPemFile("--tls_ca", missing, PemKind::kCertificate).status();
  EXPECT_TRUE(absl::IsNotFound(status));
  EXPECT_EQ(status.message(),
            "--tls_ca=" + missing + ": cannot open it: No such file or directory");
  EXPECT_TRUE(absl::IsNotFound(ReadTokenFile("--token_file", missing).status()));
}

TEST_F(CredentialFilesTest, APemFileMustHoldTheKindOfBlockItsFlagWants) {
  const std::string cert =
      Write("cert.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  const std::string key =
      Write("key.pem", "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n");
  EXPECT_TRUE(ReadPemFile("--tls_cert", cert, PemKind::kCertificate).ok());
  EXPECT_TRUE(ReadPemFile("--tls_key", key, PemKind::kPrivateKey).ok());
  EXPECT_EQ(ReadPemFile("--tls_key", cert, PemKind::kPrivateKey).status().message(),
            "--tls_key=" + cert + " holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)");
  EXPECT_EQ(ReadPemFile("--tls_cert", key, PemKind::kCertificate).status().message(),
            "--tls_cert=" + key + " holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
}

}  // namespace
}  // namespace kt::proto
