// Certificates for the TLS tests, made afresh by make_test_certs.sh (which
// says what each file is) with the system's openssl.
#ifndef KERNTUNE_TESTS_TESTING_TEST_CERTIFICATES_H_
#define KERNTUNE_TESTS_TESTING_TEST_CERTIFICATES_H_

#include <string>

#include "tests/testing/scoped_temp_dir.h"

namespace kt::testing {

class TestCertificates {
 public:
  // Makes them in a fresh temp dir; ok() says whether that worked (openssl
  // missing, say), error() why.
  TestCertificates();

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // Paths of the PEM files.
  std::string ca() const { return dir_.File("ca.pem"); }
  std::string other_ca() const { return dir_.File("other_ca.pem"); }
  std::string server_cert() const { return dir_.File("server.pem"); }
  std::string server_key() const { return dir_.File("server.key"); }
  std::string client_cert() const { return dir_.File("client.pem"); }
  std::string client_key() const { return dir_.File("client.key"); }
  // The daemon's renewed certificate: the same names, signed by other_ca.
  std::string other_server_cert() const { return dir_.File("other_server.pem"); }
  std::string other_server_key() const { return dir_.File("other_server.key"); }

  // The text of one of them (or of any file).
  static std::string Read(const std::string& path);

 private:
  ScopedTempDir dir_;
  std::string error_;
};

}  // namespace kt::testing

#endif  // KERNTUNE_TESTS_TESTING_TEST_CERTIFICATES_H_
