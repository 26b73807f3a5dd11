// TestCertificates (test_certificates.h).
#include "tests/testing/test_certificates.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#ifndef KT_MAKE_TEST_CERTS
#error "KT_MAKE_TEST_CERTS (the path of make_test_certs.sh) must be defined by the build"
#endif

namespace kt::testing {

TestCertificates::TestCertificates() {
  const std::string log = dir_.File("make_test_certs.log");
  const std::string command = "sh '" KT_MAKE_TEST_CERTS "' '" + dir_.path() + "' > '" + log +
                              "' 2>&1";
  const int status = std::system(command.c_str());
  if (status != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    error_ = "make_test_certs.sh failed (is openssl installed?): " + Read(log);
  }
}

std::string TestCertificates::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace kt::testing
