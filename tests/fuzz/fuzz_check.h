// What the harnesses share: the property check, which aborts so that
// libFuzzer keeps the input as a crash; the harness's own process as a peer
// (the owner of registrations and queues); quiet protobuf parsing.
#ifndef KERNTUNE_TESTS_FUZZ_FUZZ_CHECK_H_
#define KERNTUNE_TESTS_FUZZ_FUZZ_CHECK_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "server/peer_credentials.h"

namespace kt::fuzz {

[[noreturn]] inline void PropertyFailed(const char* condition, const std::string& detail) {
  std::fprintf(stderr, "property failed: %s\n  %s\n", condition, detail.c_str());
  std::abort();
}

inline server::PeerProcess Self() {
  server::PeerProcess self;
  self.pid = getpid();
  self.uid = getuid();
  self.gid = getgid();
  self.start_ticks = server::ProcessStartTicks(self.pid).value_or(0);
  return self;
}

// Protobuf logs every string field with invalid UTF-8 it refuses to parse:
// millions of lines in a fuzzing run. Call from LLVMFuzzerInitialize.
inline void SilenceProtobufLogs() { google::protobuf::SetLogHandler(nullptr); }

}  // namespace kt::fuzz

// `detail` (a std::string expression) is only built when `condition` fails.
#define KT_FUZZ_CHECK(condition, detail)                                  \
  do {                                                                    \
    if (!(condition)) ::kt::fuzz::PropertyFailed(#condition, (detail)); \
  } while (0)

#endif  // KERNTUNE_TESTS_FUZZ_FUZZ_CHECK_H_
