// The C++ client and `kerntune run`/`status` against a kerntuned whose TCP
// listener speaks TLS, asks for client certificates and wants a token, with
// certificates the test makes (openssl).
#include <fstream>
#include <string>
#include <vector>

#include "client/daemon_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/cpu_daemon.h"
#include "tests/testing/test_certificates.h"

namespace kt::client {
namespace {

using ::kt::testing::TestCertificates;
using ::testing::HasSubstr;
using testing::ProcessResult;
using testing::RunProcess;

constexpr char kToken[] = "kt-client-test-token-77";

class TlsDaemonTest : public testing::CpuDaemonTest {
 protected:
  static void SetUpTestSuite() { certs_ = new TestCertificates(); }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(certs_->ok()) << certs_->error();
    std::ofstream(token_file_) << kToken << "\n";
    const int port = server::testing::FreeTcpPort();
    ASSERT_GT(port, 0);
    tcp_ = "127.0.0.1:" + std::to_string(port);
    ASSERT_NO_FATAL_FAILURE(
        Start({"--tcp=" + tcp_, "--tls_cert=" + certs_->server_cert(),
               "--tls_key=" + certs_->server_key(), "--tls_client_ca=" + certs_->ca(),
               "--token_file=" + token_file_}));
  }

  // This client's certificate and `token`.
  static TcpCredentials Credentials(const std::string& token) {
    TcpCredentials tcp;
    tcp.root_certs = TestCertificates::Read(certs_->ca());
    tcp.cert_chain = TestCertificates::Read(certs_->client_cert());
    tcp.private_key = TestCertificates::Read(certs_->client_key());
    tcp.token = token;
    return tcp;
  }

  DaemonClient TcpClient(const std::string& token) const {
    DaemonClientOptions options;
    options.target = tcp_;
    options.tcp = Credentials(token);
    options.deadline = absl::Seconds(10);
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  ProcessResult Kerntune(std::vector<std::string> args) const {
    args.insert(args.begin(), KT_KERNTUNE_BINARY);
    args.push_back("--server=" + tcp_);
    return RunProcess(args);
  }

  static TestCertificates* certs_;
  const std::string token_file_ = dir_.File("token");
  std::string tcp_;
};

TestCertificates* TlsDaemonTest::certs_ = nullptr;

TEST_F(TlsDaemonTest, TheLibraryCallsWithItsCertificateAndToken) {
  const DaemonClient client = TcpClient(kToken);
  absl::StatusOr<pb::GetStatusResponse> status = client.GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->backend(), "cpu");
  RunArgs args;
  args.op = pb::OP_SOFTMAX;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = 1;
  args.cols = 4;
  args.input = InlineTensor(std::string(4 * sizeof(float), '\0'));
  absl::StatusOr<pb::RunResponse> run = client.Run(args);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->output_data().size(), 4 * sizeof(float));

  const absl::Status refused = TcpClient("not-the-token").GetStatus().status();
  EXPECT_TRUE(absl::IsUnauthenticated(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("GetStatus on " + tcp_ + ": the bearer token is not"));
}

TEST_F(TlsDaemonTest, TheCliReadsItsTlsAndTokenFiles) {
  const std::vector<std::string> tls = {"--tls_ca=" + certs_->ca(),
                                        "--tls_cert=" + certs_->client_cert(),
                                        "--tls_key=" + certs_->client_key()};
  std::vector<std::string> status = {"status"};
  status.insert(status.end(), tls.begin(), tls.end());
  std::vector<std::string> with_token = status;
  with_token.push_back("--token_file=" + token_file_);
  const ProcessResult ok = Kerntune(with_token);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("backend"));

  std::vector<std::string> run = {"run", "softmax", "--dtype=float32", "--rows=3", "--cols=5",
                                  "--iterations=1", "--token_file=" + token_file_};
  run.insert(run.end(), tls.begin(), tls.end());
  const ProcessResult ran = Kerntune(run);
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_THAT(ran.out, HasSubstr("matches the fp64 reference"));

  const ProcessResult no_token = Kerntune(status);
  EXPECT_EQ(no_token.code, 1);
  EXPECT_THAT(no_token.err, HasSubstr("no bearer token"));
  EXPECT_THAT(no_token.err, HasSubstr("give --token_file"));

  std::vector<std::string> other_ca = {"status", "--tls_ca=" + certs_->other_ca(),
                                       "--token_file=" + token_file_};
  const ProcessResult untrusted = Kerntune(other_ca);
  EXPECT_EQ(untrusted.code, 1);
  EXPECT_THAT(untrusted.err, HasSubstr("--tls_ca must hold the CA that signed the daemon's"));

  const std::string missing = dir_.File("missing.pem");
  const ProcessResult bad_file = Kerntune({"status", "--tls_ca=" + missing});
  EXPECT_EQ(bad_file.code, 2);
  EXPECT_THAT(bad_file.err, HasSubstr("--tls_ca=" + missing + ": cannot open it"));
}

}  // namespace
}  // namespace kt::client
