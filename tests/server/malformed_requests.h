// The table of malformed Run requests shared by the validation unit test
// and the end-to-end test: each with the status code and a piece of the
// message (naming the field) that the daemon must answer.
#ifndef KERNTUNE_TESTS_SERVER_MALFORMED_REQUESTS_H_
#define KERNTUNE_TESTS_SERVER_MALFORMED_REQUESTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kerntune/v1/kerntune.pb.h"

namespace kt::server::testing {

// The --max_request_bytes the table assumes.
inline constexpr int64_t kTableMaxRequestBytes = int64_t{1} << 20;

struct MalformedCase {
  std::string name;
  kerntune::v1::RunRequest request;
  absl::StatusCode code;
  std::string message;  // a substring of the error message
};

std::vector<MalformedCase> MalformedRunRequests();

// A valid request: `op` on rows x cols of `dtype`, all zeros.
kerntune::v1::RunRequest ValidRunRequest(kerntune::v1::Op op, kerntune::v1::DType dtype,
                                         int64_t rows, int64_t cols);

}  // namespace kt::server::testing

#endif  // KERNTUNE_TESTS_SERVER_MALFORMED_REQUESTS_H_
