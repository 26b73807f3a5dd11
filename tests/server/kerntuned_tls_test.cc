// kerntuned's TCP listener secured, end to end with certificates made by
// the test (openssl): TLS, client certificates, the bearer token on every
// method (health included) and never in the log; plaintext TCP off
// loopback refused unless --insecure_tcp; TCP flags that do not fit, and
// TLS files that cannot be used, refused by name.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "tests/server/daemon_process.h"
#include "tests/server/kerntuned_fixture.h"
#include "tests/server/malformed_requests.h"
#include "tests/testing/test_certificates.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::kt::server::testing::Connect;
using ::kt::server::testing::Daemon;
using ::kt::server::testing::KerntunedBinary;
using ::kt::server::testing::kStartDeadline;
using ::kt::server::testing::kStopDeadline;
using ::kt::testing::TestCertificates;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "kt-test-token-5f0c2a91e4";
constexpr char kWrongToken[] = "kt-test-token-5f0c2a91e5";

// Every method a TCP client may call: KernTune's from its descriptor (so a
// new RPC is covered without touching this list), and the health check.
std::vector<std::string> EveryMethod() {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          pb::KernTune::service_full_name());
  std::vector<std::string> methods;
  for (int i = 0; i < service->method_count(); ++i) {
    methods.push_back("/" + service->full_name() + "/" + service->method(i)->name());
  }
  methods.push_back("/grpc.health.v1.Health/Check");
  return methods;
}

// How a call authenticates itself.
enum class Token { kNone, kRight, kWrong, kOtherScheme };

// `method` with an empty request (a valid message of every type): the
// status is all that matters.
grpc::Status CallEmpty(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                       Token token, const char* right_token = kToken) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  switch (token) {
    case Token::kNone:
      break;
    case Token::kRight:
      context.set_credentials(grpc::AccessTokenCredentials(right_token));
      break;
    case Token::kWrong:
      context.set_credentials(grpc::AccessTokenCredentials(kWrongToken));
      break;
    case Token::kOtherScheme:
      context.AddMetadata("authorization", std::string("Basic ") + kToken);
      break;
  }
  grpc::Slice empty("");
  const grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status got) {
                   status = std::move(got);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
}

class KerntunedTlsTest : public ::kt::server::testing::KerntunedFixture {
 protected:
  static void SetUpTestSuite() { certs_ = new TestCertificates(); }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(certs_->ok()) << certs_->error();
    std::ofstream(token_file_) << kToken << "\n";
  }

  // kerntuned with TLS on a free port of 127.0.0.1, plus `extra`.
  void StartTls(std::vector<std::string> extra = {}) {
    const int port = testing::FreeTcpPort();
    ASSERT_GT(port, 0);
    target_ = "127.0.0.1:" + std::to_string(port);
    std::vector<std::string> args = {"--tcp=" + target_, "--tls_cert=" + certs_->server_cert(),
                                     "--tls_key=" + certs_->server_key()};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_NO_FATAL_FAILURE(Start(args));
  }

  // A TLS channel to the daemon's TCP port trusting `ca`, with a client
  // certificate when `client_cert` and `client_key` are given.
  std::shared_ptr<grpc::Channel> TlsChannel(const std::string& ca,
                                            const std::string& client_cert = "",
                                            const std::string& client_key = "") const {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = TestCertificates::Read(ca);
    if (!client_cert.empty()) {
      ssl.pem_cert_chain = TestCertificates::Read(client_cert);
      ssl.pem_private_key = TestCertificates::Read(client_key);
    }
    return Connect(target_, grpc::SslCredentials(ssl));
  }

  // The daemon stopped (summaries of counted failures written), its log.
  std::string LogAfterStop() {
    EXPECT_TRUE(daemon_->Signal(SIGTERM, kStopDeadline).has_value());
    return daemon_->Log();
  }

  static TestCertificates* certs_;
  const std::string token_file_ = dir_.File("token");
  std::string target_;
};

TestCertificates* KerntunedTlsTest::certs_ = nullptr;

TEST_F(KerntunedTlsTest, EveryMethodOverTlsWantsTheToken) {
  ASSERT_NO_FATAL_FAILURE(StartTls({"--token_file=" + token_file_}));
  const std::shared_ptr<grpc::Channel> tls = TlsChannel(certs_->ca());
  for (const std::string& method : EveryMethod()) {
    SCOPED_TRACE(method);
    const grpc::Status missing = CallEmpty(tls, method, Token::kNone);
    EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(missing.error_message(), HasSubstr("no bearer token"));
    for (Token wrong : {Token::kWrong, Token::kOtherScheme}) {
      const grpc::Status refused = CallEmpty(tls, method, wrong);
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      EXPECT_THAT(refused.error_message(),
                  HasSubstr("the bearer token is not the one kerntuned was given"));
    }
    // Past the check: whatever the handler makes of an empty request.
    EXPECT_NE(CallEmpty(tls, method, Token::kRight).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }

  // The token on the channel: a Run answered, like over the Unix socket.
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = TestCertificates::Read(certs_->ca());
  auto stub = pb::KernTune::NewStub(
      Connect(target_, grpc::CompositeChannelCredentials(grpc::SslCredentials(ssl),
                                                         grpc::AccessTokenCredentials(kToken))));
  grpc::ClientContext context;
  pb::RunResponse response;
  const grpc::Status run = stub->Run(
      &context, testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4), &response);
  EXPECT_TRUE(run.ok()) << run.error_message();
  EXPECT_EQ(response.output_data().size(), 2 * 4 * sizeof(float));

  // The Unix socket takes no token.
  pb::GetStatusResponse status;
  EXPECT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &status).ok());
}

TEST_F(KerntunedTlsTest, RefusalsAreLoggedByMethodWithoutTheToken) {
  ASSERT_NO_FATAL_FAILURE(StartTls({"--token_file=" + token_file_}));
  const std::shared_ptr<grpc::Channel> tls = TlsChannel(certs_->ca());
  for (int i = 0; i < 20; ++i) {
    CallEmpty(tls, "/kerntune.v1.KernTune/Run", i % 2 == 0 ? Token::kNone : Token::kWrong);
  }
  EXPECT_TRUE(CallEmpty(tls, "/kerntune.v1.KernTune/GetStatus", Token::kRight).ok());
  const std::string log = LogAfterStop();
  EXPECT_THAT(log, HasSubstr("(TLS, bearer token)"));
  EXPECT_THAT(log, HasSubstr("Run from TCP client failed: UNAUTHENTICATED: no bearer token"));
  // Rate-limited like any failed request: five lines, the rest summed up.
  EXPECT_THAT(log, HasSubstr("more UNAUTHENTICATED from TCP client"));
  EXPECT_THAT(log, Not(HasSubstr(kToken)));
  EXPECT_THAT(log, Not(HasSubstr(kWrongToken)));
}

TEST_F(KerntunedTlsTest, RotatedFilesServeNewConnectionsWithoutARestart) {
  // As a Kubernetes Secret volume: the daemon reads secret/current/..., and
  // a rotation swaps `current` to a new directory in one rename.
  const std::string secret = dir_.File("secret");
  const auto version = [&](const std::string& name, const std::string& cert,
                           const std::string& key, const std::string& token) {
    const std::string path = secret + "/" + name;
    ASSERT_EQ(mkdir(path.c_str(), 0700), 0) << path;
    std::ofstream(path + "/tls.crt") << TestCertificates::Read(cert);
    std::ofstream(path + "/tls.key") << TestCertificates::Read(key);
    std::ofstream(path + "/token") << token << "\n";
  };
  ASSERT_EQ(mkdir(secret.c_str(), 0700), 0);
  ASSERT_NO_FATAL_FAILURE(version("v1", certs_->server_cert(), certs_->server_key(), kToken));
  ASSERT_EQ(symlink("v1", (secret + "/current").c_str()), 0);
  const int port = testing::FreeTcpPort();
  ASSERT_GT(port, 0);
  target_ = "127.0.0.1:" + std::to_string(port);
  ASSERT_NO_FATAL_FAILURE(Start({"--tcp=" + target_, "--tls_cert=" + secret + "/current/tls.crt",
                                 "--tls_key=" + secret + "/current/tls.key",
                                 "--token_file=" + secret + "/current/token",
                                 "--tls_reload_s=1"}));
  constexpr char kGetStatus[] = "/kerntune.v1.KernTune/GetStatus";
  EXPECT_TRUE(CallEmpty(TlsChannel(certs_->ca()), kGetStatus, Token::kRight).ok());

  // Renewed by another CA, with a new token.
  constexpr char kRotatedToken[] = "kt-test-token-rotated-3c1d";
  ASSERT_NO_FATAL_FAILURE(version("v2", certs_->other_server_cert(),
                                  certs_->other_server_key(), kRotatedToken));
  ASSERT_EQ(symlink("v2", (secret + "/next").c_str()), 0);
  ASSERT_EQ(rename((secret + "/next").c_str(), (secret + "/current").c_str()), 0);
  grpc::Status rotated;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       std::chrono::steady_clock::now() < until;) {
    rotated = CallEmpty(TlsChannel(certs_->other_ca()), kGetStatus, Token::kRight, kRotatedToken);
    if (rotated.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(rotated.ok()) << rotated.error_message();
  // A new connection no longer verifies with the old CA, and the old token
  // is refused.
  EXPECT_EQ(CallEmpty(TlsChannel(certs_->ca()), kGetStatus, Token::kRight).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CallEmpty(TlsChannel(certs_->other_ca()), kGetStatus, Token::kRight).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(LogAfterStop(), HasSubstr("a new token, in use from now on"));
}

TEST_F(KerntunedTlsTest, PlaintextClientsAndClientsTrustingAnotherCaCannotConnect) {
  ASSERT_NO_FATAL_FAILURE(StartTls());
  for (const std::shared_ptr<grpc::Channel>& channel :
       {Connect(target_), TlsChannel(certs_->other_ca())}) {
    EXPECT_EQ(CallEmpty(channel, "/kerntune.v1.KernTune/GetStatus", Token::kNone).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_TRUE(
      CallEmpty(TlsChannel(certs_->ca()), "/kerntune.v1.KernTune/GetStatus", Token::kNone).ok());
  EXPECT_THAT(LogAfterStop(), HasSubstr("is TLS without --token_file or --tls_client_ca"));
}

TEST_F(KerntunedTlsTest, ClientCertificatesWhenAskedFor) {
  ASSERT_NO_FATAL_FAILURE(
      StartTls({"--tls_client_ca=" + certs_->ca(), "--token_file=" + token_file_}));
  const std::string method = "/kerntune.v1.KernTune/GetStatus";
  EXPECT_EQ(CallEmpty(TlsChannel(certs_->ca()), method, Token::kRight).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  const std::shared_ptr<grpc::Channel> mutual =
      TlsChannel(certs_->ca(), certs_->client_cert(), certs_->client_key());
  EXPECT_TRUE(CallEmpty(mutual, method, Token::kRight).ok());
  EXPECT_EQ(CallEmpty(mutual, method, Token::kNone).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const std::string log = LogAfterStop();
  EXPECT_THAT(log, HasSubstr("(TLS, client certificates, bearer token)"));
  EXPECT_THAT(log, HasSubstr("GetStatus from TCP client CN=kerntune test client failed"));
}

TEST_F(KerntunedTlsTest, PlaintextOffLoopbackOnlyWithInsecureTcp) {
  Daemon refused(KerntunedBinary(),
                 {"--cpu", "--socket=" + socket_, "--db=" + db_, "--tcp=0.0.0.0:0"},
                 dir_.File("refused.log"));
  const std::optional<int> status = refused.WaitExit(kStartDeadline);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_THAT(refused.Log(), HasSubstr("--tcp=0.0.0.0:0 is not a loopback address"));
  EXPECT_THAT(refused.Log(), HasSubstr("or --insecure_tcp to serve it in plaintext anyway"));

  const int port = testing::FreeTcpPort();
  ASSERT_GT(port, 0);
  ASSERT_NO_FATAL_FAILURE(Start({"--tcp=0.0.0.0:" + std::to_string(port), "--insecure_tcp"}));
  EXPECT_TRUE(CallEmpty(Connect("127.0.0.1:" + std::to_string(port)),
                        "/kerntune.v1.KernTune/GetStatus", Token::kNone)
                  .ok());
  EXPECT_THAT(daemon_->Log(), HasSubstr("anyone who reaches the port can call it"));
}

TEST_F(KerntunedTlsTest, TcpFlagsThatDoNotFitAreRefusedByName) {
  const std::string tcp = "--tcp=127.0.0.1:0";
  const std::string cert = "--tls_cert=" + certs_->server_cert();
  const std::string key = "--tls_key=" + certs_->server_key();
  const struct {
    std::vector<std::string> flags;
    std::string message;
  } bad[] = {
      {{tcp, cert}, "--tls_cert and --tls_key go together"},
      {{tcp, "--token_file=" + token_file_}, "--token_file needs --tls_cert and --tls_key"},
      {{tcp, "--tls_client_ca=" + certs_->ca()}, "--tls_client_ca needs --tls_cert"},
      {{cert, key}, "--tls_cert applies to the TCP listener: give --tcp=HOST:PORT too"},
      {{"--insecure_tcp"}, "--insecure_tcp applies to the TCP listener"},
      {{tcp, cert, key, "--insecure_tcp"}, "--insecure_tcp and --tls_cert exclude each other"},
  };
  for (const auto& [flags, message] : bad) {
    SCOPED_TRACE(message);
    std::vector<std::string> args = {"--cpu", "--socket=" + socket_, "--db=" + db_};
    args.insert(args.end(), flags.begin(), flags.end());
    Daemon daemon(KerntunedBinary(), args, dir_.File("refused.log"));
    const std::optional<int> status = daemon.WaitExit(kStartDeadline);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status));
    EXPECT_EQ(WEXITSTATUS(*status), 2);
    EXPECT_THAT(daemon.Log(), HasSubstr(message));
  }
}

TEST_F(KerntunedTlsTest, UnusableTlsFilesStopTheStartNamingTheFile) {
  const std::string missing = dir_.File("missing.pem");
  const std::string empty = dir_.File("empty");
  std::ofstream(empty).flush();
  const std::string cert = "--tls_cert=" + certs_->server_cert();
  const std::string key = "--tls_key=" + certs_->server_key();
  const struct {
    std::vector<std::string> flags;
    std::string message;
  } bad[] = {
      {{"--tls_cert=" + missing, key}, "--tls_cert=" + missing + ": cannot open it"},
      {{cert, "--tls_key=" + certs_->server_cert()},
       "--tls_key=" + certs_->server_cert() + " holds no PEM private key"},
      {{"--tls_cert=" + certs_->server_key(), key},
       "--tls_cert=" + certs_->server_key() + " holds no PEM certificate"},
      {{cert, key, "--tls_client_ca=" + missing}, "--tls_client_ca=" + missing + ": cannot open"},
      {{cert, key, "--token_file=" + empty}, "--token_file=" + empty + " holds no token"},
      {{cert, "--tls_key=" + certs_->client_key()},
       "--tls_key=" + certs_->client_key() + " does not belong to --tls_cert="},
  };
  for (const auto& [flags, message] : bad) {
    SCOPED_TRACE(message);
    std::vector<std::string> args = {"--cpu", "--socket=" + socket_, "--db=" + db_,
                                     "--tcp=127.0.0.1:" + std::to_string(testing::FreeTcpPort())};
    args.insert(args.end(), flags.begin(), flags.end());
    Daemon daemon(KerntunedBinary(), args, dir_.File("refused.log"));
    const std::optional<int> status = daemon.WaitExit(kStartDeadline);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status));
    EXPECT_EQ(WEXITSTATUS(*status), 2);  // a flag value it cannot use
    EXPECT_THAT(daemon.Log(), HasSubstr(message));
  }
}

}  // namespace
}  // namespace kt::server
