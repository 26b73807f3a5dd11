// The TCP listener's security as functions: which addresses are loopback,
// which flag combinations are refused, what the log says, and the bearer
// token check on made-up metadata (kerntuned_tls_test.cc runs it for real).
#include "server/tcp_security.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "grpc/grpc_security_constants.h"
#include "gtest/gtest.h"

namespace kt::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(IsLoopbackAddressTest, OnlyLocalhostAnd127And1) {
  for (const char* loopback :
       {"127.0.0.1:50051", "127.8.9.10:1", "localhost:50051", "LOCALHOST:1", "[::1]:50051"}) {
    EXPECT_TRUE(IsLoopbackAddress(loopback)) << loopback;
  }
  for (const char* outside : {"0.0.0.0:50051", "[::]:50051", "10.0.0.7:50051", "myhost:50051",
                              "128.0.0.1:1", "[::ffff:10.0.0.1]:1", ":50051", "dns:///x:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(outside)) << outside;
  }
}

TcpSecurity Tls() {
  TcpSecurity security;
  security.cert_file = "server.pem";
  security.key_file = "server.key";
  return security;
}

TEST(ValidateTcpSecurityTest, PlaintextOnLoopbackOrWhenToldTlsAnywhere) {
  EXPECT_TRUE(ValidateTcpSecurity("", TcpSecurity()).ok());
  EXPECT_TRUE(ValidateTcpSecurity("127.0.0.1:1", TcpSecurity()).ok());
  TcpSecurity insecure;
  insecure.insecure = true;
  EXPECT_TRUE(ValidateTcpSecurity("0.0.0.0:1", insecure).ok());
  TcpSecurity full = Tls();
  full.client_ca_file = "ca.pem";
  full.token_file = "token";
  EXPECT_TRUE(ValidateTcpSecurity("0.0.0.0:1", full).ok());

  const absl::Status refused = ValidateTcpSecurity("0.0.0.0:1", TcpSecurity());
  EXPECT_TRUE(absl::IsInvalidArgument(refused));
  EXPECT_THAT(refused.message(), HasSubstr("--tcp=0.0.0.0:1 is not a loopback address"));
}

TEST(ValidateTcpSecurityTest, FlagsThatDoNotFitAreNamed) {
  TcpSecurity cert_only;
  cert_only.cert_file = "server.pem";
  EXPECT_THAT(ValidateTcpSecurity("127.0.0.1:1", cert_only).message(),
              HasSubstr("--tls_cert and --tls_key go together"));
  TcpSecurity token_only;
  token_only.token_file = "token";
  EXPECT_THAT(ValidateTcpSecurity("127.0.0.1:1", token_only).message(),
              HasSubstr("--token_file needs --tls_cert and --tls_key"));
  EXPECT_THAT(ValidateTcpSecurity("", token_only).message(),
              HasSubstr("--token_file applies to the TCP listener"));
  TcpSecurity both = Tls();
  both.insecure = true;
  EXPECT_THAT(ValidateTcpSecurity("127.0.0.1:1", both).message(),
              HasSubstr("--insecure_tcp and --tls_cert exclude each other"));
}

TEST(TcpSecurityWarningTest, WarnsWhenAnyoneWhoReachesThePortMayCall) {
  EXPECT_EQ(TcpSecurityWarning("", TcpSecurity()), std::nullopt);
  EXPECT_THAT(TcpSecurityWarning("127.0.0.1:1", TcpSecurity()).value_or(""),
              HasSubstr("every local user can call it"));
  TcpSecurity insecure;
  insecure.insecure = true;
  EXPECT_THAT(TcpSecurityWarning("0.0.0.0:1", insecure).value_or(""),
              HasSubstr("anyone who reaches the port can call it and read its traffic"));
  EXPECT_THAT(TcpSecurityWarning("0.0.0.0:1", Tls()).value_or(""),
              HasSubstr("TLS without --token_file or --tls_client_ca"));
  TcpSecurity token = Tls();
  token.token_file = "token";
  EXPECT_EQ(TcpSecurityWarning("0.0.0.0:1", token), std::nullopt);
  EXPECT_EQ(DescribeTcpSecurity(token), "TLS, bearer token");
  EXPECT_EQ(DescribeTcpSecurity(TcpSecurity()), "plaintext");
}

// An AuthContext holding at most a client certificate's CN.
class FakeAuthContext final : public grpc::AuthContext {
 public:
  explicit FakeAuthContext(std::string common_name = "") : common_name_(std::move(common_name)) {}
  bool IsPeerAuthenticated() const override { return !common_name_.empty(); }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(const std::string& name) const override {
    if (name != GRPC_X509_CN_PROPERTY_NAME || common_name_.empty()) return {};
    return {grpc::string_ref(common_name_)};
  }
  grpc::AuthPropertyIterator begin() const override { return NoProperty(); }
  grpc::AuthPropertyIterator end() const override { return NoProperty(); }
  void AddProperty(const std::string&, const grpc::string_ref&) override {}
  bool SetPeerIdentityPropertyName(const std::string&) override { return false; }

 private:
  // AuthPropertyIterator's constructor is protected.
  struct NoProperty : grpc::AuthPropertyIterator {};
  std::string common_name_;
};

class BearerTokenCheckerTest : public ::testing::Test {
 protected:
  // A Run with `headers`, from a client with `context`.
  grpc::Status Check(std::vector<std::pair<std::string, std::string>> headers,
                     FakeAuthContext context = FakeAuthContext()) {
    headers.emplace_back(":path", "/kerntune.v1.KernTune/Run");
    grpc::AuthMetadataProcessor::InputMetadata metadata;
    for (const auto& [key, value] : headers) metadata.emplace(key, value);
    consumed_.clear();
    grpc::AuthMetadataProcessor::OutputMetadata response;
    return checker_.Process(metadata, &context, &consumed_, &response);
  }

  std::vector<std::string> lines_;
  RequestLog log_{[this](LogLevel, absl::string_view line) { lines_.emplace_back(line); }};
  BearerTokenChecker checker_{"s3cret-token", log_};
  grpc::AuthMetadataProcessor::OutputMetadata consumed_;
};

TEST_F(BearerTokenCheckerTest, TheRightTokenPassesAndIsTakenOutOfTheCall) {
  EXPECT_TRUE(Check({{"authorization", "Bearer s3cret-token"}}).ok());
  ASSERT_EQ(consumed_.size(), 1u);
  EXPECT_EQ(consumed_.begin()->first, "authorization");
  EXPECT_TRUE(lines_.empty());
}

TEST_F(BearerTokenCheckerTest, AnythingElseIsUnauthenticatedAndLoggedWithoutTheToken) {
  const std::vector<std::vector<std::pair<std::string, std::string>>> refused = {
      {},
      {{"authorization", "Bearer s3cret-toke"}},
      {{"authorization", "Bearer s3cret-token2"}},
      {{"authorization", "Bearer "}},
      {{"authorization", "bearer s3cret-token"}},
      {{"authorization", "Basic s3cret-token"}},
      {{"authorization", "s3cret-token"}},
      {{"x-token", "s3cret-token"}},
  };
  for (const auto& headers : refused) {
    const grpc::Status status = Check(headers);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(), Not(HasSubstr("s3cret")));
    EXPECT_TRUE(consumed_.empty());
  }
  ASSERT_FALSE(lines_.empty());
  EXPECT_THAT(lines_.front(),
              HasSubstr("Run from TCP client failed: UNAUTHENTICATED: no bearer token"));
  for (const std::string& line : lines_) EXPECT_THAT(line, Not(HasSubstr("s3cret")));
}

TEST_F(BearerTokenCheckerTest, ARefusalNamesTheClientCertificate) {
  EXPECT_FALSE(Check({{"authorization", "Bearer nope"}}, FakeAuthContext("trainer-7")).ok());
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_THAT(lines_[0], HasSubstr("Run from TCP client CN=trainer-7 failed: UNAUTHENTICATED: "
                                   "the bearer token is not the one kerntuned was given"));
}

}  // namespace
}  // namespace kt::server
